package tests

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestCluster runs the store on a real 3-master, 3-replica Redis Cluster:
// counters across many slots, a batch read spanning every node, a slot moved
// under load (MOVED and ASK), and a master killed.
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
		rk, _ := s.RedisKey(k)
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
		for _, f := range []string{"logins", "spend", "pw-resets"} {
			_, err := u.Add(ctx, f, 1)
			require.NoError(t, err)
		}
		slots := map[int64]bool{}
		for _, f := range []string{"logins", "spend", "pw-resets"} {
			rk, _ := u.RedisKey(f)
			slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
			require.NoError(t, err)
			slots[slot] = true
		}
		require.Len(t, slots, 1)
		sums, err = u.SumMany(ctx, []string{"logins", "spend", "pw-resets"})
		require.NoError(t, err)
		require.Equal(t, []int64{1, 1, 1}, sums)
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

	t.Run("a slot moves under load", func(t *testing.T) {
		u := s.Entity("hot")
		rk, _ := u.RedisKey("c0")
		slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
		require.NoError(t, err)
		src := cl.Master(t, c, slot)
		var dst *harness.Server
		for _, n := range cl.Nodes[:3] {
			if n != src {
				dst = n
				break
			}
		}
		require.NotNil(t, dst)
		var names []string
		for i := 0; i < 60; i++ {
			names = append(names, "c"+strconv.Itoa(i))
		}
		for _, k := range names[:50] {
			_, err := u.Add(ctx, k, 1)
			require.NoError(t, err)
		}
		for _, n := range []*harness.Server{src, dst} {
			n.Cmd(t, "CONFIG", "RESETSTAT")
		}
		var added, reads atomic.Int64
		var errs atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
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
						errs.Add(1)
						t.Logf("add during migration: %v", err)
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
							errs.Add(1)
							t.Logf("sum during migration: %v", err)
							continue
						}
						got = append([]int64(nil), last...)
						got[j] = n
					} else {
						var err error
						if got, err = u.SumMany(ctx, names); err != nil {
							errs.Add(1)
							t.Logf("sum many during migration: %v", err)
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
		for _, n := range cl.Nodes[:3] {
			n.Cmd(t, "CLUSTER", "SETSLOT", sl, "NODE", dstID)
		}
		// Keep going a little after the move: the clients' maps are stale
		// until a MOVED tells them.
		a0 := added.Load()
		require.Eventually(t, func() bool { return added.Load() > a0+200 }, 10*time.Second, 10*time.Millisecond)
		close(stop)
		wg.Wait()
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
		require.Equal(t, 50+added.Load(), total, "counts were lost or doubled while the slot moved")
		require.Equal(t, dst, cl.Master(t, c, slot))
		onSrc := src.Cmd(t, "CLUSTER", "COUNTKEYSINSLOT", sl)
		require.Equal(t, "0", onSrc, "keys left behind on the source")
	})

	t.Run("a master is killed", func(t *testing.T) {
		rk, _ := s.RedisKey("user:1")
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
			if time.Since(killed) > 30*time.Second {
				t.Fatalf("no recovery after the master was killed: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		const resumeBound = 10 * time.Second
		t.Logf("FAILOVER: operations on the killed master's slots resumed %v after the kill (cluster-node-timeout %v; bound %v)",
			resumed, harness.ClusterNodeTimeout, resumeBound)
		require.Less(t, resumed, resumeBound, "failover took too long")
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
