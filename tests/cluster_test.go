package tests

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestCluster runs the store on a real 3-master, 3-replica Redis Cluster:
// counters across many slots, a batch read spanning every node, every
// operation the docs name on keys of every master (see clusterOps), a slot
// moved under load (MOVED and ASK), and a master killed.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := harness.NewCluster(t)
	c := cl.Client(t)
	ctx := ctxT(t)
	w := store.Window{Length: 5 * time.Minute, Bucket: time.Second}
	s, err := store.New(ctx, c, w)
	require.NoError(t, err)

	keys := make([]string, 300)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
		_, err := s.Add(ctx, keys[i], int64(i))
		require.NoError(t, err)
	}
	masters := map[string]bool{}
	for _, k := range keys {
		rk, _ := hook.RedisKey(s, k)
		slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
		require.NoError(t, err)
		masters[cl.Master(t, c, slot).Addr] = true
	}
	require.Len(t, masters, 3, "the keys must span every master")

	t.Run("batch read spans every node", func(t *testing.T) {
		sums, err := s.SumMany(ctx, keys)
		require.NoError(t, err)
		for i, n := range sums {
			require.EqualValues(t, i, n, keys[i])
		}
		// Entity views keep one user's counters in one slot.
		u := s.Entity("user:7")
		for i, f := range []string{"logins", "spend", "pw-resets"} {
			_, err := u.Add(ctx, f, int64(i+1))
			require.NoError(t, err)
		}
		slots := map[int64]bool{}
		for _, f := range []string{"logins", "spend", "pw-resets"} {
			rk, _ := hook.RedisKey(u, f)
			slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
			require.NoError(t, err)
			slots[slot] = true
		}
		require.Len(t, slots, 1)
		sums, err = u.SumMany(ctx, []string{"logins", "spend", "pw-resets"})
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2, 3}, sums, "one slot's keys, read as one run, each its own sum")
	})

	t.Run("limiter keys with braces spread over slots", func(t *testing.T) {
		// A user's {x} does not choose the slot: every limiter key is tagged
		// with its own escaped key, so keys that all hold "{x}" spread as
		// any others do.
		lg, err := limit.NewLog(c, "perminute", 1000, time.Minute, limit.WithPrefix("rl:"))
		require.NoError(t, err)
		slots, masters := map[int64]bool{}, map[string]bool{}
		for i := 0; i < 100; i++ {
			k := "{x}" + strconv.Itoa(i)
			d, err := lg.Allow(ctx, k, 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			rk := "rl:{%7Bx%7D" + strconv.Itoa(i) + "}:perminute"
			n, err := c.Do(ctx, c.B().Exists().Key(rk).Build()).AsInt64()
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the limiter's key is %s", rk)
			slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
			require.NoError(t, err)
			slots[slot] = true
			masters[cl.Master(t, c, slot).Addr] = true
		}
		require.Greater(t, len(slots), 90, "the user's braces chose the slot")
		require.Len(t, masters, 3)
	})

	t.Run("every operation across slots", func(t *testing.T) { clusterOps(t, cl, c) })

	t.Run("a slot moves under load", func(t *testing.T) {
		u := s.Entity("hot")
		rk, _ := hook.RedisKey(u, "c0")
		slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
		require.NoError(t, err)
		src := cl.Master(t, c, slot)
		dst := cl.OtherMaster(t, src)
		require.NotNil(t, dst)
		var names []string
		for i := 0; i < 60; i++ {
			names = append(names, "c"+strconv.Itoa(i))
		}
		// Each of the 50 counters gets a bucket before the current one too:
		// on the plain hash its buckets' hash then exists beside its head,
		// so that the two keys move with the slot, rather than one of them
		// being missing on both nodes (which the cluster answers with
		// TRYAGAIN for as long as the slot is split; the store resends).
		for _, k := range names[:50] {
			_, err := u.At(time.Now().Add(-2*time.Second)).Add(ctx, k, 1)
			require.NoError(t, err)
			_, err = u.Add(ctx, k, 1)
			require.NoError(t, err)
		}
		for _, n := range []*harness.Server{src, dst} {
			n.Cmd(t, "CONFIG", "RESETSTAT")
		}
		var added, reads atomic.Int64
		var errs atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var stopOnce sync.Once
		halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
		// A require that fails below ends the subtest with FailNow: the
		// workers stop before it returns, or they would log after it ended
		// (a panic of package testing).
		defer halt()
		for g := 0; g < 4; g++ { // writers
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := names[(g*13+i)%60] // 50 existing keys and 10 new ones
					if _, err := u.Add(ctx, k, 1); err != nil {
						if errs.Add(1) <= 5 { // the first few: a failure floods the log otherwise
							t.Logf("add during migration: %v", err)
						}
						continue
					}
					added.Add(1)
				}
			}(g)
		}
		// Readers: Sum and SumMany go on too, and no count ever goes down (a
		// read that reached a node without the key would see less).
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				last := make([]int64, len(names))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					var got []int64
					if g == 0 {
						j := i % len(names)
						n, err := u.Sum(ctx, names[j])
						if err != nil {
							if errs.Add(1) <= 5 { // the first few: a failure floods the log otherwise
								t.Logf("sum during migration: %v", err)
							}
							continue
						}
						got = append([]int64(nil), last...)
						got[j] = n
					} else {
						var err error
						if got, err = u.SumMany(ctx, names); err != nil {
							if errs.Add(1) <= 5 { // the first few: a failure floods the log otherwise
								t.Logf("sum many during migration: %v", err)
							}
							continue
						}
					}
					for j := range got {
						if got[j] < last[j] {
							t.Errorf("%s went down from %d to %d during the migration", names[j], last[j], got[j])
						}
					}
					last = got
					reads.Add(1)
				}
			}(g)
		}
		sl := strconv.FormatInt(slot, 10)
		srcID, dstID := src.ID(t), dst.ID(t)
		dst.Cmd(t, "CLUSTER", "SETSLOT", sl, "IMPORTING", srcID)
		src.Cmd(t, "CLUSTER", "SETSLOT", sl, "MIGRATING", dstID)
		// While the slot is split, keys live on both nodes and the clients'
		// slot map still names src: an operation on a key that moved can only
		// succeed through an ASK redirect to dst.
		split := false
		var addedSplit, readsSplit int64
		for {
			ks := strings.Fields(src.Cmd(t, "CLUSTER", "GETKEYSINSLOT", sl, "5"))
			if len(ks) == 0 {
				break
			}
			src.Cmd(t, append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port()), "", "0", "5000", "KEYS"}, ks...)...)
			onSrc, _ := strconv.Atoi(src.Cmd(t, "CLUSTER", "COUNTKEYSINSLOT", sl))
			onDst, _ := strconv.Atoi(dst.Cmd(t, "CLUSTER", "COUNTKEYSINSLOT", sl))
			if onSrc > 0 && onDst > 0 {
				a0, r0 := added.Load(), reads.Load()
				time.Sleep(30 * time.Millisecond) // let operations run against the split slot
				if !split {
					split = true
					t.Logf("MIGRATION: slot %s split: %d keys on the source, %d on the target", sl, onSrc, onDst)
				}
				addedSplit += added.Load() - a0
				readsSplit += reads.Load() - r0
			}
		}
		cl.SetSlotNode(t, slot, dst)
		// Keep going a little after the move: the clients' maps are stale
		// until a MOVED tells them.
		a0 := added.Load()
		require.Eventually(t, func() bool { return added.Load() > a0+200 }, 30*time.Second, 10*time.Millisecond,
			"adds stalled after the slot moved: %d errors", errs.Load())
		halt()
		require.Zero(t, errs.Load(), "operations failed while the slot moved")
		require.True(t, split, "the slot was never split between the two nodes")
		require.Positive(t, addedSplit, "no add ran while the slot was split")
		require.Positive(t, readsSplit, "no read ran while the slot was split")
		asking := statField(t, dst.Cmd(t, "INFO", "commandstats"), "cmdstat_asking", "calls")
		t.Logf("MIGRATION: %d adds and %d reads in all, %d adds and %d reads while the slot was split; ASKING sent to the target %d times; redirect errors from the source: %s",
			added.Load(), reads.Load(), addedSplit, readsSplit, asking, strings.Join(redirects(src.Cmd(t, "INFO", "errorstats")), " "))
		require.Positive(t, asking, "no operation was redirected with ASK to the target")
		sums, err := u.SumMany(ctx, names)
		require.NoError(t, err)
		var total int64
		for _, n := range sums {
			total += n
		}
		require.Equal(t, 2*50+added.Load(), total, "counts were lost or doubled while the slot moved")
		require.Equal(t, dst, cl.Master(t, c, slot))
		onSrc := src.Cmd(t, "CLUSTER", "COUNTKEYSINSLOT", sl)
		require.Equal(t, "0", onSrc, "keys left behind on the source")
	})

	t.Run("a master is killed", func(t *testing.T) {
		rk, _ := hook.RedisKey(s, "user:1")
		slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
		require.NoError(t, err)
		victim := cl.Master(t, c, slot)
		// Acknowledged writes to the victim right up to the kill.
		const acked = 100
		for i := 0; i < acked; i++ {
			_, err := s.Add(ctx, "user:1", 1)
			require.NoError(t, err)
		}
		// WAIT 1: every write the victim acknowledged so far (the replication
		// stream is one sequence) has reached its replica. WAIT counts the
		// writes of its own connection, so it follows a write of its own to
		// the victim's slot, on one dedicated connection.
		replicated := victim.WaitReplicas(t, rk+":wait", 2*time.Second) // rk's hash tag: its slot
		require.EqualValues(t, 1, replicated, "the replica did not acknowledge the writes within 2 s")
		victim.Kill(t)
		killed := time.Now()
		var resumed time.Duration
		for {
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			_, err := s.Add(cctx, "user:1", 0)
			cancel()
			if err == nil {
				resumed = time.Since(killed)
				break
			}
			if time.Since(killed) > 60*time.Second {
				t.Fatalf("no recovery after the master was killed: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		const resumeBound = 4 * harness.ClusterNodeTimeout // detection, then the replica's election
		t.Logf("FAILOVER: operations on the killed master's slots resumed %v after the kill (cluster-node-timeout %v; bound %v)",
			resumed, harness.ClusterNodeTimeout, resumeBound)
		require.Less(t, resumed, resumeBound, "failover took too long")
		// The nodes learn of the failover by gossip: the one CLUSTER SLOTS
		// reaches may not have yet when the first write succeeds.
		for deadline := time.Now().Add(5 * time.Second); cl.Master(t, c, slot) == victim && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		require.NotEqual(t, victim, cl.Master(t, c, slot), "the slot has a new master")
		// Reads, once the client's pool has seen the new topology.
		var sums []int64
		require.Eventually(t, func() bool { sums, err = s.SumMany(ctx, keys); return err == nil }, 10*time.Second, 50*time.Millisecond)
		lost := int64(1+acked) - sums[1]
		t.Logf("FAILOVER: %d of %d acknowledged adds lost; bound: 0, since WAIT 1 saw the replica acknowledge them before the kill", lost, acked)
		require.Zero(t, lost, "acknowledged and replicated adds were lost in the failover")
		var missing int
		for i, v := range sums {
			if i != 1 && v != int64(i) {
				missing++
			}
		}
		require.Zero(t, missing, "counters written long before the kill had been replicated")
	})
}

// statField reads one figure of an INFO line such as
// "cmdstat_asking:calls=3,usec=..."; 0 when the line is absent.
func statField(t *testing.T, info, line, field string) int64 {
	t.Helper()
	for _, l := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), line+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, field+"="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err)
				return n
			}
		}
	}
	return 0
}

