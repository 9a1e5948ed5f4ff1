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
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestCluster runs the store on a real 3-master, 3-replica Redis Cluster:
// counters across many slots, a batch read spanning every node, a slot moved
// under load (MOVED and ASK), and a master killed.
func TestCluster(t *testing.T) {
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

	t.Run("a slot moves under load", func(t *testing.T) {
		u := s.Entity("hot")
		rk, _ := u.RedisKey("c0")
		slot, err := c.Do(ctx, c.B().ClusterKeyslot().Key(rk).Build()).AsInt64()
		require.NoError(t, err)
		src := cl.Master(t, c, slot)
		var dst *harness.Server
		for _, n := range cl.Nodes[:3] {
			if n != src && cl.Master(t, c, slot) != n {
				dst = n
				break
			}
		}
		require.NotNil(t, dst)
		for i := 0; i < 50; i++ {
			_, err := u.Add(ctx, "c"+strconv.Itoa(i), 1)
			require.NoError(t, err)
		}
		var added atomic.Int64
		var errs atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					k := "c" + strconv.Itoa((g*13+i)%60) // 50 existing keys and 10 new ones
					if _, err := u.Add(ctx, k, 1); err != nil {
						errs.Add(1)
						t.Logf("add during migration: %v", err)
						continue
					}
					added.Add(1)
				}
			}(g)
		}
		sl := strconv.FormatInt(slot, 10)
		srcID, dstID := harness.NodeID(t, src), harness.NodeID(t, dst)
		harness.Cli(t, dst, "CLUSTER", "SETSLOT", sl, "IMPORTING", srcID)
		harness.Cli(t, src, "CLUSTER", "SETSLOT", sl, "MIGRATING", dstID)
		dstHost, dstPort, _ := strings.Cut(dst.Addr, ":")
		for {
			ks := strings.Fields(harness.Cli(t, src, "CLUSTER", "GETKEYSINSLOT", sl, "5"))
			if len(ks) == 0 {
				break
			}
			harness.Cli(t, src, append([]string{"MIGRATE", dstHost, dstPort, "", "0", "5000", "KEYS"}, ks...)...)
			time.Sleep(20 * time.Millisecond) // let ASK-redirected writes happen meanwhile
		}
		for _, n := range cl.Nodes[:3] {
			harness.Cli(t, n, "CLUSTER", "SETSLOT", sl, "NODE", dstID)
		}
		time.Sleep(300 * time.Millisecond)
		close(stop)
		wg.Wait()
		require.Zero(t, errs.Load(), "operations failed while the slot moved")
		var names []string
		for i := 0; i < 60; i++ {
			names = append(names, "c"+strconv.Itoa(i))
		}
		sums, err := u.SumMany(ctx, names)
		require.NoError(t, err)
		var total int64
		for _, n := range sums {
			total += n
		}
		require.Equal(t, 50+added.Load(), total, "counts were lost or doubled while the slot moved")
		require.Equal(t, dst, cl.Master(t, c, slot))
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
		victim.Kill()
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
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("FAILOVER: operations on the killed master's slots resumed %v after the kill (cluster-node-timeout 1s)", resumed)
		require.NotEqual(t, victim, cl.Master(t, c, slot), "the slot has a new master")
		// Reads, once the client's pool has seen the new topology.
		var sums []int64
		require.Eventually(t, func() bool { sums, err = s.SumMany(ctx, keys); return err == nil }, 10*time.Second, 50*time.Millisecond)
		lost := int64(1+acked) - sums[1]
		t.Logf("FAILOVER: %d of %d acknowledged adds made just before the kill were lost (asynchronous replication)", lost, acked)
		require.GreaterOrEqual(t, lost, int64(0))
		require.LessOrEqual(t, lost, int64(acked))
		var missing int
		for i, v := range sums {
			if i != 1 && v != int64(i) {
				missing++
			}
		}
		require.Zero(t, missing, "counters written long before the kill had been replicated")
	})
}

// TestWindowctlCluster: windowctl takes one seed address of a cluster and
// sums keys on every node in one call.
func TestWindowctlCluster(t *testing.T) {
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
