// Package harness gives integration tests real servers.
//
// For each kind of server it tries, in order:
//
//  1. an address from the environment (REDIS70_ADDR, REDIS80_ADDR, VALKEY_ADDR,
//     TAIRHASH_ADDR, as host:port);
//  2. a container started with testcontainers-go, from the image named by
//     REDIS70_IMAGE, REDIS80_IMAGE, VALKEY_IMAGE or TAIRHASH_IMAGE, defaulting
//     to the official images (redis:7.0, redis:8.0, valkey/valkey:8.1; TairHash
//     has no default and is skipped, loudly, when neither variable is set);
//  3. when no Docker engine is usable, a local redis-server process (for the
//     plain Redis kind only).
//
// No fake server is ever used. A test that cannot get its server is skipped
// with a loud message, or fails when WINDOWSTORE_REQUIRE names the kind.
//
// Behind Docker's own network namespace (a machine that is itself a container),
// testcontainers may guess a host address that does not reach the published
// ports; set TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 when the engine runs on
// this host (scripts/test.sh does).
package harness

import (
	"bufio"
	"context"
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
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Kind is a kind of server.
type Kind string

// The kinds of server the suite runs on.
const (
	Redis70  Kind = "redis70"  // Redis 7.0: plain hash only
	Redis80  Kind = "redis80"  // Redis 8.0: hash-field TTL
	Valkey   Kind = "valkey"   // Valkey 8.1: plain hash only
	TairHash Kind = "tairhash" // a server with the TairHash module
)

// Kinds lists every kind, in the order the conformance suite runs them.
var Kinds = []Kind{Redis70, Redis80, Valkey, TairHash}

type spec struct {
	addrEnv, imageEnv, image, server string
}

var specs = map[Kind]spec{
	Redis70:  {"REDIS70_ADDR", "REDIS70_IMAGE", "redis:7.0", "redis-server"},
	Redis80:  {"REDIS80_ADDR", "REDIS80_IMAGE", "redis:8.0", "redis-server"},
	Valkey:   {"VALKEY_ADDR", "VALKEY_IMAGE", "valkey/valkey:8.1", "valkey-server"},
	TairHash: {"TAIRHASH_ADDR", "TAIRHASH_IMAGE", "", "redis-server"},
}

// Server is a running server.
type Server struct {
	Kind Kind
	Addr string // host:port
	How  string // "env", "container <image>" or "process <binary>"

	ctr  testcontainers.Container
	proc *exec.Cmd
	args []string // a process's full argument list
	dir  string
}

var (
	mu     sync.Mutex
	shared = map[Kind]*Server{}
	failed = map[Kind]string{}
	all    []*Server
)

// Shared returns the server of kind k that all tests of this process share,
// starting it on first use. Tests keep apart by key prefix (see Prefix). The
// test is skipped, with the reason, when no such server can be had.
func Shared(t testing.TB, k Kind) *Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if s := shared[k]; s != nil {
		return s
	}
	if why, ok := failed[k]; ok {
		skipLoud(t, k, why)
	}
	if a := os.Getenv(specs[k].addrEnv); a != "" {
		s := &Server{Kind: k, Addr: a, How: "env " + specs[k].addrEnv}
		shared[k] = s
		return s
	}
	s, why := start(k)
	if s == nil {
		failed[k] = why
		skipLoud(t, k, why)
	}
	shared[k] = s
	return s
}

// Fresh starts a server of kind k for this test alone, with extra server
// arguments, and stops it when the test ends. It skips when the kind is given
// only by address (a fresh server cannot be made from an address).
func Fresh(t testing.TB, k Kind, args ...string) *Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	s, why := start(k, args...)
	if s == nil {
		skipLoud(t, k, why)
	}
	t.Cleanup(s.Stop)
	return s
}

// skipLoud skips the test, loudly, unless WINDOWSTORE_REQUIRE names the kind
// (a comma-separated list, or "all"): then a missing server fails the test.
func skipLoud(t testing.TB, k Kind, why string) {
	t.Helper()
	for _, r := range strings.Split(os.Getenv("WINDOWSTORE_REQUIRE"), ",") {
		if r = strings.TrimSpace(r); r == string(k) || r == "all" {
			t.Fatalf("no %s server, and WINDOWSTORE_REQUIRE asks for one: %s", k, why)
		}
	}
	msg := fmt.Sprintf("\n\n*** SKIPPED: no %s server: %s ***\n\n", k, why)
	fmt.Fprint(os.Stderr, msg)
	t.Skip(msg)
}

// FreshWithFiles is Fresh with files copied into the container first: files
// maps a host path to the path in the container. It skips where no container
// can be made.
func FreshWithFiles(t testing.TB, k Kind, files map[string]string, args ...string) *Server {
	t.Helper()
	if !dockerOK() {
		skipLoud(t, k, "copying files into a server needs a Docker engine")
	}
	sp := specs[k]
	image := os.Getenv(sp.imageEnv)
	if image == "" {
		image = sp.image
	}
	s, err := startContainer(k, image, files, args...)
	if err != nil {
		skipLoud(t, k, fmt.Sprintf("container %s: %v", image, err))
	}
	t.Cleanup(s.Stop)
	return s
}