// redirects returns the MOVED and ASK lines of INFO errorstats.
func redirects(info string) []string {
	var out []string
	for _, l := range strings.Split(info, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "errorstat_MOVED") || strings.HasPrefix(l, "errorstat_ASK") {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		out = []string{"(none counted)"}
	}
	return out
}

// TestWindowctlCluster: windowctl takes one seed address of a cluster and
// sums keys on every node in one call.
func TestWindowctlCluster(t *testing.T) {
	t.Parallel()
	cl := harness.NewCluster(t)
	seed := &harness.Server{Addr: cl.Nodes[0].Addr}
	var keys []string
	for i := 0; i < 30; i++ {
		k := "k" + strconv.Itoa(i)
		keys = append(keys, k)
		_, errs, code := ctl(t, seed, "add", k, strconv.Itoa(i))
		require.Zero(t, code, errs)
	}
	out, errs, code := ctl(t, seed, append([]string{"--json", "sum"}, keys...)...)
	require.Zero(t, code, errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 30)
	for i, l := range lines {
		require.EqualValues(t, i, jsonLine(t, l)["sum"])
	}
}

// slotOf returns the cluster slot of a Redis key, as the server computes it.
func slotOf(t *testing.T, c rueidis.Client, rk string) int64 {
	t.Helper()
	slot, err := c.Do(context.Background(), c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
	require.NoError(t, err)
	return slot
}

// holds reports whether server n itself holds key rk (asked directly, with
// no redirect), and requires that rk then expires: every key the store
// writes has a TTL.
func holds(t *testing.T, n *harness.Server, rk string) bool {
	t.Helper()
	pttl, err := strconv.ParseInt(n.Cmd(t, "PTTL", rk), 10, 64)
	require.NoError(t, err)
	if pttl == -2 {
		return false
	}
	require.Positive(t, pttl, "%s on %s has no expiry, or one already due (PTTL %d)", rk, n.Addr, pttl)
	return true
}

// clusterOps runs every operation the docs name on keys spread over the
// three masters, each checked against an exact model computed here: Allow,
// AllowAll (a minute and an hour policy on one key), AddEvent and AllowEvent
// with ids (a resend answers Duplicate and counts nothing; a refused
// AllowEvent keeps no id), RecordStat and ReadStat(Many) of StatDistinct, a
// multi-resolution store (WithTiers: every tier's SumOver, an event id and a
// distinct count on tiers), features.Set.Record with entities in different
// slots (and its resend), and Inspect. It also checks where the keys the
// scripts build themselves land: an id key and the distinct count's keys
// ("<counter key>:d", ":d:u" and the ring ":d:r<j>") are in the counter's
// slot, on the master that serves it, and expire.
func clusterOps(t *testing.T, cl *harness.Cluster, c rueidis.Client) {
	ctx := ctxT(t)
	s, err := store.New(ctx, c, store.Window{Length: 5 * time.Minute, Bucket: time.Second})
	require.NoError(t, err)
	const n = 24
	// spans requires that the counters of keys span every master.
	spans := func(t *testing.T, st *store.Store, keys []string) {
		t.Helper()
		ms := map[string]bool{}
		for _, k := range keys {
			rk, err := hook.RedisKey(st, k)
			require.NoError(t, err)
			ms[cl.Master(t, c, slotOf(t, c, rk)).Addr] = true
		}
		require.Len(t, ms, 3, "the keys must span every master")
	}
	named := func(p string) []string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = p + strconv.Itoa(i)
		}
		return ks
	}

	t.Run("Allow", func(t *testing.T) {
		keys := named("allow:")
		spans(t, s, keys)
		for i, k := range keys {
			limit := int64(i%4 + 1)
			for j := int64(1); j <= 5; j++ {
				r, err := s.Allow(ctx, k, limit, 1)
				require.NoError(t, err)
				want := min(j, limit)
				require.Equal(t, j <= limit, r.Allowed, "%s call %d", k, j)
				require.Equal(t, want, r.Sum, "%s call %d", k, j)
				require.Equal(t, limit-want, r.Remaining, "%s call %d", k, j)
				if !r.Allowed {
					require.Positive(t, r.RetryAfter, "%s call %d", k, j)
				}
			}
		}
		sums, err := s.SumMany(ctx, keys)
		require.NoError(t, err)
		for i, got := range sums {
			require.EqualValues(t, min(5, i%4+1), got, keys[i])
		}
	})

	t.Run("AllowAll", func(t *testing.T) {
		perMin, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second})
		require.NoError(t, err)
		perHour, err := store.New(ctx, c, store.Window{Length: time.Hour, Bucket: time.Minute})
		require.NoError(t, err)
		keys := named("aa:")
		spans(t, perMin, keys)
		for i, k := range keys {
			pre := int64(i % 3) // already in the hour
			_, err := perHour.Add(ctx, k, pre)
			require.NoError(t, err)
			var allowed int64
			for j := 0; j < 4; j++ {
				r, err := store.AllowAll(ctx, 1, store.Quota{Store: perMin, Key: k, Limit: 2},
					store.Quota{Store: perHour, Key: k, Limit: 3})
				require.NoError(t, err)
				fits := allowed+1 <= 2 && pre+allowed+1 <= 3
				require.Equal(t, fits, r.Allowed, "%s call %d", k, j)
				if fits {
					allowed++
				} else {
					require.GreaterOrEqual(t, refusedBy(r), 0)
				}
				require.Len(t, r.Policies, 2)
				require.Equal(t, allowed, r.Policies[0].Sum, "%s call %d: the minute", k, j)
				require.Equal(t, pre+allowed, r.Policies[1].Sum, "%s call %d: the hour", k, j)
			}
			require.Equal(t, min(2, 3-pre), allowed, k)
			m, err := perMin.Sum(ctx, k)
			require.NoError(t, err)
			h, err := perHour.Sum(ctx, k)
			require.NoError(t, err)
			require.Equal(t, []int64{allowed, pre + allowed}, []int64{m, h}, k)
		}
	})

	t.Run("events with ids", func(t *testing.T) {
		keys := named("ev:")
		spans(t, s, keys)
		for i, k := range keys {
			rk, _ := hook.RedisKey(s, k)
			master := cl.Master(t, c, slotOf(t, c, rk))
			var sum int64
			for j := 0; j < 3; j++ {
				e := store.Event{Key: k, Delta: int64(i + 1), ID: "e-" + strconv.Itoa(i) + "-" + strconv.Itoa(j)}
				a, err := s.Record(ctx, e)
				require.NoError(t, err)
				sum += e.Delta
				require.False(t, a.Duplicate)
				require.Equal(t, sum, a.Sum, "%s %s", k, e.ID)
				idk := rk + ":id:" + e.ID
				require.Equal(t, slotOf(t, c, rk), slotOf(t, c, idk))
				require.True(t, holds(t, master, idk), "the id key %s is not on %s, the master of its slot", idk, master.Addr)
				a, err = s.Record(ctx, e) // the resend
				require.NoError(t, err)
				require.True(t, a.Duplicate, "%s %s: the resend", k, e.ID)
				require.Equal(t, sum, a.Sum, "%s %s: the resend counted", k, e.ID)
			}
			got, err := s.Sum(ctx, k)
			require.NoError(t, err)
			require.Equal(t, sum, got, k)
		}
		keys = named("ae:")
		spans(t, s, keys)
		for _, k := range keys {
			rk, _ := hook.RedisKey(s, k)
			master := cl.Master(t, c, slotOf(t, c, rk))
			for j := 0; j < 3; j++ { // limit 2: allowed, allowed, refused
				e := store.Event{Key: k, Delta: 1, ID: "a-" + strconv.Itoa(j)}
				e.Limit = 2
				r, err := s.Record(ctx, e)
				require.NoError(t, err)
				require.False(t, r.Duplicate)
				require.Equal(t, j < 2, r.Allowed, "%s %s", k, e.ID)
				require.EqualValues(t, min(j+1, 2), r.Sum, "%s %s", k, e.ID)
				r, err = s.Record(ctx, e)
				require.NoError(t, err)
				require.EqualValues(t, min(j+1, 2), r.Sum, "%s %s: the resend", k, e.ID)
				if j < 2 {
					require.True(t, r.Duplicate, "%s %s: the resend", k, e.ID)
					require.True(t, r.Allowed, "%s %s: a duplicate answers the first decision", k, e.ID)
					require.True(t, holds(t, master, rk+":id:"+e.ID), "%s %s: no id key on the slot's master", k, e.ID)
				} else {
					require.False(t, r.Duplicate, "%s %s: a refused event keeps no id", k, e.ID)
					require.False(t, r.Allowed, "%s %s", k, e.ID)
					require.False(t, holds(t, master, rk+":id:"+e.ID), "%s %s: a refused event kept its id", k, e.ID)
				}
			}
		}
	})

	t.Run("distinct counts", func(t *testing.T) {
		keys := named("dc:")
		spans(t, s, keys)
		want := make([]int64, len(keys))
		for i, k := range keys {
			m := i%7 + 1
			var members []string
			for j := 0; j < m; j++ {
				members = append(members, "m"+strconv.Itoa(j))
			}
			got, err := addDistinct(ctx, s, k, members[:(m+1)/2]...)
			require.NoError(t, err)
			require.EqualValues(t, (m+1)/2, got, k)
			got, err = addDistinct(ctx, s, k, members...) // half of them again
			require.NoError(t, err)
			require.EqualValues(t, m, got, k)
			want[i] = int64(m)
			got, err = countDistinct(ctx, s, k)
			require.NoError(t, err)
			require.EqualValues(t, m, got, k)
			rk, _ := hook.RedisKey(s, k)
			master := cl.Master(t, c, slotOf(t, c, rk))
			bks := strings.Fields(master.Cmd(t, "KEYS", rk+":d:r*"))
			require.NotEmpty(t, bks, "no HyperLogLog bucket of %s on %s, the master of its slot", rk, master.Addr)
			for _, bk := range append(bks, rk+":d", rk+":d:u") {
				require.Equal(t, slotOf(t, c, rk), slotOf(t, c, bk), bk)
				// (the union exists once a second add came at one instant: the two
				// adds above may fall in two buckets)
				require.True(t, holds(t, master, bk) || bk == rk+":d:u", bk)
			}
		}
		got, err := countDistinctMany(ctx, s, keys)
		require.NoError(t, err)
		require.Equal(t, want, got)
	})

	t.Run("tiers", func(t *testing.T) {
		ws := []store.Window{{Length: time.Minute, Bucket: time.Second}, {Length: 10 * time.Minute, Bucket: time.Minute},
			{Length: time.Hour, Bucket: 10 * time.Minute}}
		st, err := store.New(ctx, c, ws[0], store.WithTiers(ws[1:]...))
		require.NoError(t, err)
		keys := named("tier:")
		spans(t, st, keys)
		for i, k := range keys {
			var sum int64
			for j := 0; j <= i%3; j++ {
				n, err := st.Add(ctx, k, int64(i+j))
				require.NoError(t, err)
				sum += int64(i + j)
				require.Equal(t, sum, n, k)
			}
			e := store.Event{Key: k, Delta: 5, ID: "t-" + k}
			a, err := st.Record(ctx, e)
			require.NoError(t, err)
			sum += 5
			require.Equal(t, []int64{sum, sum, sum}, a.Sums, k)
			a, err = st.Record(ctx, e)
			require.NoError(t, err)
			require.True(t, a.Duplicate, k)
			require.Equal(t, []int64{sum, sum, sum}, a.Sums, "%s: the resend counted", k)
			for _, w := range ws {
				got, err := st.Over(w.Length).Sum(ctx, k)
				require.NoError(t, err)
				require.Equal(t, sum, got, "%s over %v", k, w.Length)
			}
			got, err := addDistinct(ctx, st, k, "x", "y", "x")
			require.NoError(t, err)
			require.EqualValues(t, 2, got, k)
			got, err = countDistinct(ctx, st.Over(time.Hour), k)
			require.NoError(t, err)
			require.EqualValues(t, 2, got, "%s: the hour tier's distinct count", k)
			// Every tier's keys are in the key's slot, on its master (with a
			// head, the current bucket may be in the head alone).
			rk, _ := hook.RedisKey(st, k)
			master := cl.Master(t, c, slotOf(t, c, rk))
			for _, w := range ws {
				held := false
				for _, tk := range counterKeys(t, st.Over(w.Length), k) {
					require.Equal(t, slotOf(t, c, rk), slotOf(t, c, tk), tk)
					held = held || holds(t, master, tk)
				}
				require.True(t, held, "no key of tier %v of %s is on %s", w, k, master.Addr)
			}
		}
	})

	t.Run("features Record", func(t *testing.T) {
		minute, hour := store.Window{Length: time.Minute, Bucket: time.Second}, store.Window{Length: time.Hour, Bucket: time.Minute}
		set, err := features.New(ctx, c, []features.Feature{
			{Name: "logins", Entity: "user", Kind: features.Count, Windows: []store.Window{minute, hour}},
			{Name: "login_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{minute}, Limits: []int64{3}},
			{Name: "spend", Entity: "card", Kind: features.Sum, Windows: []store.Window{hour}},
			{Name: "cards", Entity: "device", Kind: features.Distinct, Of: "card", Windows: []store.Window{hour}},
		})
		require.NoError(t, err)
		// The entities' slots span every master.
		ms := map[string]bool{}
		for _, e := range []string{"user:u0", "user:u1", "user:u2", "user:u3", "card:c0", "card:c1", "card:c2", "device:d0", "device:d1"} {
			ms[cl.Master(t, c, slotOf(t, c, "fx:{"+e+"}")).Addr] = true
		}
		require.Len(t, ms, 3, "the entities must span every master")
		logins, limited, spend := map[string]int64{}, map[string]int64{}, map[string]int64{}
		cards := map[string]map[string]bool{}
		type rec struct {
			ev  features.Event
			res features.Result
		}
		var recs []rec
		for i := 0; i < 30; i++ {
			u, cd, d := "u"+strconv.Itoa(i%4), "c"+strconv.Itoa(i%3), "d"+strconv.Itoa(i%2)
			ev := features.Event{ID: "f-" + strconv.Itoa(i), Amount: int64(10 + i),
				Entities: map[string]string{"user": u, "card": cd, "device": d}}
			res, err := set.Record(ctx, ev)
			require.NoError(t, err)
			require.False(t, res.Duplicate)
			logins[u]++
			allowed := limited[u] < 3
			if allowed {
				limited[u]++
			}
			spend[cd] += ev.Amount
			if cards[d] == nil {
				cards[d] = map[string]bool{}
			}
			cards[d][cd] = true
			require.Equal(t, allowed, res.Allowed, "event %d", i)
			for name, want := range map[string]int64{"logins": logins[u], "login_limit": limited[u], "spend": spend[cd], "cards": int64(len(cards[d]))} {
				v, ok := res.Get(name)
				require.True(t, ok, name)
				require.Equal(t, want, v.Sum, "event %d: %s", i, name)
			}
			v, _ := res.Get("logins")
			require.Equal(t, []int64{logins[u], logins[u]}, v.Sums, "event %d: logins over both windows", i)
			recs = append(recs, rec{ev, res})
		}
		// Every resend is a duplicate for every entity, decided as the first
		// time, and counts nothing.
		for _, r := range recs {
			res, err := set.Record(ctx, r.ev)
			require.NoError(t, err)
			require.True(t, res.Duplicate, r.ev.ID)
			require.Equal(t, r.res.Allowed, res.Allowed, r.ev.ID)
			u, cd, d := r.ev.Entities["user"], r.ev.Entities["card"], r.ev.Entities["device"]
			for name, want := range map[string]int64{"logins": logins[u], "login_limit": limited[u], "spend": spend[cd], "cards": int64(len(cards[d]))} {
				v, _ := res.Get(name)
				require.Equal(t, want, v.Sum, "%s resent: %s", r.ev.ID, name)
			}
		}
		// The id keys are in each entity's slot, on its master.
		for _, e := range []string{"fx:{user:u0}:logins:1m/1s", "fx:{card:c0}:spend:1h/1m", "fx:{device:d0}:cards:1h/1m:d"} {
			master := cl.Master(t, c, slotOf(t, c, e))
			require.True(t, holds(t, master, e+":id:f-0"), "the id key of %s is not on %s", e, master.Addr)
		}
	})

	t.Run("Inspect", func(t *testing.T) {
		keys := named("in:")
		spans(t, s, keys)
		for i, k := range keys {
			for _, d := range []int64{int64(i + 1), -1, int64(2 * i)} {
				_, err := s.Add(ctx, k, d)
				require.NoError(t, err)
			}
			snap, err := s.Inspect(ctx, k)
			require.NoError(t, err)
			require.Equal(t, counterKey(t, s, k), snap.RedisKey)
			require.Positive(t, snap.KeyTTL, k)
			var live int64
			for _, b := range snap.Buckets {
				if b.Live {
					live += b.Value
				}
			}
			require.EqualValues(t, 3*i, live, "%s: the live buckets of its snapshot", k)
		}
	})

	t.Run("statistics", func(t *testing.T) {
		keys := named("st:")
		spans(t, s, keys)
		for i, k := range keys {
			for _, v := range []int64{int64(i), -int64(i), 2 * int64(i)} {
				for _, st := range []store.Stat{store.StatMax, store.StatMin, store.StatAvg, store.StatRecent} {
					_, err := s.RecordStat(ctx, store.StatEvent{Key: k, Stat: st, Value: v, ID: "e" + strconv.FormatInt(v, 10)})
					require.NoError(t, err)
				}
			}
		}
		for st, want := range map[store.Stat]func(i int64) store.StatValue{
			store.StatMax: func(i int64) store.StatValue { return store.StatValue{OK: true, Value: 2 * i} },
			store.StatMin: func(i int64) store.StatValue { return store.StatValue{OK: true, Value: -i} },
			store.StatAvg: func(i int64) store.StatValue {
				if i == 0 { // 0 and -0 are one id: counted once
					return store.StatValue{OK: true, Count: 1}
				}
				return store.StatValue{OK: true, Value: 2 * i / 3, Sum: 2 * i, Count: 3}
			},
		} {
			vs, err := s.ReadStatMany(ctx, keys, st)
			require.NoError(t, err)
			for i, v := range vs {
				require.Equal(t, want(int64(i)), v, "%v of %s", st, keys[i])
			}
		}
		vs, err := s.ReadStatMany(ctx, keys, store.StatRecent)
		require.NoError(t, err)
		require.Len(t, vs[5].Recent, 3)
		require.EqualValues(t, 10, vs[5].Value)
		// Features: two entities of two slots, one statistic each.
		set, err := features.New(ctx, c, []features.Feature{
			{Name: "max_amount", Entity: "card", Kind: features.Max, Windows: []store.Window{{Length: time.Minute, Bucket: time.Second}}},
			{Name: "last_seen", Entity: "user", Kind: features.Last, Windows: []store.Window{{Length: time.Minute, Bucket: time.Second}}},
		}, store.WithPrefix(harness.Prefix(t)))
		require.NoError(t, err)
		var most int64
		for i, amount := range []int64{5, 9, 2} {
			most = max(most, amount)
			r, err := set.Record(ctx, features.Event{ID: "p" + strconv.Itoa(i), Entities: map[string]string{"card": "c1", "user": "u7"}, Amount: amount})
			require.NoError(t, err)
			m, _ := r.Get("max_amount")
			require.EqualValues(t, most, m.Sum)
			l, _ := r.Get("last_seen")
			require.InDelta(t, float64(time.Now().UnixMilli()), float64(l.Sum), 10e3)
		}
	})
}

