package harness

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// ClusterNodeTimeout is the cluster-node-timeout of every cluster NewCluster
// makes: a master unreachable this long is failed over. It is long enough that
// a master stalled by a loaded machine (a dozen containers on two cores) is
// not failed over by mistake, which would take the cluster down mid-test.
const ClusterNodeTimeout = 5 * time.Second

// Cluster is a real Redis Cluster: 3 masters and 3 replicas, each a container
// of the Redis 7.0 image on the host's network, on ports of its own.
type Cluster struct {
	Nodes []*Server // in creation order: the first three start as masters, node i+3 replicates node i
}

// NewCluster starts a 3-master, 3-replica cluster for this test alone and
// removes it when the test ends. It is made without redis-cli, with cluster
// commands sent through rueidis: CLUSTER ADDSLOTSRANGE on the masters,
// CLUSTER MEET, CLUSTER REPLICATE; then it waits until every node says
// cluster_state:ok and every replica's link to its master is up. A node that
// does not start is tried again on new ports; a cluster that does not form is
// a failure, never a skip.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	image := Image(Redis70)
	if _, why := docker(); why != "" {
		Skip(t, AreaCluster, why)
	}
	if why := ensureImage(image); why != "" {
		Skip(t, AreaCluster, why)
	}
	Use(t, AreaCluster)
	cl := &Cluster{Nodes: make([]*Server, 6)}
	bus := make([]int, 6)
	errs := make([]error, 6)
	var wg sync.WaitGroup
	for i := range cl.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, ports, err := launch(image, nil, 1, func(ports []int) []string {
				return []string{"redis-server", "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
					"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
					"--cluster-port", strconv.Itoa(ports[1]), "--cluster-announce-ip", "127.0.0.1",
					"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
					"--save", "", "--appendonly", "no", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
			})
			if err != nil {
				errs[i] = err
				return
			}
			s := &Server{Kind: Redis70, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), How: "cluster node, container " + image, ctr: c, up: true}
			allMu.Lock()
			all = append(all, s)
			allMu.Unlock()
			cl.Nodes[i], bus[i] = s, ports[1]
		}()
	}
	wg.Wait()
	for _, n := range cl.Nodes {
		if n != nil {
			t.Cleanup(n.Stop)
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("cluster node %d: %v", i, err)
		}
	}

	ids := make([]string, 6)
	for i, n := range cl.Nodes {
		ids[i] = n.ID(t)
	}
	for i, r := range [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}} {
		cl.Nodes[i].Cmd(t, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(r[0]), strconv.Itoa(r[1]))
	}
	for i, n := range cl.Nodes[1:] {
		cl.Nodes[0].Cmd(t, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.Port()), strconv.Itoa(bus[i+1]))
	}
	// Every node must know every other before a replica can name its master.
	cl.waitAll(t, 30*time.Second, "every node knows the 6 nodes", func(n *Server) (bool, string) {
		out, err := n.Try(context.Background(), "CLUSTER", "NODES")
		if err != nil {
			return false, err.Error()
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return len(lines) == 6 && !strings.Contains(out, "handshake") && !strings.Contains(out, "noaddr"), out
	})
	for i := 3; i < 6; i++ {
		cl.Nodes[i].Cmd(t, "CLUSTER", "REPLICATE", ids[i-3])
	}
	cl.WaitOK(t, 30*time.Second)
	// A replica that never finished its first sync cannot fail over, and a
	// master that does not know its replica will not vote for it: wait for both.
	cl.waitAll(t, 30*time.Second, "every replica synced and known to every node", func(n *Server) (bool, string) {
		info, err := n.Try(context.Background(), "INFO", "replication")
		if err != nil {
			return false, err.Error()
		}
		if !strings.Contains(info, "role:master") && !strings.Contains(info, "master_link_status:up") {
			return false, info
		}
		nodes, err := n.Try(context.Background(), "CLUSTER", "NODES")
		return err == nil && strings.Count(nodes, "slave") == 3, nodes
	})
	return cl
}

