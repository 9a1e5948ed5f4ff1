package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/tests/harness"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// wsd is a windowstored process the test started.
type wsd struct {
	cmd        *exec.Cmd
	config     string // the configuration file
	grpc, http string // where it listens
	rls        rlspb.RateLimitServiceClient
	logs       *syncBuffer
	exited     chan struct{}
	exit       int
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func localPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// startWSD runs windowstored against addr with this configuration (YAML; a
// settings document with the test's own prefixes is added), and waits until
// its health check answers.
func startWSD(t *testing.T, addr, config string, args ...string) *wsd {
	t.Helper()
	dir := t.TempDir()
	p := harness.Prefix(t)
	file := filepath.Join(dir, "config.yaml")
	config = fmt.Sprintf("windowstored:\n  prefix: %q\n  feature_prefix: %q\n---\n", p+"rl:", p+"fx:") + config
	require.NoError(t, os.WriteFile(file, []byte(config), 0o644))
	d := &wsd{config: file, grpc: localPort(t), http: localPort(t), logs: &syncBuffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command(harness.Binary(t, "./cmd/windowstored"), append([]string{"--addr", addr, "--config", file,
		"--grpc", d.grpc, "--http", d.http, "--watch", "100ms", "--log-format", "text"}, args...)...)
	d.cmd.Stderr = d.logs
	require.NoError(t, d.cmd.Start())
	go func() {
		d.cmd.Wait()
		d.exit = d.cmd.ProcessState.ExitCode()
		close(d.exited)
	}()
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(30 * time.Second):
			d.cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("windowstored's log:\n%s", d.logs.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := d.get(t, "/healthcheck"); code == 200 {
			break
		}
		select {
		case <-d.exited:
			t.Fatalf("windowstored exited with %d:\n%s", d.exit, d.logs.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "windowstored did not answer its health check:\n%s", d.logs.String())
		time.Sleep(100 * time.Millisecond)
	}
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	d.rls = rlspb.NewRateLimitServiceClient(conn)
	return d
}

func (d *wsd) get(t *testing.T, path string) (int, string) {
	resp, err := http.Get("http://" + d.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (d *wsd) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post("http://"+d.http+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, json.Unmarshal(b, &m), string(b))
	return resp.StatusCode, m
}

// desc makes a descriptor of key=value entries ("user=42").
func desc(kvs ...string) *ratelimitpb.RateLimitDescriptor {
	d := &ratelimitpb.RateLimitDescriptor{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func (d *wsd) ask(t *testing.T, domain string, hits uint32, ds ...*ratelimitpb.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	resp, err := d.rls.ShouldRateLimit(ctxT(t), &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	require.NoError(t, err)
	require.Len(t, resp.Statuses, len(ds))
	return resp
}

const (
	ok   = rlspb.RateLimitResponse_OK
	over = rlspb.RateLimitResponse_OVER_LIMIT
)

const wsdConfig = `
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /free
    rate_limit: {unlimited: true}
  - key: path
    value: /new
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 100, name: tenant_default, algorithm: fixed}
  - key: plan
    value: trial
    rate_limit: {unit: hour, requests_per_unit: 2, replaces: [{name: tenant_default}]}
  - key: api
    value: v1*
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 2, bucket: 500ms}
  - key: race
    rate_limit: {unit: minute, requests_per_unit: 17}
`

// TestWindowstoredRLS drives windowstored's rate-limit service with a gRPC
// client made from Envoy's published types (go-control-plane), against a
// real Redis, with a configuration in envoyproxy/ratelimit's format.
func TestWindowstoredRLS(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	d := startWSD(t, srv.URL(), wsdConfig)

	t.Run("limit", func(t *testing.T) {
		for i, want := range []uint32{2, 1, 0} {
			r := d.ask(t, "shop", 0, desc("user=u1"))
			require.Equal(t, ok, r.OverallCode, i)
			s := r.Statuses[0]
			require.Equal(t, ok, s.Code)
			require.Equal(t, want, s.LimitRemaining)
			require.Equal(t, uint32(3), s.CurrentLimit.RequestsPerUnit)
			require.Equal(t, rlspb.RateLimitResponse_RateLimit_MINUTE, s.CurrentLimit.Unit)
			require.Positive(t, s.DurationUntilReset.AsDuration())
		}
		r := d.ask(t, "shop", 0, desc("user=u1"))
		require.Equal(t, over, r.OverallCode)
		require.Equal(t, over, r.Statuses[0].Code)
		require.Zero(t, r.Statuses[0].LimitRemaining)
		// Its reset is when the first request leaves the sliding window.
		require.InDelta(t, time.Minute.Seconds(), r.Statuses[0].DurationUntilReset.AsDuration().Seconds(), 2)
		hs := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			hs[h.Key] = h.Value
		}
		require.Equal(t, `"default";q=3;w=60`, hs["RateLimit-Policy"])
		require.Regexp(t, `^"default";r=0;t=(59|60)$`, hs["RateLimit"])
		// Another value of the key has its own counter.
		require.Equal(t, ok, d.ask(t, "shop", 0, desc("user=u2")).OverallCode)
	})

	t.Run("all or nothing", func(t *testing.T) {
		// The user allows 3 and the IP 5: the fourth request of the user
		// is refused, and counts nothing on the IP.
		for i := 0; i < 3; i++ {
			require.Equal(t, ok, d.ask(t, "shop", 0, desc("user=a1"), desc("ip=10.0.0.1")).OverallCode)
		}
		for i := 0; i < 3; i++ {
			r := d.ask(t, "shop", 0, desc("user=a1"), desc("ip=10.0.0.1"))
			require.Equal(t, over, r.OverallCode)
			require.Equal(t, over, r.Statuses[0].Code)
			require.Equal(t, ok, r.Statuses[1].Code, "the IP admitted it on its own")
			require.Equal(t, uint32(2), r.Statuses[1].LimitRemaining, "and counted nothing")
		}
		// The IP alone: its 4th and 5th pass, its 6th does not.
		require.Equal(t, uint32(1), d.ask(t, "shop", 0, desc("ip=10.0.0.1")).Statuses[0].LimitRemaining)
		require.Equal(t, uint32(0), d.ask(t, "shop", 0, desc("ip=10.0.0.1")).Statuses[0].LimitRemaining)
		require.Equal(t, over, d.ask(t, "shop", 0, desc("ip=10.0.0.1")).OverallCode)
	})

	t.Run("hits_addend", func(t *testing.T) {
		r := d.ask(t, "shop", 2, desc("user=h1"))
		require.Equal(t, ok, r.OverallCode)
		require.Equal(t, uint32(1), r.Statuses[0].LimitRemaining)
		r = d.ask(t, "shop", 2, desc("user=h1"))
		require.Equal(t, over, r.OverallCode, "2 more do not fit in the 1 left")
		require.Zero(t, d.ask(t, "shop", 0, desc("user=h1")).Statuses[0].LimitRemaining, "1 more fits")
		// A descriptor's own hits_addend wins over the request's; 0 only asks.
		dd := desc("user=h2")
		dd.HitsAddend = wrapperspb.UInt64(3)
		r = d.ask(t, "shop", 1, dd, desc("ip=10.0.0.9"))
		require.Equal(t, ok, r.OverallCode)
		require.Equal(t, []uint32{0, 4}, []uint32{r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining})
		dd.HitsAddend = wrapperspb.UInt64(0)
		r = d.ask(t, "shop", 0, dd)
		require.Equal(t, ok, r.OverallCode)
		require.Zero(t, r.Statuses[0].LimitRemaining)
		// A cost above the limit never fits.
		r = d.ask(t, "shop", 4, desc("user=h3"))
		require.Equal(t, over, r.OverallCode)
	})

	t.Run("unlimited, no limit, shadow", func(t *testing.T) {
		r := d.ask(t, "shop", 0, desc("path=/free"), desc("nothing=here"), desc("user=s1", "deeper=x"))
		require.Equal(t, ok, r.OverallCode)
		require.Equal(t, uint32(math.MaxUint32), r.Statuses[0].LimitRemaining)
		require.Nil(t, r.Statuses[1].CurrentLimit)
		require.Nil(t, r.Statuses[2].CurrentLimit, "a descriptor deeper than the tree has no limit")
		// The shadow limit allows 1: the second request would be refused,
		// and passes; its status stays OK, as envoyproxy/ratelimit's.
		before := shadowRefused(t, d)
		for i := 0; i < 3; i++ {
			r = d.ask(t, "shop", 0, desc("path=/new"))
			require.Equal(t, ok, r.OverallCode)
			require.Equal(t, ok, r.Statuses[0].Code)
			require.Zero(t, r.Statuses[0].LimitRemaining)
			require.Equal(t, uint32(1), r.Statuses[0].CurrentLimit.RequestsPerUnit)
			if i > 0 {
				require.Equal(t, before+float64(i), shadowRefused(t, d))
			}
		}
	})

	t.Run("replaces", func(t *testing.T) {
		// The trial plan's limit (2 per hour) replaces the tenant's (100).
		for i := 0; i < 2; i++ {
			r := d.ask(t, "shop", 0, desc("tenant=t1"), desc("plan=trial"))
			require.Equal(t, ok, r.OverallCode)
			require.Nil(t, r.Statuses[0].CurrentLimit, "replaced")
		}
		r := d.ask(t, "shop", 0, desc("tenant=t1"), desc("plan=trial"))
		require.Equal(t, over, r.OverallCode)
		// Alone, the tenant's limit applies, and counted none of those.
		r = d.ask(t, "shop", 0, desc("tenant=t1"))
		require.Equal(t, uint32(99), r.Statuses[0].LimitRemaining)
	})

	t.Run("wildcard and nested", func(t *testing.T) {
		for i := 0; i < 2; i++ {
			require.Equal(t, ok, d.ask(t, "shop", 0, desc("api=v1beta", "method=GET")).OverallCode)
		}
		require.Equal(t, over, d.ask(t, "shop", 0, desc("api=v1beta", "method=GET")).OverallCode)
		require.Nil(t, d.ask(t, "shop", 0, desc("api=v2", "method=GET")).Statuses[0].CurrentLimit)
		require.Nil(t, d.ask(t, "shop", 0, desc("api=v1beta")).Statuses[0].CurrentLimit)
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, c := range []struct {
			req  *rlspb.RateLimitRequest
			code codes.Code
			msg  string
		}{
			{&rlspb.RateLimitRequest{Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("user=1")}}, codes.InvalidArgument, "domain must not be empty"},
			{&rlspb.RateLimitRequest{Domain: "shop"}, codes.InvalidArgument, "descriptor list must not be empty"},
			{&rlspb.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("user=1")}}, codes.NotFound, `unknown domain "nope"`},
			{&rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitpb.RateLimitDescriptor{{}}}, codes.InvalidArgument, "descriptor 0 has no entries"},
			{&rlspb.RateLimitRequest{Domain: "shop", Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("=1")}}, codes.InvalidArgument, "empty key"},
		} {
			_, err := d.rls.ShouldRateLimit(ctxT(t), c.req)
			require.Equal(t, c.code, status.Code(err), "%v", err)
			require.Contains(t, status.Convert(err).Message(), c.msg)
		}
	})

	t.Run("race", func(t *testing.T) {
		// 40 callers, 3 requests each, on a limit of 17: exactly 17 pass.
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 40; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 3; i++ {
					resp, err := d.rls.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "shop",
						Descriptors: []*ratelimitpb.RateLimitDescriptor{desc("race=r1"), desc("ip=race")}})
					if err != nil {
						t.Error(err)
						return
					}
					if resp.OverallCode == ok {
						admitted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		// The IP's limit (5) refuses most of them: whatever passed passed
		// both, and the race key counted exactly those.
		require.Equal(t, int64(5), admitted.Load())
		r := d.ask(t, "shop", 0, desc("race=r1"))
		require.Equal(t, uint32(17-5-1), r.Statuses[0].LimitRemaining)
	})

	t.Run("json", func(t *testing.T) {
		code, m := d.post(t, "/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"j1"}]}],"hits_addend":3}`)
		require.Equal(t, 200, code, m)
		require.Equal(t, "OK", m["overallCode"])
		code, m = d.post(t, "/json", `{"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"j1"}]}]}`)
		require.Equal(t, 429, code, m)
		require.Equal(t, "OVER_LIMIT", m["overallCode"])
		code, m = d.post(t, "/json", `{"domain":""}`)
		require.Equal(t, 400, code, m)
	})
}

// shadowRefused reads the count of shadow refusals from /metrics.
func shadowRefused(t *testing.T, d *wsd) float64 {
	t.Helper()
	code, body := d.get(t, "/metrics")
	require.Equal(t, 200, code)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, `windowstored_ratelimit_decisions_total{outcome="shadow_refused",rule="shop"}`) {
			var v float64
			fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
			return v
		}
	}
	return 0
}
