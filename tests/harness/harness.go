// Package harness gives integration tests real servers.
//
// Every server the harness starts is a container on the host's network
// (`--network host`), listening on a free loopback port (`--port N --bind
// 127.0.0.1`), started with testcontainers-go from the image named by
// REDIS70_IMAGE, REDIS80_IMAGE, VALKEY_IMAGE, VALKEY9_IMAGE or TAIRHASH_IMAGE
// (defaults: the official redis:7.0, redis:8.0, valkey/valkey:8.1,
// valkey/valkey:9.1; TairHash has no default).
// Nothing else is needed on the machine: no redis-server, no redis-cli, only a
// Docker engine. With host networking there is no port proxy in the way, a
// server can be killed (SIGKILL through the Docker API) and started again on
// the same port, and a cluster's nodes can announce their real addresses.
//
// The servers that all tests share can instead be given by address:
// REDIS70_ADDR, REDIS80_ADDR, VALKEY_ADDR, VALKEY9_ADDR, TAIRHASH_ADDR
// (host:port).
//
// No fake server is ever used. A test that cannot get its server is skipped
// through Skip, with the reason, or fails when WINDOWSTORE_REQUIRE names its
// area. A server that does not come up (its port taken, a timeout) is tried
// again on a new port a few times; then the test fails: it is never skipped.
// Containers carry the label windowstore.test=true; scripts/test.sh removes
// them when it exits.
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// Kind is a kind of server.
type Kind string

// The kinds of server the suite runs on.
const (
	Redis70  Kind = "redis70"  // Redis 7.0: plain hash only
	Redis80  Kind = "redis80"  // Redis 8.0: hash-field TTL
	Valkey   Kind = "valkey"   // Valkey 8.1: plain hash only
	Valkey9  Kind = "valkey9"  // Valkey 9.1: hash-field TTL
	TairHash Kind = "tairhash" // a server with the TairHash module
)

// Kinds lists every kind, in the order the conformance suite runs them.
var Kinds = []Kind{Redis70, Redis80, Valkey, Valkey9, TairHash}

type spec struct {
	addrEnv, imageEnv, image, server string
}

var specs = map[Kind]spec{
	Redis70:  {"REDIS70_ADDR", "REDIS70_IMAGE", "redis:7.0", "redis-server"},
	Redis80:  {"REDIS80_ADDR", "REDIS80_IMAGE", "redis:8.0", "redis-server"},
	Valkey:   {"VALKEY_ADDR", "VALKEY_IMAGE", "valkey/valkey:8.1", "valkey-server"},
	Valkey9:  {"VALKEY9_ADDR", "VALKEY9_IMAGE", "valkey/valkey:9.1", "valkey-server"},
	TairHash: {"TAIRHASH_ADDR", "TAIRHASH_IMAGE", "", "redis-server"},
}

// Image returns the image the harness runs for kind k, or "" (TairHash without
// TAIRHASH_IMAGE).
func Image(k Kind) string {
	if i := os.Getenv(specs[k].imageEnv); i != "" {
		return i
	}
	return specs[k].image
}

// Server is a running server.
type Server struct {
	Kind Kind
	Addr string // 127.0.0.1:port, or the address from the environment
	How  string // "env REDIS70_ADDR" or "container <image>"

	ctr *ctrRef // nil for a server given by address

	mu      sync.Mutex
	up      bool
	cmdCli  rueidis.Client // Cmd's client, made on first use
	stopped bool
}

var (
	sharedMu sync.Mutex
	shared   = map[Kind]*sharedServer{}
	allMu    sync.Mutex
	all      []*Server
)

type sharedServer struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the server of kind k that all tests of this process share,
// starting it on first use. Tests keep apart by key prefix (see Prefix).
func Shared(t testing.TB, k Kind) *Server {
	t.Helper()
	sharedMu.Lock()
	sh := shared[k]
	if sh == nil {
		sh = &sharedServer{}
		shared[k] = sh
	}
	sharedMu.Unlock()
	sh.once.Do(func() {
		if a := os.Getenv(specs[k].addrEnv); a != "" {
			sh.srv = &Server{Kind: k, Addr: a, How: "env " + specs[k].addrEnv, up: true}
			return
		}
		sh.srv, sh.err = start(k, nil, false, nil)
	})
	if sh.err != nil {
		fail(t, Area(k), sh.err)
	}
	Use(t, Area(k))
	return sh.srv
}

