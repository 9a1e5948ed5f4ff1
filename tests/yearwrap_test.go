package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/fieldcodec"
	"github.com/windowstore/windowstore/store"
)

// TestYearWrapRealTime crosses a code wrap in real time, on the server's clock:
// a calendar whose year begins two seconds from now makes the codes restart at
// 0 while counting goes on. Every sum must match the model, and the buckets of
// the old year must be counted, then leave, like any others.
func TestYearWrapRealTime(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		t.Parallel()
		w := store.Window{Length: 2 * time.Second, Bucket: 500 * time.Millisecond}
		// The wrap falls on a bucket edge 2 s (plus alignment) from now.
		wrap := time.Now().Truncate(time.Second).Add(2 * time.Second)
		_, next := fieldcodec.UTC.Year(wrap)
		cal := fieldcodec.Shifted(wrap.Sub(next))
		s, _ := newStore(t, tg, w, store.WithCalendar(cal))
		ctx := ctxT(t)
		codec := s.Codec()

		var evs []event
		sawOld, sawNew := false, false
		for i := 0; i < 20; i++ {
			// Act in the middle of a bucket so that the server's clock and ours
			// (the same host clock) agree on the bucket.
			now := time.Now()
			_, start, _ := codec.Bounds(now)
			mid := start.Add(w.Bucket / 2)
			if mid.Before(now) {
				mid = mid.Add(w.Bucket)
			}
			time.Sleep(time.Until(mid))
			at := time.Now()
			evs = append(evs, event{at, 1})
			got, err := s.Add(ctx, "wrap", 1)
			require.NoError(t, err)
			require.Equal(t, modelSum(codec, evs, at, w.Length), got, "add %d at %v (wrap at %v)", i, at, wrap)
			snap, err := s.Inspect(ctx, "wrap")
			require.NoError(t, err)
			for _, b := range snap.Buckets {
				code, err := fieldcodec.Decode(b.Field)
				require.NoError(t, err)
				if code < 10 {
					sawNew = true
				} else {
					sawOld = true
				}
			}
			if at.After(wrap.Add(w.Length)) {
				for _, b := range snap.Buckets {
					require.True(t, b.Live, "stale bucket %s after the wrap", b.Field)
				}
			}
		}
		require.True(t, sawOld && sawNew, "the test never saw both years' codes")
	})
}