// start makes a server of kind k: a container if Docker is usable, else a process.
func start(k Kind, args ...string) (*Server, string) {
	sp := specs[k]
	image := os.Getenv(sp.imageEnv)
	if image == "" {
		image = sp.image
	}
	if k == TairHash && image == "" {
		return nil, "set TAIRHASH_IMAGE (for example tairmodule/tairhash:latest) or TAIRHASH_ADDR to run the TairHash tests"
	}
	if dockerOK() {
		s, err := startContainer(k, image, nil, args...)
		if err != nil {
			return nil, fmt.Sprintf("container %s: %v", image, err)
		}
		all = append(all, s)
		return s, ""
	}
	if k != Redis70 {
		return nil, "no usable Docker engine, and only the plain Redis kind can fall back to a local process"
	}
	s, err := startProcess(args...)
	if err != nil {
		return nil, fmt.Sprintf("no usable Docker engine, and no local redis-server: %v", err)
	}
	all = append(all, s)
	return s, ""
}

var (
	dockerOnce sync.Once
	dockerUp   bool
)

func dockerOK() bool {
	dockerOnce.Do(func() {
		defer func() { _ = recover() }()
		p, err := testcontainers.ProviderDefault.GetProvider()
		if err != nil {
			return
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dockerUp = p.Health(ctx) == nil
	})
	return dockerUp
}

func startContainer(k Kind, image string, files map[string]string, args ...string) (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := append([]string{specs[k].server}, args...)
	if k == TairHash {
		// The official image loads the module from its config file, which a
		// command override skips: load it here (TAIRHASH_MODULE moves it).
		mod := os.Getenv("TAIRHASH_MODULE")
		if mod == "" {
			mod = "/usr/local/lib/tairhash_module.so"
		}
		cmd = append(cmd, "--loadmodule", mod)
	}
	var cfs []testcontainers.ContainerFile
	for host, in := range files {
		cfs = append(cfs, testcontainers.ContainerFile{HostFilePath: host, ContainerFilePath: in, FileMode: 0o644})
	}
	ready := wait.ForAll(wait.ForListeningPort("6379/tcp"), wait.ForLog("Ready to accept connections")).WithDeadline(time.Minute)
	if len(files) > 0 { // a TLS port fails the plain listening check's probe; the log line suffices
		ready = wait.ForAll(wait.ForLog("Ready to accept connections")).WithDeadline(time.Minute)
	}
	ctr, err := testcontainers.Run(ctx, image,
		testcontainers.WithFiles(cfs...),
		testcontainers.WithCmd(cmd...),
		testcontainers.WithExposedPorts("6379/tcp"),
		testcontainers.WithLabels(map[string]string{"windowstore.test": "true"}),
		testcontainers.WithWaitStrategy(ready),
	)
	if err != nil {
		if ctr != nil {
			_ = ctr.Terminate(context.Background())
		}
		return nil, err
	}
	host, err := ctr.Host(ctx)
	if err != nil {
		return nil, err
	}
	port, err := ctr.MappedPort(ctx, "6379/tcp")
	if err != nil {
		return nil, err
	}
	return &Server{Kind: k, Addr: net.JoinHostPort(host, port.Port()), How: "container " + image, ctr: ctr}, nil
}

func startProcess(args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "windowstore-redis-")
	if err != nil {
		return nil, err
	}
	full := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}, args...)
	s := &Server{Kind: Redis70, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), How: "process " + bin, args: full, dir: dir}
	if err := s.startProc(); err != nil {
		return nil, err
	}
	return s, nil
}

// startProc starts (or starts again) a process server and waits until it is ready.
func (s *Server) startProc() error {
	cmd := exec.Command(strings.TrimPrefix(s.How, "process "), s.args...)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				ready <- true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("redis-server did not start")
	}
	s.proc = cmd
	return nil
}

// Process starts a local redis-server process for this test alone, whatever
// Docker offers, so that the test can kill and restart it on the same port
// (see Restart). It skips when there is no redis-server on PATH.
func Process(t testing.TB, args ...string) *Server {
	t.Helper()
	s, err := startProcess(args...)
	if err != nil {
		skipLoud(t, Redis70, "no local redis-server process: "+err.Error())
	}
	t.Cleanup(s.Stop)
	return s
}

// Restart kills a process server at once (no save, so its data and script
// cache are gone) and starts it again on the same port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.proc == nil {
		t.Fatal("Restart needs a process server")
	}
	_ = s.proc.Process.Kill()
	_, _ = s.proc.Process.Wait()
	if err := s.startProc(); err != nil {
		t.Fatal(err)
	}
}

// Kill stops a process server at once, leaving it down until Restart.
func (s *Server) Kill() {
	if s.proc != nil {
		_ = s.proc.Process.Kill()
		_, _ = s.proc.Process.Wait()
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Stop stops a server the harness started; a server given by address is left alone.
func (s *Server) Stop() {
	switch {
	case s.ctr != nil:
		_ = s.ctr.Terminate(context.Background())
		s.ctr = nil
	case s.proc != nil:
		_ = s.proc.Process.Kill()
		_, _ = s.proc.Process.Wait()
		_ = os.RemoveAll(s.dir)
		s.proc = nil
	}
}

// Container returns the server's container, or nil when it is not one.
func (s *Server) Container() testcontainers.Container { return s.ctr }

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

// StopAll stops every server the harness started. Call it from TestMain.
func StopAll() {
	mu.Lock()
	defer mu.Unlock()
	for _, s := range all {
		s.Stop()
	}
	all = nil
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
