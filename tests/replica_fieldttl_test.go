package tests

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestReplicaFieldTTLExpiredNotDeleted runs the field-TTL backend (Redis 8) on
// a primary whose active expiry is off (DEBUG SET-ACTIVE-EXPIRE 0), so that
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
	ctx := ctxT(t)
	primary := harness.Fresh(t, harness.Redis80, "--enable-debug-command", "yes")
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
	want := func(at time.Time) []int64 {
		out := make([]int64, len(keys))
		for i, k := range keys {
			out[i] = modelSum(codec, model[k], at, w.Length)
		}
		return out
	}
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