// waitAll waits until cond holds on every running node.
func (cl *Cluster) waitAll(t testing.TB, d time.Duration, what string, cond func(n *Server) (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := true, ""
		for _, n := range cl.Nodes {
			if !n.Up() {
				continue
			}
			if good, why := cond(n); !good {
				ok, last = false, n.Addr+": "+why
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster: not %s within %v; last:\n%s", what, d, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Seeds returns the address of every running node.
func (cl *Cluster) Seeds() []string {
	var s []string
	for _, n := range cl.Nodes {
		if n.Up() {
			s = append(s, n.Addr)
		}
	}
	return s
}

// Client returns a cluster client, closed when the test ends.
func (cl *Cluster) Client(t testing.TB) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Seeds(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// WaitOK waits until every running node says cluster_state:ok and agrees on
// three masters.
func (cl *Cluster) WaitOK(t testing.TB, d time.Duration) {
	t.Helper()
	cl.waitAll(t, d, "ok (cluster_state:ok, cluster_size:3)", func(n *Server) (bool, string) {
		out, err := n.Try(context.Background(), "CLUSTER", "INFO")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, "cluster_state:ok") && strings.Contains(out, "cluster_size:3"), out
	})
}

// Master returns the node serving slot, as the cluster says (CLUSTER SLOTS).
func (cl *Cluster) Master(t testing.TB, c rueidis.Client, slot int64) *Server {
	t.Helper()
	var shards []rueidis.RedisMessage
	var err error
	for try := 0; try < 20; try++ { // a random node answers; it may be a dead one
		if shards, err = c.Do(context.Background(), c.B().ClusterSlots().Build()).ToArray(); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		r, _ := sh.ToArray()
		lo, _ := r[0].AsInt64()
		hi, _ := r[1].AsInt64()
		if slot < lo || slot > hi {
			continue
		}
		m, _ := r[2].ToArray()
		p, _ := m[1].AsInt64()
		for _, n := range cl.Nodes {
			if int64(n.Port()) == p {
				return n
			}
		}
	}
	t.Fatalf("no master for slot %d", slot)
	return nil
}

// ID returns a cluster node's ID (CLUSTER MYID).
func (s *Server) ID(t testing.TB) string {
	t.Helper()
	return s.Cmd(t, "CLUSTER", "MYID")
}

// String names the server in messages.
func (s *Server) String() string { return fmt.Sprintf("%s %s (%s)", s.Kind, s.Addr, s.How) }

// MigrateSlot moves slot from src to dst as redis-cli --cluster reshard
// does: CLUSTER SETSLOT IMPORTING on dst and MIGRATING on src, MIGRATE of
// the slot's keys, one by one, batch between two calls of split, in the
// order of their names (so that a test knows which move last), until src has
// none, then CLUSTER SETSLOT NODE on every node that is a master by then.
// After every MIGRATE that left keys on both nodes, split is called
// (nil: not at all) with how many each holds, so that a test can let its
// load run against the split slot. A MIGRATE the servers refuse fails the
// test with the key and their reply: BUSYKEY means that a write reached the
// target under a name the source still held.
func (cl *Cluster) MigrateSlot(t testing.TB, slot int64, src, dst *Server, batch int, split func(onSrc, onDst int)) {
	t.Helper()
	sl := strconv.FormatInt(slot, 10)
	dst.Cmd(t, "CLUSTER", "SETSLOT", sl, "IMPORTING", src.ID(t))
	src.Cmd(t, "CLUSTER", "SETSLOT", sl, "MIGRATING", dst.ID(t))
	for {
		all := strings.Fields(src.Cmd(t, "CLUSTER", "GETKEYSINSLOT", sl, "100000"))
		if len(all) == 0 {
			break
		}
		slices.Sort(all)
		for _, k := range all[:min(batch, len(all))] { // one at a time: a refusal names its key
			_, err := src.Try(context.Background(), "MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port()), "", "0", "5000", "KEYS", k)
			if err != nil {
				t.Fatalf("slot %s: MIGRATE of %s from %s to %s: %v", sl, k, src.Addr, dst.Addr, err)
			}
		}
		onSrc, _ := strconv.Atoi(src.Cmd(t, "CLUSTER", "COUNTKEYSINSLOT", sl))
		onDst, _ := strconv.Atoi(dst.Cmd(t, "CLUSTER", "COUNTKEYSINSLOT", sl))
		if split != nil && onSrc > 0 && onDst > 0 {
			split(onSrc, onDst)
		}
	}
	cl.SetSlotNode(t, slot, dst)
}

// Masters answers the nodes that are up and masters now. Under load (a CI
// machine's two cores) a master may stall past ClusterNodeTimeout and be
// failed over by its replica, so the first three nodes are not always the
// masters.
func (cl *Cluster) Masters(t testing.TB) []*Server {
	t.Helper()
	var out []*Server
	for _, n := range cl.Nodes {
		if n.Up() && strings.Contains(n.Cmd(t, "INFO", "replication"), "role:master") {
			out = append(out, n)
		}
	}
	return out
}

// OtherMaster answers a master other than src, to move a slot to.
func (cl *Cluster) OtherMaster(t testing.TB, src *Server) *Server {
	t.Helper()
	for _, n := range cl.Masters(t) {
		if n != src {
			return n
		}
	}
	t.Fatalf("no master other than %s", src)
	return nil
}

// SetSlotNode ends a slot's move: CLUSTER SETSLOT NODE dst on every master
// (a replica refuses it).
func (cl *Cluster) SetSlotNode(t testing.TB, slot int64, dst *Server) {
	t.Helper()
	sl, dstID := strconv.FormatInt(slot, 10), dst.ID(t)
	for _, n := range cl.Masters(t) {
		n.Cmd(t, "CLUSTER", "SETSLOT", sl, "NODE", dstID)
	}
}