// fail ends a test that could not have its server: a skip (through Skip) when
// the server cannot be had at all (no Docker engine, no image), a failure when
// it could be had but did not start.
func fail(t testing.TB, a Area, err error) {
	t.Helper()
	var u unavailable
	if errors.As(err, &u) {
		Skip(t, a, u.why)
	}
	t.Fatalf("%s: %v", a, err)
}

// Fresh starts a server of kind k for this test alone, with extra server
// arguments, and removes it when the test ends. It can be killed (Kill),
// started again on the same port (Start, Restart), and stalled with DEBUG
// SLEEP when args enable it ("--enable-debug-command", "yes"). It needs the
// kind's image, even when the shared server is given by address.
func Fresh(t testing.TB, k Kind, args ...string) *Server {
	t.Helper()
	s, err := start(k, nil, false, args)
	if err != nil {
		fail(t, Area(k), err)
	}
	Use(t, Area(k))
	t.Cleanup(s.Stop)
	return s
}

// FreshTLS is Fresh for a TLS-only server: files (host path -> path in the
// container) are copied in first, and the server listens with TLS on its
// port (`--port 0 --tls-port N`); args add the certificate options.
func FreshTLS(t testing.TB, k Kind, files map[string]string, args ...string) *Server {
	t.Helper()
	s, err := start(k, files, true, args)
	if err != nil {
		fail(t, AreaTLS, err)
	}
	Use(t, Area(k), AreaTLS)
	t.Cleanup(s.Stop)
	return s
}

// Replica starts a replica of master (a Fresh server), with the same image
// and extra arguments, and waits until it has synced (master_link_status:up).
// It is removed when the test ends.
func Replica(t testing.TB, master *Server, args ...string) *Server {
	t.Helper()
	if master.ctr == nil {
		Skip(t, AreaReplication, "a replica needs a master started by the harness")
	}
	// The master sends its first copy at once, not after the default 5 s
	// wait for more replicas.
	master.Cmd(t, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	_, port, _ := net.SplitHostPort(master.Addr)
	s, err := start(master.Kind, nil, false, append([]string{"--replicaof", "127.0.0.1", port}, args...))
	if err != nil {
		fail(t, AreaReplication, err)
	}
	Use(t, AreaReplication)
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := s.Try(context.Background(), "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica %s never synced with %s: %v\n%s", s.Addr, master.Addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start makes a server of kind k: a container on the host's network.
func start(k Kind, files map[string]string, tls bool, args []string) (*Server, error) {
	image := Image(k)
	if image == "" && os.Getenv(specs[k].addrEnv) != "" {
		return nil, unavailable{fmt.Sprintf("this test needs a %s server of its own: set %s too (%s gives only the shared one)", k, specs[k].imageEnv, specs[k].addrEnv)}
	}
	if image == "" {
		return nil, unavailable{"set TAIRHASH_IMAGE (for example tairmodule/tairhash:latest) or TAIRHASH_ADDR to run the TairHash tests"}
	}
	if _, why := docker(); why != "" {
		return nil, unavailable{why}
	}
	c, ports, err := launch(image, files, 0, func(ports []int) []string {
		return serverCmd(k, ports[0], tls, args)
	})
	if err != nil {
		return nil, err
	}
	s := &Server{Kind: k, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), How: "container " + image, ctr: c, up: true}
	allMu.Lock()
	all = append(all, s)
	allMu.Unlock()
	return s, nil
}

// serverCmd is the command line of a server of kind k on port: no
// persistence, then args.
func serverCmd(k Kind, port int, tls bool, args []string) []string {
	cmd := []string{specs[k].server}
	if tls {
		cmd = append(cmd, "--port", "0", "--tls-port", strconv.Itoa(port))
	} else {
		cmd = append(cmd, "--port", strconv.Itoa(port))
	}
	cmd = append(cmd, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if k == TairHash {
		// The official image loads the module from its config file, which a
		// command override skips: load it here (TAIRHASH_MODULE moves it).
		mod := os.Getenv("TAIRHASH_MODULE")
		if mod == "" {
			mod = "/usr/local/lib/tairhash_module.so"
		}
		cmd = append(cmd, "--loadmodule", mod)
	}
	return append(cmd, args...)
}

// Kill stops the server at once: SIGKILL to its container, through the Docker
// API. Its data and script cache are gone; Start brings it back on the same
// port, empty.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if s.ctr == nil {
		t.Fatalf("Kill needs a server started by the harness, not %s", s.How)
	}
	if err := s.ctr.kill(); err != nil {
		t.Fatalf("kill %s: %v", s.Addr, err)
	}
	s.mu.Lock()
	s.up = false
	s.mu.Unlock()
}

// Freeze stops the server's process (SIGSTOP) until Thaw: its connections
// stay open and nothing answers, as a server stuck in a long pause. The
// test's cleanup thaws it.
func (s *Server) Freeze(t testing.TB) {
	t.Helper()
	if s.ctr == nil {
		t.Fatalf("Freeze needs a server started by the harness, not %s", s.How)
	}
	if err := s.ctr.signal("SIGSTOP"); err != nil {
		t.Fatalf("freeze %s: %v", s.Addr, err)
	}
	t.Cleanup(func() { _ = s.ctr.signal("SIGCONT") })
}

// Thaw lets a frozen server's process go on (SIGCONT).
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	if err := s.ctr.signal("SIGCONT"); err != nil {
		t.Fatalf("thaw %s: %v", s.Addr, err)
	}
}