// TestClusterSlotMigration moves one entity's slot to another master
// (harness.MigrateSlot: CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE of
// its keys two at a time, CLUSTER SETSLOT NODE on every master) while four
// writers record events with ids and a distinct count against that entity
// (features.Set.Record: a count over two windows and distinct cards, one
// script per event), another adds members to the entity's store-level
// distinct count (RecordStat of StatDistinct) and a reader counts them (ReadStat of StatDistinct);
// a write that failed is resent, as a client would. It proves:
//   - the migration itself goes through: no write reaches the target under
//     a key name the source still holds (MIGRATE would refuse it, BUSYKEY);
//   - every key of the entity ends on the new master and none stays on the
//     old one: the counters, every event id that was acknowledged, and the
//     keys of the distinct counts ("<counter key>:d", ":d:u", ":d:r<j>"),
//     each with an expiry;
//   - nothing is lost or counted twice: each total lies within what the
//     writes' answers allow (every acknowledged write counted; a failed one
//     may have: [certain, certain+uncertain]), the distinct count never goes
//     down, and after the move a resend of every event answers Duplicate
//     where the event was acknowledged and leaves the totals exactly at the
//     model (every event once, every card and member once).
func TestClusterSlotMigration(t *testing.T) {
	t.Parallel()
	cl := harness.NewCluster(t)
	c := cl.Client(t)
	ctx := ctxT(t)
	w, hour := store.Window{Length: 5 * time.Minute, Bucket: time.Second}, store.Window{Length: time.Hour, Bucket: time.Minute}
	set, err := features.New(ctx, c, []features.Feature{
		{Name: "events", Entity: "user", Kind: features.Count, Windows: []store.Window{w, hour}},
		{Name: "cards", Entity: "user", Kind: features.Distinct, Of: "card", Windows: []store.Window{w}},
	})
	require.NoError(t, err)
	const (
		tag     = "fx:{user:hot}:"
		events  = tag + "events:5m/1s" // the batch's first key: its ids are events:5m/1s:id:<id>
		buckets = tag + "cards:5m/1s:d:r"
	)
	slot := slotOf(t, c, events)
	src := cl.Master(t, c, slot)
	dst := cl.OtherMaster(t, src)

	// The model: every event sent, and whether one of its writes succeeded.
	var mu sync.Mutex
	sent := map[string]features.Event{}
	acked := map[string]bool{}
	errMsgs := map[string]int{}
	record := func(ev features.Event) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := set.Record(cctx, ev)
		mu.Lock()
		defer mu.Unlock()
		sent[ev.ID] = ev
		if err == nil {
			acked[ev.ID] = true
		} else {
			errMsgs[err.Error()]++
		}
		return err
	}
	event := func(id string, card int) features.Event {
		return features.Event{ID: id, Entities: map[string]string{"user": "hot", "card": "c" + strconv.Itoa(card%40)}}
	}
	for i := 0; i < 20; i++ { // keys to migrate: counters, ids, buckets
		require.NoError(t, record(event("pre-"+strconv.Itoa(i), i)))
	}

	// The same entity's store-level distinct count: RecordStat of StatDistinct (no id: a
	// member added twice is still one) and ReadStat of StatDistinct, all at one instant
	// t0 of the client's clock, so that every write goes to one HyperLogLog
	// bucket, which the source holds when the migration starts (the preload)
	// and MigrateSlot moves last (its name sorts after the features' keys).
	t0 := time.Now()
	st, err := store.New(ctx, c, hour)
	require.NoError(t, err)
	ent := st.Entity("user:hot")
	seen, err := hook.RedisKey(ent, "seen")
	require.NoError(t, err)
	require.Equal(t, slot, slotOf(t, c, seen))
	members, ackedMembers := map[string]bool{}, map[string]bool{}
	for i := 0; i < 10; i++ {
		m := "m" + strconv.Itoa(i)
		_, err := addDistinct(ctx, ent.At(t0), "seen", m)
		require.NoError(t, err)
		members[m], ackedMembers[m] = true, true
	}

	// attempts counts the calls started; inflight, the calls not yet
	// answered (the store resends a call the cluster answers TRYAGAIN, while
	// the slot is split, within the call).
	var attempts, fails, inflight atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); wg.Wait() }
	t.Cleanup(func() { // before the cluster goes, also when the test fails early
		halt()
		if t.Failed() {
			mu.Lock()
			t.Logf("errors the writers and readers saw: %v", errMsgs)
			mu.Unlock()
		}
	})
	wg.Add(2)
	go func() { // RecordStat of StatDistinct, resent after a failure
		defer wg.Done()
		for i := 10; ; i++ {
			m := "m" + strconv.Itoa(i%60)
			for {
				select {
				case <-stop:
					return
				default:
				}
				attempts.Add(1)
				inflight.Add(1)
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := addDistinct(cctx, ent.At(t0), "seen", m)
				cancel()
				inflight.Add(-1)
				mu.Lock()
				members[m] = true
				if err == nil {
					ackedMembers[m] = true
				} else {
					errMsgs[err.Error()]++
				}
				mu.Unlock()
				if err == nil {
					break
				}
				fails.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	go func() { // ReadStat of StatDistinct never goes down: a read that missed buckets would
		defer wg.Done()
		var last int64
		for {
			select {
			case <-stop:
				return
			default:
			}
			attempts.Add(1)
			inflight.Add(1)
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := countDistinct(cctx, ent.At(t0), "seen")
			cancel()
			inflight.Add(-1)
			if err != nil {
				fails.Add(1)
				mu.Lock()
				errMsgs[err.Error()]++
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if n < last {
				t.Errorf("ReadStat of StatDistinct went down from %d to %d during the migration", last, n)
			}
			last = n
		}
	}()
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				ev := event("w"+strconv.Itoa(g)+"-"+strconv.Itoa(i), g*7+i)
				for try := 0; ; try++ { // a failed write is resent, as a client would
					select {
					case <-stop:
						return
					default:
					}
					attempts.Add(1)
					inflight.Add(1)
					err := record(ev)
					inflight.Add(-1)
					if err == nil {
						break
					}
					fails.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}
		}(g)
	}
	var splitAttempts int64
	split := false
	cl.MigrateSlot(t, slot, src, dst, 2, func(onSrc, onDst int) {
		if !split {
			split = true
			t.Logf("MIGRATION: slot %d split: %d keys on the source, %d on the target", slot, onSrc, onDst)
		}
		a0 := attempts.Load() - inflight.Load()
		time.Sleep(50 * time.Millisecond)     // let writes run against the split slot
		splitAttempts += attempts.Load() - a0 // (the calls started, and those in flight, meanwhile)
	})
	mu.Lock()
	n0 := len(acked)
	mu.Unlock()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > n0+100 }, 20*time.Second, 10*time.Millisecond,
		"writes did not resume after the move")
	halt()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("MIGRATION: %d events sent, %d acknowledged; %d attempts in all, %d while the slot was split, %d failed: %v",
		len(sent), len(acked), attempts.Load(), splitAttempts, fails.Load(), errMsgs)
	require.True(t, split, "the slot was never split between the two nodes")
	require.Positive(t, splitAttempts, "no write ran while the slot was split")

	// Every key of the slot is on the new master, each with an expiry.
	sl := strconv.FormatInt(slot, 10)
	require.Equal(t, dst, cl.Master(t, c, slot))
	require.Equal(t, "0", src.Cmd(t, "CLUSTER", "COUNTKEYSINSLOT", sl), "keys left behind on the source")
	require.Empty(t, strings.Fields(src.Cmd(t, "KEYS", tag+"*")), "keys left behind on the source")
	for _, k := range strings.Fields(dst.Cmd(t, "KEYS", tag+"*")) {
		holds(t, dst, k)
	}
	for _, k := range []string{events, tag + "events:1h/1m"} {
		held := false
		for _, n := range counterNames(k) {
			held = held || holds(t, dst, n)
		}
		require.True(t, held, "the counter %s is not on the new master", k)
	}
	require.NotEmpty(t, strings.Fields(dst.Cmd(t, "KEYS", buckets+"*")), "no HyperLogLog bucket on the new master")
	for id := range acked {
		require.True(t, holds(t, dst, events+":id:"+id), "the id of acknowledged event %s is not on the new master", id)
	}
	require.NotEmpty(t, strings.Fields(dst.Cmd(t, "KEYS", seen+":d:r*")), "no HyperLogLog bucket of %s on the new master", seen)
	for _, k := range []string{tag + "cards:5m/1s:d", seen + ":d", seen + ":d:u"} { // (cards' union may not be built)
		require.True(t, holds(t, dst, k), "the distinct count's key %s is not on the new master", k)
	}
	require.Empty(t, strings.Fields(src.Cmd(t, "KEYS", "*{user:hot}*")), "keys left behind on the source")

	// Within what the answers allow.
	certainCards, allCards := map[string]bool{}, map[string]bool{}
	for id, ev := range sent {
		allCards[ev.Entities["card"]] = true
		if acked[id] {
			certainCards[ev.Entities["card"]] = true
		}
	}
	read := func() (sums []int64, cards int64) {
		res, err := set.Read(ctx, map[string]string{"user": "hot"})
		require.NoError(t, err)
		v, ok := res.Get("events")
		require.True(t, ok)
		d, ok := res.Get("cards")
		require.True(t, ok)
		return v.Sums, d.Sum
	}
	certain, uncertain := int64(len(acked)), int64(len(sent)-len(acked))
	sums, cards := read()
	for i, n := range sums {
		require.GreaterOrEqual(t, n, certain, "window %d: acknowledged events were lost", i)
		require.LessOrEqual(t, n, certain+uncertain, "window %d: events counted twice", i)
	}
	require.GreaterOrEqual(t, cards, int64(len(certainCards)), "acknowledged cards were lost")
	require.LessOrEqual(t, cards, int64(len(allCards)), "cards that were never sent")

	n, err := countDistinct(ctx, ent.At(t0), "seen")
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(len(ackedMembers)), "acknowledged members were lost")
	require.LessOrEqual(t, n, int64(len(members)), "members that were never sent")

	// A resend of every event counts each exactly once.
	for id, ev := range sent {
		res, err := set.Record(ctx, ev)
		require.NoError(t, err, "resend of %s", id)
		if acked[id] {
			require.True(t, res.Duplicate, "the resend of acknowledged event %s is no duplicate", id)
		}
	}
	sums, cards = read()
	require.Equal(t, []int64{int64(len(sent)), int64(len(sent))}, sums,
		"after resending every event (%d acknowledged, %d uncertain): some counted twice or not at all", certain, uncertain)
	require.EqualValues(t, len(allCards), cards, "distinct cards after resending every event")
	for m := range members {
		_, err := addDistinct(ctx, ent.At(t0), "seen", m)
		require.NoError(t, err)
	}
	n, err = countDistinct(ctx, ent.At(t0), "seen")
	require.NoError(t, err)
	require.EqualValues(t, len(members), n, "distinct members after resending every member")
}

