package tests

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/metrics/prom"
	"github.com/windowstore/windowstore/tests/harness"
)

// counted passes every call to a real limiter, counting the calls that go
// to the server.
type counted struct {
	limit.Limiter
	calls atomic.Int64
}

func (c *counted) Allow(ctx context.Context, key string, n int64) (limit.Decision, error) {
	c.calls.Add(1)
	return c.Limiter.Allow(ctx, key, n)
}

type degradedCall struct {
	at                time.Time
	allowed, degraded bool
	err               error
}

// TestDegradedServerDown: a Log of 40 per 2 s, shared by 4 instances,
// degraded: with the server killed, 40 goroutines calling at once are all
// answered in process, without an error, and admitted at most 40 / 4 = 10
// per window; the breaker keeps calls off the dead server but for its
// probes, one per cool-down; after the server is started again, a probe
// closes the breaker, and the calls from then on go to the server (their
// events appear in the server's log, Degraded false). The breaker's state
// is seen through Health, State and the Prometheus gauge.
func TestDegradedServerDown(t *testing.T) {
	srv := harness.Fresh(t, harness.Redis70)
	harness.Use(t, harness.AreaFaults)
	c := srv.Client(t)
	const window, share, cooldown = 2 * time.Second, 10, 500 * time.Millisecond
	lg, err := limit.NewLog(c, "perwin", 40, window)
	require.NoError(t, err)
	inner := &counted{Limiter: lg}
	var mu sync.Mutex
	var changes []string
	var probes atomic.Int64
	d, err := limit.Degrade(inner, limit.WithInstances(4), limit.WithFailures(3), limit.WithCooldown(cooldown),
		limit.WithOnStateChange(func(from, to limit.BreakerState) {
			if to == limit.BreakerHalfOpen {
				probes.Add(1)
			}
			mu.Lock()
			changes = append(changes, from.String()+">"+to.String())
			mu.Unlock()
		}))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	rec, err := prom.New(reg, "t")
	require.NoError(t, err)
	rec.WatchBreaker("perwin", d)
	gauge := func(v int) error {
		want := "# HELP t_ratelimit_breaker_state State of a degraded limiter's circuit breaker: 0 closed, 1 half-open, 2 open.\n" +
			"# TYPE t_ratelimit_breaker_state gauge\nt_ratelimit_breaker_state{limiter=\"perwin\"} " + strconv.Itoa(v) + "\n"
		return testutil.GatherAndCompare(reg, strings.NewReader(want), "t_ratelimit_breaker_state")
	}
	call := func() degradedCall {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		dec, err := d.Allow(ctx, "k", 1)
		return degradedCall{at: time.Now(), allowed: dec.Allowed, degraded: dec.Degraded, err: err}
	}

	// Healthy: the server decides.
	for i := 0; i < 5; i++ {
		r := call()
		require.NoError(t, r.err)
		require.True(t, r.allowed && !r.degraded, "%+v", r)
	}
	require.Equal(t, "5", srv.Cmd(t, "ZCARD", "rl:{k}:perwin"))
	require.NoError(t, gauge(0))

	// Down: 40 goroutines for 3.5 s, a call every ms or so each.
	srv.Kill(t)
	var calls []degradedCall
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := 0; g < 40; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				r := call()
				mu.Lock()
				calls = append(calls, r)
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Second)
	// By now the calls that went out before the breaker opened (connection
	// refused comes at once) are back: from here on only probes reach the
	// server.
	serverBefore, probesBefore := inner.calls.Load(), probes.Load()
	st := d.State()
	require.NotEqual(t, limit.BreakerClosed, st)
	require.ErrorIs(t, d.Health(), limit.ErrUnavailable)
	require.NoError(t, gauge(int(st)))
	time.Sleep(2500 * time.Millisecond)
	serverDuring, probesDuring := inner.calls.Load()-serverBefore, probes.Load()-probesBefore
	stop.Store(true)
	wg.Wait()
	t.Logf("server down: %d calls; %d reached the server in all, %d in the last 2.5 s, with %d probes; health: %v",
		len(calls), inner.calls.Load()-5, serverDuring, probesDuring, d.Health())
	require.Greater(t, len(calls), 1000)
	var admitted []time.Time
	for _, r := range calls {
		require.NoError(t, r.err, "a call while the server was down")
		require.True(t, r.degraded, "a decision of the server while it was down")
		if r.allowed {
			admitted = append(admitted, r.at)
		}
	}
	// At most the share in any window (100 ms less for the time between a
	// decision and its record), and the window slides: more than one share in all.
	for i := range admitted {
		n := 0
		for _, a := range admitted {
			if !a.Before(admitted[i]) && a.Sub(admitted[i]) < window-100*time.Millisecond {
				n++
			}
		}
		require.LessOrEqual(t, n, share, "admitted in the %v from %v", window, admitted[i])
	}
	require.Greater(t, len(admitted), share)
	require.LessOrEqual(t, len(admitted), 2*share)
	// One probe per cool-down, and nothing else, reached the dead server.
	require.LessOrEqual(t, serverDuring, probesDuring+1)
	require.GreaterOrEqual(t, probesDuring, int64(3))
	require.LessOrEqual(t, probesDuring, int64(2500*time.Millisecond/cooldown)+1)

	// Back: the first call to reach the server is a probe, which closes the
	// breaker; every call after it goes to the server.
	srv.Start(t)
	closedProbes := probes.Load()
	deadline := time.Now().Add(10 * time.Second)
	var r degradedCall
	for r = call(); r.degraded; r = call() {
		require.True(t, time.Now().Before(deadline), "the breaker never closed: %v", d.Health())
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, r.err)
	require.True(t, r.allowed)
	require.Greater(t, probes.Load(), closedProbes, "no probe before the breaker closed")
	require.Equal(t, limit.BreakerClosed, d.State())
	require.NoError(t, d.Health())
	require.NoError(t, gauge(0))
	mu.Lock()
	require.Equal(t, "half-open>closed", changes[len(changes)-1])
	mu.Unlock()
	serverAfter := inner.calls.Load()
	for i := 0; i < 20; i++ {
		r := call()
		require.NoError(t, r.err)
		require.True(t, r.allowed && !r.degraded, "call %d after recovery: %+v", i, r)
	}
	require.EqualValues(t, 20, inner.calls.Load()-serverAfter, "calls after recovery that did not reach the server")
	// The restarted server lost its data: its log holds the probe's event
	// and the 20 after it.
	require.Equal(t, "21", srv.Cmd(t, "ZCARD", "rl:{k}:perwin"))
	if errors.Is(d.Health(), limit.ErrUnavailable) {
		t.Fatal("unhealthy after recovery")
	}
}
