package harness

import (
	"context"

	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Cluster is a real Redis Cluster of local redis-server processes on
// loopback: 3 masters and 3 replicas (cluster-node-timeout 1 s).
type Cluster struct {
	Nodes []*Server // in creation order: the first three start as masters
}

// NewCluster starts a 3-master, 3-replica cluster for this test alone and
// stops it when the test ends. It needs redis-server and redis-cli on PATH
// (the Debian packages); it skips, loudly, without them.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		skipLoud(t, "cluster", "no redis-cli on PATH")
	}
	cl := &Cluster{}
	for i := 0; i < 6; i++ {
		dir, err := os.MkdirTemp("", "windowstore-cluster-")
		if err != nil {
			t.Fatal(err)
		}
		s, err := startProcess("--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf",
			"--cluster-node-timeout", "1000", "--appendonly", "no", "--dir", dir, "--repl-diskless-sync-delay", "0")
		if err != nil {
			skipLoud(t, "cluster", err.Error())
		}
		s.Kind = "cluster"
		t.Cleanup(func() { s.Stop(); _ = os.RemoveAll(dir) })
		cl.Nodes = append(cl.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, n := range cl.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	cl.WaitOK(t, 30*time.Second)
	// A replica that never finished its first sync cannot fail over: wait.
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range cl.Nodes {
		for {
			info := Cli(t, n, "INFO", "replication")
			if strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s never synced:\n%s", n.Addr, info)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return cl
}

// Seeds returns every node's address.
func (cl *Cluster) Seeds() []string {
	var s []string
	for _, n := range cl.Nodes {
		if n.proc != nil {
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
	deadline := time.Now().Add(d)
	for {
		ok := true
		for _, n := range cl.Nodes {
			if n.proc == nil {
				continue
			}
			out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", port(n.Addr), "CLUSTER", "INFO").Output()
			if err != nil || !strings.Contains(string(out), "cluster_state:ok") || !strings.Contains(string(out), "cluster_size:3") {
				ok = false
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not become ok within %v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Master returns the node serving slot.
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
			if port(n.Addr) == strconv.FormatInt(p, 10) {
				return n
			}
		}
	}
	t.Fatalf("no master for slot %d", slot)
	return nil
}

// NodeID returns a node's cluster ID.
func NodeID(t testing.TB, n *Server) string {
	t.Helper()
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", port(n.Addr), "CLUSTER", "MYID").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// Cli runs redis-cli against a node and returns its output.
func Cli(t testing.TB, n *Server, args ...string) string {
	t.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-h", "127.0.0.1", "-p", port(n.Addr)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func port(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	return addr[i+1:]
}
