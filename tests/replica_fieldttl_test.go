package tests

import (
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
