package tests

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/codec"
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

// TestReplicaFieldTTLExpiredNotDeleted runs the field-TTL backend (Redis 8,
// Valkey 9) on a primary whose active expiry is off (DEBUG SET-ACTIVE-EXPIRE 0), so that
// buckets whose field TTL has passed stay in the hash, on the primary and on
// its replica, until something deletes them. It proves:
//
//   - the sums read on the replica equal those read on the primary, and both
//     equal an exact model of what was written when, at instants when the
//     primary's hash holds expired fields that were never deleted (HLEN counts
//     them, the store's reads must not);
//   - after the replica is promoted (REPLICAOF NO ONE) and the primary is gone,
//     nothing is revived and nothing is lost: its sums, and the sums its own
//     new writes return, equal the model until every bucket has left, and
//     then are 0.
//
// Sums are compared only when every read finished within the bucket they
// started in (no field can expire in between); a slower one is taken again
// at the next bucket.
func TestReplicaFieldTTLExpiredNotDeleted(t *testing.T) {
	t.Parallel()
	for _, kind := range fieldTTLKinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			replicaExpiredNotDeleted(t, kind)
		})
	}
}

// fieldTTLKinds are the servers with hash-field TTL: Redis 8, Valkey 9.
var fieldTTLKinds = []harness.Kind{harness.Redis80, harness.Valkey9}

func replicaExpiredNotDeleted(t *testing.T, kind harness.Kind) {
	ctx := ctxT(t)
	primary := harness.Fresh(t, kind, "--enable-debug-command", "yes")
	primary.Cmd(t, "DEBUG", "SET-ACTIVE-EXPIRE", "0")
	replica := harness.Replica(t, primary)
	pc, rc := primary.Client(t), replica.Client(t)

	w := store.Window{Length: 2 * time.Second, Bucket: 500 * time.Millisecond}
	opts := []store.Option{store.WithBackend("nativehash-fieldttl")}
	ps, err := store.New(ctx, pc, w, opts...)
	require.NoError(t, err)
	require.Equal(t, "nativehash-fieldttl", ps.Detection().Backend, ps.Detection().Reason)
	rs, err := store.New(ctx, rc, w, opts...)
	require.NoError(t, err)
	codec := hook.Codec(ps)

	keys := []string{"a", "b", "c"}
	model := map[string][]event{}
	want := func(at time.Time) []int64 { return modelSums(codec, model, keys, at, w.Length) }
	// write adds to every key at the instant at, through s, and checks the
	// sums the writes return against the model (when the write finished
	// within at's bucket).
	write := func(s *store.Store, at time.Time, step int) {
		t.Helper()
		for j, k := range keys {
			d := int64(step*10 + j + 1)
			model[k] = append(model[k], event{at, d})
			got, err := s.At(at).Add(ctx, k, d)
			require.NoError(t, err)
			if inBucket(codec, at) {
				require.Equal(t, modelSum(codec, model[k], at, w.Length), got, "the sum the write of %s at %v returned", k, at)
			}
		}
	}
	rawFields := func(srv *harness.Server, k string) int {
		rk, err := hook.RedisKey(ps, k)
		require.NoError(t, err)
		n, err := strconv.Atoi(srv.Cmd(t, "HLEN", rk))
		require.NoError(t, err)
		return n
	}

	// On the primary, one write a bucket to every key for six buckets, then
	// up to three buckets of reads alone, and again, until the reads are
	// compared while at least two expired fields are still in the hash on
	// both nodes. The sums on both nodes are read at each step's instant.
	// Nothing expires fields actively, and once the writes stop nothing
	// deletes them at all (while they write, the store's scripts delete the
	// buckets they see leave); with active expiry on, the server would have
	// deleted the older one by then.
	checked, withExpired, writes, reads := 0, 0, 0, 0
	for step := 0; withExpired == 0; step++ {
		require.Less(t, step, 80, "the sums were never compared while expired fields stayed in the hash (%d compared)", checked)
		at := nextBucket(codec)
		writing := writes < 6
		if writing {
			write(ps, at, step)
			writes++
		} else if reads++; reads == 3 {
			writes, reads = 0, 0
		}
		require.EqualValues(t, 1, primary.WaitReplicas(t, harness.Prefix(t)+"wait", 5*time.Second), "the replica did not acknowledge the writes")
		snap, err := ps.Inspect(ctx, "a")
		require.NoError(t, err)
		praw, rraw := rawFields(primary, "a"), rawFields(replica, "a")
		psum, err := ps.At(at).SumMany(ctx, keys)
		require.NoError(t, err)
		rsum, err := rs.At(at).SumMany(ctx, keys)
		require.NoError(t, err)
		if !inBucket(codec, at) {
			t.Logf("step %d took longer than its bucket: not compared", step)
			continue
		}
		checked++
		require.Equal(t, want(at), psum, "the primary's sums at %v", at)
		require.Equal(t, want(at), rsum, "the replica's sums at %v", at)
		if !writing && praw >= len(snap.Buckets)+2 && rraw >= len(snap.Buckets)+2 {
			withExpired++
		}
		t.Logf("step %d: sums %v on both; a's hash holds %d fields on the primary, %d on the replica, %d live", step, psum, praw, rraw, len(snap.Buckets))
	}

	// Promote the replica with expired fields still in its hashes, then lose
	// the primary.
	require.EqualValues(t, 1, primary.WaitReplicas(t, harness.Prefix(t)+"wait", 5*time.Second), "the replica did not acknowledge the writes")
	snap, err := rs.Inspect(ctx, "a")
	require.NoError(t, err)
	raw := rawFields(replica, "a")
	require.GreaterOrEqual(t, raw, len(snap.Buckets)+2, "expired fields left in the replica's hash at its promotion")
	require.NotEmpty(t, snap.Buckets, "no live bucket left at the promotion")
	t.Logf("promotion: a's hash holds %d fields on the replica, %d live", raw, len(snap.Buckets))
	require.NoError(t, rc.Do(ctx, rc.B().Replicaof().No().One().Build()).Error())
	primary.Stop()

	// On the promoted node: a few writes of its own, then reads until every
	// bucket has left the window. Each sum equals the model: an expired
	// bucket counting again would show as more, a lost one as less.
	checked, drained := 0, false
	for step := 100; step < 140 && !drained; step++ {
		at := nextBucket(codec)
		if step < 103 {
			write(rs, at, step)
		}
		got, err := rs.At(at).SumMany(ctx, keys)
		require.NoError(t, err)
		if !inBucket(codec, at) {
			t.Logf("step %d took longer than its bucket: not compared", step)
			continue
		}
		checked++
		require.Equal(t, want(at), got, "the promoted node's sums at %v", at)
		drained = step >= 103 && slicesAllZero(got)
		t.Logf("step %d on the promoted node: sums %v", step, got)
	}
	require.True(t, drained, "the promoted node's sums never drained to 0 (%d compared)", checked)
}

