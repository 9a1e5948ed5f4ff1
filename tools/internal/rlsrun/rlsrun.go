// Package rlsrun starts envoyproxy/ratelimit and windowstored as processes
// for the tools that put them side by side (rlsdiff, rlsbench): each on free
// local ports, over one Redis server, logging to a directory, and ready once
// it answers a call on its gRPC port.
package rlsrun

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Service is a started service and a client of its rate-limit API.
type Service struct {
	Name string
	RL   rlspb.RateLimitServiceClient
	cmd  *exec.Cmd
	conn *grpc.ClientConn
}

// Envoy starts envoyproxy/ratelimit's binary bin on Redis redis (HOST:PORT)
// with configuration cfg, written under dir, and env: more of its settings,
// such as "CACHE_KEY_PREFIX=...".
func Envoy(bin, redis, dir, cfg string, env ...string) (*Service, error) {
	// It reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml.
	cd := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(cd, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(cd, "config.yaml"), []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis, "USE_STATSD=false", "LOG_LEVEL=warn",
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"GRPC_PORT="+ports[0], "PORT="+ports[1], "DEBUG_PORT="+ports[2]), env...)
	return start("envoyproxy/ratelimit", cmd, dir, ports[0])
}

// Windowstored starts windowstored's binary bin on Redis redis (HOST:PORT)
// with configuration cfg, written under dir, and args: more of its flags.
func Windowstored(bin, redis, dir, cfg string, args ...string) (*Service, error) {
	file := filepath.Join(dir, "windowstored.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"--addr", "redis://" + redis, "--config", file, "--grpc", "127.0.0.1:" + ports[0],
		"--http", "127.0.0.1:" + ports[1], "--log-level", "warn"}, args...)...)
	return start("windowstored", cmd, dir, ports[0])
}

// start runs cmd, logging to dir, until the service answers a call on its
// gRPC port (any answer, an unknown domain's included), up to 30 s.
func start(name string, cmd *exec.Cmd, dir, port string) (*Service, error) {
	logName := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".log")
	lf, err := os.Create(logName)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	s := &Service{Name: name, RL: rlspb.NewRateLimitServiceClient(conn), cmd: cmd, conn: conn}
	probe := &rlspb.RateLimitRequest{Domain: "rlsrun-probe", Descriptors: []*ratelimitpb.RateLimitDescriptor{
		{Entries: []*ratelimitpb.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := s.RL.ShouldRateLimit(ctx, probe)
		cancel()
		if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			log, _ := os.ReadFile(logName)
			return nil, fmt.Errorf("%s not ready: %w\n%s", name, err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the service (SIGTERM, then a kill after 10 s) and its client.
func (s *Service) Stop() {
	_ = s.conn.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// freePorts are n local TCP ports free a moment ago.
func freePorts(n int) ([]string, error) {
	var ps []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ps = append(ps, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	return ps, nil
}
