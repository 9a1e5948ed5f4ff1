package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// span is what the client knows of an instant on the server's clock (this
// host's clock): it lies between from and to.
type span struct{ from, to time.Time }

func (a span) add(d time.Duration) span { return span{a.from.Add(d), a.to.Add(d)} }

// meets tells whether a and b can be the same instant, to the millisecond the
// servers count TTLs in.
func (a span) meets(b span) bool {
	return !a.to.Add(time.Millisecond).Before(b.from) && !b.to.Add(time.Millisecond).Before(a.from)
}

func (a span) String() string {
	return a.from.Format("15:04:05.000") + ".." + a.to.Format("15:04:05.000")
}

// TestReplication writes on a master and checks its replica. Before the
// promotion: the replica's sums equal the master's, read at one instant of
// the client's clock; every field's expiry on the replica is the master's
// (within a few ms), and so is the key's. After the replica is promoted and
// the master is gone: the sums equal what the master acknowledged, then drain
// to 0 within the window, and the keys vanish.
func TestReplication(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		master := harness.Fresh(t, tg.kind)
		replica := harness.Replica(t, master)
		mc, rc := master.Client(t), replica.Client(t)

		w := store.Window{Length: 3 * time.Second, Bucket: 500 * time.Millisecond}
		opts := []store.Option{store.WithBackend(tg.backend)}
		ms, err := store.New(ctx, mc, w, opts...)
		require.NoError(t, err)
		require.Equal(t, tg.wantBackend, ms.Detection().Backend)
		keys := []string{"a", "b", "c"}
		for i := 0; i < 8; i++ {
			for j, k := range keys {
				_, err := ms.Add(ctx, k, int64(j+1))
				require.NoError(t, err)
			}
			time.Sleep(120 * time.Millisecond)
		}
		// WAIT 1 (after a write of its own on one connection): the replica has
		// every write the master acknowledged.
		require.EqualValues(t, 1, master.WaitReplicas(t, harness.Prefix(t)+"wait", 2*time.Second),
			"the replica did not acknowledge the writes within 2 s")

		rs, err := store.New(ctx, rc, w, opts...)
		require.NoError(t, err)
		limit := w.Length + w.Bucket
		// Every field's expiry, and the key's, is the same instant on both. A
		// TTL counts from when the server ran the command, which lies within
		// the call: the expiry lies within the call's span plus the TTL (as
		// exact as the machine's scheduling allows).
		inspect := func(s *store.Store, k string) (store.Snapshot, span) {
			from := time.Now()
			snap, err := s.Inspect(ctx, k)
			require.NoError(t, err)
			return snap, span{from, time.Now()}
		}
		widest := time.Duration(0)
		for _, k := range keys {
			msnap, mcall := inspect(ms, k)
			rsnap, rcall := inspect(rs, k) // read-only script: runs on the replica
			widest = max(widest, mcall.to.Sub(mcall.from), rcall.to.Sub(rcall.from))
			require.NotEmpty(t, rsnap.Buckets)
			mfields := map[string]store.Bucket{}
			for _, b := range msnap.Buckets {
				mfields[b.Field] = b
			}
			for _, b := range rsnap.Buckets {
				mb, ok := mfields[b.Field]
				if !ok {
					// The field expired on the master between the two
					// snapshots (the replica waits for the master's deletion).
					require.LessOrEqual(t, b.TTL, time.Duration(0), "%s field %s is on the replica only", k, b.Field)
					continue
				}
				require.Equal(t, mb.Value, b.Value, "%s field %s value on the replica", k, b.Field)
				// A field's TTL: its own (field-TTL backends), or its key's
				// (the plain hash, whose fields live as long as the key).
				require.Greater(t, mb.TTL, time.Duration(0), "%s field %s TTL on the master", k, b.Field)
				require.LessOrEqual(t, mb.TTL, limit, "%s field %s TTL on the master", k, b.Field)
				me, re := mcall.add(mb.TTL), rcall.add(b.TTL)
				require.True(t, me.meets(re), "%s field %s expires at another time on the replica: %v, on the master %v (TTLs %v and %v)",
					k, b.Field, re, me, b.TTL, mb.TTL)
			}
			if tg.wantBackend != "tairhash" {
				require.Greater(t, msnap.KeyTTL, time.Duration(0))
				require.LessOrEqual(t, msnap.KeyTTL, limit)
				me, re := mcall.add(msnap.KeyTTL), rcall.add(rsnap.KeyTTL)
				require.True(t, me.meets(re), "%s key expires at another time on the replica: %v, on the master %v", k, re, me)
			}
		}
		t.Logf("%s: field and key expiries equal on the replica, to within %v (the widest Inspect call)", tg.name, widest+time.Millisecond)

		// The same sums on both, at one instant of the client's clock, taken
		// just after a bucket starts: fields expire on the server's real
		// clock (field-TTL backends), and none expires before the next bucket
		// starts. Reads that took longer than that are taken again.
		same := func(what string, other *store.Store) []int64 {
			t.Helper()
			for try := 1; ; try++ {
				at := freshBucket(ms)
				want, err := ms.At(at).SumMany(ctx, keys)
				require.NoError(t, err)
				got, err := other.At(at).SumMany(ctx, keys)
				require.NoError(t, err)
				if time.Since(at) >= w.Bucket-time.Millisecond && try < 5 {
					continue // a field may have expired between the reads
				}
				require.Equal(t, want, got, "%s's sums at %v", what, at)
				return want
			}
		}
		want := same("the replica", rs)
		require.NotEqual(t, []int64{0, 0, 0}, want)
		// Promote the replica: everything the master acknowledged is there
		// (no write has happened since WAIT).
		require.NoError(t, rc.Do(ctx, rc.B().Replicaof().No().One().Build()).Error())
		same("the promoted replica", rs)
		master.Stop()
		deadline := time.Now().Add(w.Length + w.Bucket)
		for {
			got, err := rs.SumMany(ctx, keys)
			require.NoError(t, err)
			if got[0] == 0 && got[1] == 0 && got[2] == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "sums %v did not drain within the window", got)
			time.Sleep(100 * time.Millisecond)
		}
		// The keys themselves go too.
		gone := func() bool {
			n, err := rc.Do(context.Background(), rc.B().Dbsize().Build()).AsInt64()
			return err == nil && n == 0
		}
		if tg.wantBackend == "tairhash" {
			// TairHash deletes a key when its active expiry has removed the last
			// field. The module's SORT-mode build does that at once; its default
			// ("scan") build was seen to leave the empty keys on a promoted
			// replica. The sums are right either way; say so loudly.
			deadline := time.Now().Add(3 * time.Second)
			for !gone() && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			if !gone() {
				t.Logf("WARNING: TairHash keys with no live field linger on the promoted replica (a scan-mode module build?)")
			}
			return
		}
		require.Eventually(t, gone, 3*time.Second, 100*time.Millisecond, "keys outlived their buckets on the promoted replica")
	})
}

// freshBucket returns an instant just after a bucket of s starts, no later
// than now: it waits for the next bucket when the current one is more than
// half gone.
func freshBucket(s *store.Store) time.Time {
	w := s.Window()
	_, start, _ := hook.Codec(s).Bounds(time.Now())
	if time.Since(start) > w.Bucket/2 {
		time.Sleep(time.Until(start.Add(w.Bucket + time.Millisecond)))
		_, start, _ = hook.Codec(s).Bounds(time.Now())
	}
	at := start.Add(time.Millisecond)
	time.Sleep(time.Until(at))
	return at
}