// TestFieldTTLRestart runs the field-TTL backend (Redis 8, Valkey 9) on a
// primary that persists every write (AOF, fsync always) and its replica, and
// restarts the replica, then the primary (SIGKILL, then the same container
// started again). After each restart, once the replica has synced: the sums
// on both nodes equal an exact model of what was written when (nothing lost,
// nothing revived), and every bucket field's expiry on the replica is the
// primary's, to the ms. Then the writes stop and the sums drain to 0 on both.
func TestFieldTTLRestart(t *testing.T) {
	t.Parallel()
	for _, kind := range fieldTTLKinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			fieldTTLRestart(t, kind)
		})
	}
}

func fieldTTLRestart(t *testing.T, kind harness.Kind) {
	ctx := ctxT(t)
	primary := harness.Fresh(t, kind, "--appendonly", "yes", "--appendfsync", "always")
	replica := harness.Replica(t, primary)
	harness.Use(t, harness.AreaFaults)
	w := store.Window{Length: 16 * time.Second, Bucket: time.Second}
	opts := []store.Option{store.WithBackend("nativehash-fieldttl")}
	ps, err := store.New(ctx, primary.Client(t), w, opts...)
	require.NoError(t, err)
	rs, err := store.New(ctx, replica.Client(t), w, opts...)
	require.NoError(t, err)
	codec := hook.Codec(ps)
	keys := []string{"a", "b"}
	model := map[string][]event{}
	want := func(at time.Time) []int64 { return modelSums(codec, model, keys, at, w.Length) }
	synced := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(replica.Cmd(t, "INFO", "replication"), "master_link_status:up") {
			require.True(t, time.Now().Before(deadline), "the replica never synced again")
			time.Sleep(50 * time.Millisecond)
		}
		require.EqualValues(t, 1, primary.WaitReplicas(t, harness.Prefix(t)+"wait", 5*time.Second), "the replica did not acknowledge the writes")
	}
	// compare reads both nodes at the start of a bucket; the reads are
	// compared when they finished within it (no field expired in between).
	// It reports whether the sums are 0; a restart slower than the window
	// may leave nothing to lose, so live is asserted only when the last write
	// is still well within the window.
	var last time.Time
	live := func(what string, zero bool) {
		t.Helper()
		if time.Since(last) < w.Length/2 {
			require.False(t, zero, "%s: every count was lost", what)
		} else {
			t.Logf("%s: the last write left the window: nothing to compare", what)
		}
	}
	compare := func(what string) bool {
		t.Helper()
		for range 10 {
			at := nextBucket(codec)
			psum, err := ps.At(at).SumMany(ctx, keys)
			require.NoError(t, err)
			rsum, err := rs.At(at).SumMany(ctx, keys)
			require.NoError(t, err)
			if !inBucket(codec, at) {
				continue
			}
			require.Equal(t, want(at), psum, "%s: the primary's sums at %v", what, at)
			require.Equal(t, want(at), rsum, "%s: the replica's sums at %v", what, at)
			t.Logf("%s: sums %v on both", what, psum)
			return slicesAllZero(psum)
		}
		t.Fatalf("%s: no read finished within its bucket", what)
		return false
	}
	expiries := func(what string) {
		t.Helper()
		rk, err := hook.RedisKey(ps, "a")
		require.NoError(t, err)
		fields := strings.Fields(primary.Cmd(t, "HKEYS", rk))
		if len(fields) == 0 {
			return
		}
		args := append([]string{"HPEXPIRETIME", rk, "FIELDS", strconv.Itoa(len(fields))}, fields...)
		require.Equal(t, primary.Cmd(t, args...), replica.Cmd(t, args...), "%s: the fields' expiry on the replica", what)
	}
	step := 0
	writes := func(n int) {
		t.Helper()
		for range n {
			at := nextBucket(codec)
			for j, k := range keys {
				d := int64(step*10 + j + 1)
				_, err := ps.At(at).Add(ctx, k, d)
				require.NoError(t, err)
				model[k] = append(model[k], event{at, d})
			}
			last = time.Now()
			step++
		}
	}

	writes(4)
	synced()
	expiries("before the restarts")
	live("before the restarts", compare("before the restarts"))

	replica.Restart(t)
	synced()
	expiries("after the replica's restart")
	live("after the replica's restart", compare("after the replica's restart"))

	writes(2)
	primary.Restart(t)
	synced()
	expiries("after the primary's restart")
	live("after the primary's restart", compare("after the primary's restart"))
	writes(2)
	synced()
	expiries("after the primary's restart and new writes")

	drained := false
	for i := 0; i < 40 && !drained; i++ {
		drained = compare("draining")
	}
	require.True(t, drained, "the sums never drained to 0")
}

// modelSums are modelSum of each key's events.
func modelSums(c *codec.Codec, model map[string][]event, keys []string, at time.Time, length time.Duration) []int64 {
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = modelSum(c, model[k], at, length)
	}
	return out
}

// nextBucket waits for the next bucket to start, and returns an instant 1 ms
// into it.
func nextBucket(c *codec.Codec) time.Time {
	_, _, end := c.Bounds(time.Now())
	at := end.Add(time.Millisecond)
	time.Sleep(time.Until(at))
	return at
}

// inBucket tells whether now is still in the bucket of at.
func inBucket(c *codec.Codec, at time.Time) bool {
	_, _, end := c.Bounds(at)
	return time.Now().Before(end)
}

func slicesAllZero(v []int64) bool {
	for _, x := range v {
		if x != 0 {
			return false
		}
	}
	return true
}