// Start starts a killed server again, on the same port, and waits until it
// accepts connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.ctr == nil {
		t.Fatalf("Start needs a server started by the harness, not %s", s.How)
	}
	if err := s.ctr.start(); err != nil {
		t.Fatalf("start %s again: %v", s.Addr, err)
	}
	s.mu.Lock()
	s.up = true
	s.mu.Unlock()
}

// Restart kills the server (no save: data and script cache are gone) and
// starts it again on the same port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill(t)
	s.Start(t)
}

// Up tells whether the server runs (it has not been killed or stopped).
func (s *Server) Up() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// Stop removes a server the harness started; a server given by address is left alone.
func (s *Server) Stop() {
	s.mu.Lock()
	if s.stopped || s.ctr == nil {
		s.mu.Unlock()
		return
	}
	s.stopped, s.up = true, false
	c := s.cmdCli
	s.cmdCli = nil
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
	s.ctr.remove()
}

// Port returns the server's port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// URL returns the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Client returns a new client of the server, closed when the test ends.
func (s *Server) Client(t testing.TB) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("connect to %s (%s): %v", s.Kind, s.How, err)
	}
	t.Cleanup(c.Close)
	return c
}

// WaitReplicas writes marker (a key that expires in a second) on the server,
// then runs WAIT 1 on the same connection, and returns how many replicas
// acknowledged every write the server took before the marker, on any
// connection: 0 after timeout. WAIT counts only the writes of its own
// connection, and rueidis sends a blocking command such as WAIT on a pooled
// connection of its own, so WAIT alone, after writes made through another
// client, proves nothing; the marker's place in the replication stream does.
func (s *Server) WaitReplicas(t testing.TB, marker string, timeout time.Duration) int64 {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatalf("connect to %s (%s): %v", s.Kind, s.How, err)
	}
	defer c.Close()
	var got int64
	err = c.Dedicated(func(d rueidis.DedicatedClient) error {
		ctx := context.Background()
		if err := d.Do(ctx, d.B().Set().Key(marker).Value("1").PxMilliseconds(1000).Build()).Error(); err != nil {
			return err
		}
		var err error
		got, err = d.Do(ctx, d.B().Wait().Numreplicas(1).Timeout(timeout.Milliseconds()).Build()).AsInt64()
		return err
	})
	if err != nil {
		t.Fatalf("WAIT on %s: %v", s.Addr, err)
	}
	return got
}

