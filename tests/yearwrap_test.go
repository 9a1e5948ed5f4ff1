package tests

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
)

// TestYearWrapRealTime crosses a code wrap in real time, on the server's clock:
// a calendar whose year begins two seconds from now makes the codes restart at
// 0 while counting goes on. Every sum must match the model, and the buckets of
// the old year must be counted, then leave, like any others. It proves that it
// crossed: the buckets the server wrote (on its own clock) carry codes of the
// old year's last buckets and of the new year's first ones, and the adds ran
// on both sides of the boundary; a run that stays within one year fails.
func TestYearWrapRealTime(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 2 * time.Second, Bucket: 500 * time.Millisecond}
		// The wrap falls on a bucket edge 2 s (plus alignment) from now; on a
		// machine so loaded that making the store took most of that, again
		// with a longer lead, so that adds run before the wrap too.
		var wrap time.Time
		var s *store.Store
		for lead := 2 * time.Second; ; lead *= 2 {
			wrap = time.Now().Truncate(time.Second).Add(lead)
			_, next := codec.UTC.Year(wrap)
			s, _ = newStore(t, tg, w, hook.WithCalendar(codec.Shifted(wrap.Sub(next))).(store.Option))
			if time.Until(wrap) >= 1500*time.Millisecond || lead >= 16*time.Second {
				break
			}
			t.Logf("making the store left %v before the wrap: again, with a lead of %v", time.Until(wrap), 2*lead)
		}
		ctx := ctxT(t)
		cd := hook.Codec(s)

		// The codes of the old year's last buckets and of the new year's
		// first ones, as far as the adds below can reach even on a stalled
		// machine (reach buckets, 500 s): the year's last code is some 63
		// million at 500 ms buckets, far from the first.
		const reach = 1000
		lastOld := cd.Code(wrap.Add(-time.Millisecond))
		require.Greater(t, lastOld, int64(100*reach), "the old year's last code")
		require.EqualValues(t, 0, cd.Code(wrap), "the new year's first code")
		oldTail := func(c int64) bool { return c > lastOld-reach && c <= lastOld }
		newHead := func(c int64) bool { return c >= 0 && c < reach }
		var evs []event
		sawOld, sawNew := map[int64]bool{}, map[int64]bool{}
		addedBefore, addedAfter := false, false
		for i := 0; i < 20 || !addedAfter && i < 80; i++ { // (a longer lead takes more adds to pass the wrap)
			// Act in the middle of a bucket so that the server's clock and ours
			// (the same host clock) agree on the bucket.
			now := time.Now()
			_, start, _ := cd.Bounds(now)
			mid := start.Add(w.Bucket / 2)
			if mid.Before(now) {
				mid = mid.Add(w.Bucket)
			}
			time.Sleep(time.Until(mid))
			before := time.Now()
			got, err := s.Add(ctx, "wrap", 1)
			after := time.Now()
			require.NoError(t, err)
			snap, err := s.Inspect(ctx, "wrap")
			require.NoError(t, err)
			// The server's instant lies between before and after (the same
			// host clock). When both are in one bucket, the model knows where
			// the event went; when the call crossed bucket edges (a slow or
			// stalled machine: one or more), the server's buckets tell which
			// bucket got it: the one holding one more than the model's count.
			at := before
			if !bucketStart(cd, before).Equal(bucketStart(cd, after)) {
				// (A stall so long that the bucket has left the window
				// by the snapshot: the one bucket whose model sum is
				// the answer.)
				found, bySum := false, []time.Time(nil)
				for b := bucketStart(cd, before); !b.After(after) && !found; {
					for _, sb := range snap.Buckets {
						if sb.Start.Equal(b) && sb.Value == bucketCount(cd, evs, b)+1 {
							at, found = b, true
						}
					}
					if modelSum(cd, append(evs[:len(evs):len(evs)], event{b, 1}), b, w.Length) == got {
						bySum = append(bySum, b)
					}
					_, _, b = cd.Bounds(b)
				}
				if !found && len(bySum) == 1 {
					at, found = bySum[0], true
				}
				require.True(t, found, "add %d took from %v to %v: no one bucket of that span holds it (%+v)", i, before, after, snap.Buckets)
				t.Logf("add %d crossed a bucket edge (%v to %v): counted in the bucket of %v", i, before, after, at)
			}
			evs = append(evs, event{at, 1})
			require.Equal(t, modelSum(cd, evs, at, w.Length), got, "add %d at %v..%v (wrap at %v)", i, before, after, wrap)
			// after is no later than the server's instant of the add when
			// the add ran before the wrap, and before, no earlier, after it.
			addedBefore = addedBefore || after.Before(wrap)
			addedAfter = addedAfter || !before.Before(wrap)
			for _, b := range snap.Buckets {
				code, err := codec.Decode(b.Field)
				require.NoError(t, err)
				switch {
				case oldTail(code):
					sawOld[code] = true
				case newHead(code):
					sawNew[code] = true
				default:
					t.Fatalf("bucket %s (code %d) is neither among the old year's last %d codes (to %d) nor the new year's first", b.Field, code, reach, lastOld)
				}
			}
			if at.After(wrap.Add(w.Length)) {
				// No bucket that had left the window at the add's instant
				// is kept (the snapshot, taken a little later, may already
				// see one more bucket leave).
				low := bucketStart(cd, at).Add(-w.Length)
				for _, b := range snap.Buckets {
					require.True(t, b.Start.After(low), "stale bucket %s (start %v) after the wrap, at %v", b.Field, b.Start, at)
				}
			}
		}
		require.True(t, addedBefore && addedAfter, "the adds did not run on both sides of the year end at %v", wrap)
		require.NotEmpty(t, sawOld, "no bucket of the old year's end (codes %d to %d) was written", lastOld-reach+1, lastOld)
		require.NotEmpty(t, sawNew, "no bucket of the new year's start (codes 0 to %d) was written", reach-1)
		t.Logf("%s: buckets written at the old year's end %v, at the new year's start %v", tg.name, sortedCodes(sawOld), sortedCodes(sawNew))
	})
}

// sortedCodes returns a set's codes, sorted.
func sortedCodes(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func bucketStart(c *codec.Codec, t time.Time) time.Time {
	_, start, _ := c.Bounds(t)
	return start
}

// bucketCount is the model's count in the bucket that starts at start.
func bucketCount(c *codec.Codec, evs []event, start time.Time) int64 {
	var n int64
	for _, e := range evs {
		if bucketStart(c, e.at).Equal(start) {
			n += e.delta
		}
	}
	return n
}