// TestClusterTryAgainResent: an operation that meets a slot on the move
// (TRYAGAIN: nothing ran) is sent again by the store, within its retries,
// id or not: a RecordStat of StatDistinct without an id, held up while the slot is split
// between two nodes, succeeds once the slot has moved, after the server
// refused it at least once; with no retries it fails with TRYAGAIN.
func TestClusterTryAgainResent(t *testing.T) {
	t.Parallel()
	cl := harness.NewCluster(t)
	c := cl.Client(t)
	ctx := ctxT(t)
	hour := store.Window{Length: time.Hour, Bucket: time.Minute}
	for _, retries := range []int{20, 0} {
		refused := &callErrors{}
		st, err := store.New(ctx, c, hour, store.WithRetries(retries), store.WithObserver(refused),
			store.WithPrefix("ta"+strconv.Itoa(retries)+":"))
		require.NoError(t, err)
		ent := st.Entity("dev:1")
		_, err = ent.Add(ctx, "a", 1) // a second key in the slot, so that it can be split
		require.NoError(t, err)
		_, err = addDistinct(ctx, ent, "cards", "c0")
		require.NoError(t, err)
		rk, err := hook.RedisKey(ent, "a")
		require.NoError(t, err)
		slot := slotOf(t, c, rk)
		src := cl.Master(t, c, slot)
		dst := cl.OtherMaster(t, src)
		var n int64
		var addErr error
		done := make(chan struct{})
		started := false
		cl.MigrateSlot(t, slot, src, dst, 1, func(onSrc, onDst int) {
			if started {
				return
			}
			started = true
			go func() {
				defer close(done)
				n, addErr = addDistinct(ctx, ent, "cards", "c1")
			}()
			// Hold the slot split until the server has refused the call.
			for i := 0; i < 200 && refused.n.Load() == 0; i++ {
				time.Sleep(10 * time.Millisecond)
			}
		})
		require.True(t, started, "the slot was never split")
		<-done
		require.Positive(t, refused.n.Load(), "retries %d: the server never refused the call while the slot moved", retries)
		if retries == 0 {
			require.ErrorContains(t, addErr, "TRYAGAIN")
			continue
		}
		require.NoError(t, addErr, "retries %d", retries)
		require.EqualValues(t, 2, n)
	}
}