// Version names the server as it names itself in INFO server: "Valkey
// 8.1.1" (valkey_version), else "Redis 7.0.15" (redis_version, which Valkey
// also reports, as the Redis version it is compatible with). The figures a
// test measures carry it (package figures), so that the docs name the
// server that measured them.
func (s *Server) Version(t testing.TB) string {
	t.Helper()
	var redis, valkey string
	for _, l := range strings.Split(s.Cmd(t, "INFO", "server"), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
		switch k {
		case "redis_version":
			redis = v
		case "valkey_version":
			valkey = v
		}
	}
	switch {
	case valkey != "":
		return "Valkey " + valkey
	case redis != "":
		return "Redis " + redis
	}
	t.Fatalf("%s: INFO server has neither redis_version nor valkey_version", s.Addr)
	return ""
}

// Cmd runs one command on the server (a single node, even in a cluster)
// through rueidis and returns its reply as text: a string or a number as
// is, an array one element per line (nested arrays flattened), nil as "".
// A server error fails the test.
func (s *Server) Cmd(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.Try(ctx, args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), s.Addr, err)
	}
	return out
}

// Try is Cmd that returns the error instead of failing the test. A call that
// fails on a connection (not with a server error) is sent once more, on a
// new connection: a server that was restarted breaks the old one.
func (s *Server) Try(ctx context.Context, args ...string) (string, error) {
	c, err := s.cmdClient()
	if err != nil {
		return "", err
	}
	m, err := c.Do(ctx, c.B().Arbitrary(args...).Build()).ToMessage()
	if _, isRedis := rueidis.IsRedisErr(err); err != nil && !isRedis && ctx.Err() == nil {
		// A connection broken by a restart fails its next call once: again.
		m, err = c.Do(ctx, c.B().Arbitrary(args...).Build()).ToMessage()
	}
	if err != nil {
		return "", err
	}
	var b strings.Builder
	text(&b, m)
	return strings.TrimRight(b.String(), "\n"), nil
}

func (s *Server) cmdClient() (rueidis.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmdCli != nil {
		return s.cmdCli, nil
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr}, DisableCache: true,
		ForceSingleClient: true, DisableRetry: true, Dialer: net.Dialer{Timeout: 2 * time.Second}})
	if err != nil {
		return nil, err
	}
	s.cmdCli = c
	return c, nil
}

// text writes a reply plainly, one scalar per line.
func text(b *strings.Builder, m rueidis.RedisMessage) {
	switch {
	case m.IsNil():
		b.WriteString("\n")
	case m.IsArray():
		arr, _ := m.ToArray()
		for _, e := range arr {
			text(b, e)
		}
	case m.IsMap():
		mp, _ := m.AsMap()
		for k, v := range mp {
			b.WriteString(k + "\n")
			text(b, v)
		}
	case m.IsInt64():
		n, _ := m.AsInt64()
		b.WriteString(strconv.FormatInt(n, 10) + "\n")
	default:
		v, err := m.ToString()
		if err != nil {
			v = fmt.Sprint(m)
		} else if !m.IsString() && len(v) >= 4 && v[3] == ':' {
			v = v[4:] // a verbatim string's format ("txt:")
		}
		b.WriteString(v + "\n")
	}
}

// StopAll removes every server the harness started. Call it from TestMain.
func StopAll() {
	allMu.Lock()
	servers := all
	all = nil
	allMu.Unlock()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
}

// Prefix returns a key prefix unique to the test, so tests can share a server.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("t:%s:%d:", strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()), time.Now().UnixNano())
}

// Windowctl builds the windowctl command once per process and returns its path.
func Windowctl(t testing.TB) string { return Binary(t, "./cmd/windowctl") }

// Binary builds a main package of the repository (a path like
// "./cmd/windowctl") once per process and returns the binary's path.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if b, ok := bins[pkg]; ok {
		return b
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	dir, err := os.MkdirTemp("", "windowstore-bin-")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	bins[pkg] = out
	return out
}

var (
	binMu sync.Mutex
	bins  = map[string]string{}
)
