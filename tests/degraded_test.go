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
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/metrics/prom"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// counted passes every call to a real limiter, counting the calls that go
// to the server.
type counted struct {
	limit.Limiter
	calls atomic.Int64
}

func (c *counted) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	c.calls.Add(1)
	return c.Limiter.Allow(ctx, key, n)
}

type degradedCall struct {
	start, at         time.Time // the call's span: its decision is within it
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
		limit.WithOnStateChange(func(from, to string) {
			if to == "half-open" {
				probes.Add(1)
			}
			mu.Lock()
			changes = append(changes, from+">"+to)
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
		start := time.Now()
		dec, err := d.Allow(ctx, "k", 1)
		return degradedCall{start: start, at: time.Now(), allowed: dec.Allowed, degraded: dec.Degraded, err: err}
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
	serverBefore, probesBefore, measured := inner.calls.Load(), probes.Load(), time.Now()
	st := d.State()
	require.NotEqual(t, "closed", st)
	require.ErrorIs(t, d.Health(), limit.ErrServerDown)
	// The breaker moves between half-open and open as probes go out and
	// fail, also between reading its state and gathering the gauge: the
	// gauge must say it is not closed (half-open or open, at one gathering).
	notClosed := false
	for i := 0; i < 10 && !notClosed; i++ {
		notClosed = gauge(1) == nil || gauge(2) == nil
	}
	require.True(t, notClosed, "the gauge does not say half-open or open (the breaker was %s)", st)
	time.Sleep(2500 * time.Millisecond)
	serverDuring, probesDuring, span := inner.calls.Load()-serverBefore, probes.Load()-probesBefore, time.Since(measured)
	stop.Store(true)
	wg.Wait()
	t.Logf("server down: %d calls; %d reached the server in all, %d in the last 2.5 s, with %d probes; health: %v",
		len(calls), inner.calls.Load()-5, serverDuring, probesDuring, d.Health())
	require.Greater(t, len(calls), 1000)
	var admitted []degradedCall
	for _, r := range calls {
		require.NoError(t, r.err, "a call while the server was down")
		require.True(t, r.degraded, "a decision of the server while it was down")
		if r.allowed {
			admitted = append(admitted, r)
		}
	}
	// At most the share in any window (100 ms less for the local log's
	// granularity), and the window slides: more than one share in all. A
	// decision is somewhere in its call's span, so a call counts in
	// another's window only when its whole span surely is (after the
	// other's end, and ending less than the window after its start): a
	// loaded machine's long spans make the check weaker, never wrong.
	for i, x := range admitted {
		n := 0
		for j, a := range admitted {
			if j == i || !a.start.Before(x.at) && a.at.Sub(x.start) < window-100*time.Millisecond {
				n++
			}
		}
		require.LessOrEqual(t, n, share, "admitted in the %v from %v", window, x.start)
	}
	require.Greater(t, len(admitted), share)
	require.LessOrEqual(t, len(admitted), 2*share)
	// One probe per cool-down, and nothing else, reached the dead server.
	require.LessOrEqual(t, serverDuring, probesDuring+1)
	require.GreaterOrEqual(t, probesDuring, int64(3))
	require.LessOrEqual(t, probesDuring, int64(span/cooldown)+1, "probes in %v", span)

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
	require.Equal(t, "closed", d.State())
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
	if errors.Is(d.Health(), limit.ErrServerDown) {
		t.Fatal("unhealthy after recovery")
	}
}

// fleetLimiters build, on one client, the limiters of the fleet tests: 10
// per hour (a GCRA: rate 10 per hour, burst 10), a window longer than any
// run of the tests, so that every admission of a test falls in one window.
var fleetLimiters = []struct {
	name string
	make func(t *testing.T, c rueidis.Client) limit.Limiter
}{
	{"sliding-window", func(t *testing.T, c rueidis.Client) limit.Limiter {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := store.New(ctx, c, store.Window{Length: fleetWindow, Bucket: time.Minute})
		require.NoError(t, err)
		l, err := limit.NewSlidingWindow(st, "sw", fleetLimit, limit.WithRefusalCache(nil))
		require.NoError(t, err)
		return l
	}},
	{"log", func(t *testing.T, c rueidis.Client) limit.Limiter {
		l, err := limit.NewLog(c, "log", fleetLimit, fleetWindow, limit.WithRefusalCache(nil))
		require.NoError(t, err)
		return l
	}},
	{"gcra", func(t *testing.T, c rueidis.Client) limit.Limiter {
		l, err := limit.NewGCRA(c, "gcra", fleetLimit, fleetWindow, fleetLimit, limit.WithRefusalCache(nil))
		require.NoError(t, err)
		return l
	}},
}

// The fleet tests' limit L, shared by N instances: the share is L / N
// rounded down, 3; N x share = 9 < L.
const (
	fleetLimit     = 10
	fleetInstances = 3
	fleetShare     = fleetLimit / fleetInstances
	fleetWindow    = time.Hour
)

// fleet is N application instances of one limit, as separate application
// servers run them: each with its own client of the one server and its own
// limiter, wrapped by its own Degraded (WithInstances(N)). Every call is on
// key "k", one at a time, and every admission is counted: per instance, those
// decided in process; per life of the server (from a start to the next
// kill), those the server decided.
type fleet struct {
	ds          []*limit.Degraded
	local       []int     // per instance: admitted in process
	server      []int     // per server life: admitted by the server
	first, last time.Time // the first admission and the last
}

func newFleet(t *testing.T, srv *harness.Server, mk func(*testing.T, rueidis.Client) limit.Limiter) *fleet {
	f := &fleet{local: make([]int, fleetInstances), server: []int{0}}
	for i := 0; i < fleetInstances; i++ {
		d, err := limit.Degrade(mk(t, srv.Client(t)), limit.WithInstances(fleetInstances),
			limit.WithFailures(1), limit.WithCooldown(100*time.Millisecond))
		require.NoError(t, err)
		f.ds = append(f.ds, d)
	}
	return f
}

// call has instance i ask for one unit, and counts an admission.
func (f *fleet) call(t *testing.T, i int) store.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	dec, err := f.ds[i].Allow(ctx, "k", 1)
	require.NoError(t, err, "instance %d", i)
	if dec.Allowed {
		if f.first.IsZero() {
			f.first = time.Now()
		}
		f.last = time.Now()
		if dec.Degraded {
			f.local[i]++
		} else {
			f.server[len(f.server)-1]++
		}
	}
	return dec
}

// fill has the instances call in turn until the server refuses one. A call
// decided in process here is one that failed on a connection left over from
// the killed server (EOF) after the breaker closed, which opened it again:
// it is counted like any other, and the instance calls again until the
// server decides.
func (f *fleet) fill(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for n := 0; ; n++ {
		require.Less(t, n, 10*fleetLimit, "the server never refused")
		i := n % len(f.ds)
		dec := f.call(t, i)
		if dec.Degraded {
			t.Logf("instance %d, the server up, decided in process: %v", i, f.ds[i].Health())
		}
		for dec.Degraded {
			require.True(t, time.Now().Before(deadline), "instance %d: the breaker never closed: %v", i, f.ds[i].Health())
			time.Sleep(20 * time.Millisecond)
			dec = f.call(t, i)
		}
		if !dec.Allowed {
			return
		}
	}
}

// degrade has each instance, in turn, call until it refuses in process, with
// the server unreachable: every decision is made in process, and each
// instance's breaker is open by the end.
func (f *fleet) degrade(t *testing.T) {
	t.Helper()
	for i, d := range f.ds {
		for n := 0; ; n++ {
			require.Less(t, n, 10*fleetLimit, "instance %d never refused", i)
			dec := f.call(t, i)
			require.True(t, dec.Degraded, "instance %d: a decision of the server while it was unreachable: %+v", i, dec)
			if !dec.Allowed {
				break
			}
		}
		require.NotEqual(t, "closed", d.State(), "instance %d", i)
	}
}

// recover has each instance call, with the server reachable again, until its
// breaker closes: a probe answered by the server (its admission, if any, is
// counted). The calls before it are decided in process.
func (f *fleet) recover(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for i, d := range f.ds {
		for f.call(t, i).Degraded {
			require.True(t, time.Now().Before(deadline), "instance %d: the breaker never closed: %v", i, d.Health())
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, "closed", d.State(), "instance %d", i)
	}
}

// check asserts the bound on one window: the fleet admitted at most what
// the server admitted in it, at most L per life of the server, plus N x
// share in process (share = L / N rounded down, at most the share per
// instance however often it degraded), and exactly that: the bound is
// reached. It returns the total.
func (f *fleet) check(t *testing.T) int {
	t.Helper()
	require.Less(t, f.last.Sub(f.first), fleetWindow, "the admissions span more than one window")
	total := 0
	for life, n := range f.server {
		require.LessOrEqual(t, n, fleetLimit, "the server admitted more than the limit in its life %d", life)
		total += n
	}
	for i, n := range f.local {
		require.LessOrEqual(t, n, fleetShare, "instance %d admitted more than its share in process in one window", i)
		total += n
	}
	bound := len(f.server)*fleetLimit + fleetInstances*fleetShare
	require.LessOrEqual(t, total, bound, "server lives %d, per life %v, in process %v", len(f.server), f.server, f.local)
	require.Equal(t, bound, total, "the bound is not reached: per server life %v, in process %v", f.server, f.local)
	t.Logf("one window: %d admitted (the limit is %d): by the server, per life, %v; in process, per instance, %v",
		total, fleetLimit, f.server, f.local)
	return total
}

// TestDegradedFleetRestart: N = 3 instances (their own limiters and
// clients) share a limit of L = 10 per hour on one real server, for a
// sliding window, a Log and a GCRA, all within one window. The server admits
// L; it is killed (SIGKILL: its data is lost), every breaker opens and each
// instance admits its share, 10 / 3 rounded down = 3, in process; the server
// is started again, every breaker closes, and the server, empty, admits L
// again; killed and started again in the same window, the instances admit
// nothing more in process (their share of the window is spent: the
// in-process log outlives a recovery), and the server admits L a third time.
//
// So "N instances admit at most the limit together" does not hold across a
// transition: in one window the fleet admits what the server admits plus N
// x share in process, and a server that restarts without its data counts
// afresh, L per life. The test asserts the bound lives x L + N x share and
// that it is reached (3 x 10 + 9 = 39); each instance's in-process
// admissions in the window are at most its share, and the server's per life
// at most L. Rounding the share up, or starting the in-process log afresh on
// a recovery, breaks it.
func TestDegradedFleetRestart(t *testing.T) {
	for _, fl := range fleetLimiters {
		t.Run(fl.name, func(t *testing.T) {
			srv := harness.Fresh(t, harness.Redis70)
			harness.Use(t, harness.AreaFaults)
			f := newFleet(t, srv, fl.make)
			f.fill(t)
			if fl.name == "log" {
				// The server recorded what the instances saw it admit.
				require.Equal(t, strconv.Itoa(fleetLimit), srv.Cmd(t, "ZCARD", "rl:{k}:log"))
			}
			for outage := 0; outage < 2; outage++ {
				srv.Kill(t)
				f.degrade(t)
				srv.Start(t)
				f.server = append(f.server, 0)
				f.recover(t)
				f.fill(t)
			}
			require.Equal(t, []int{fleetLimit, fleetLimit, fleetLimit}, f.server)
			require.Greater(t, f.check(t), fleetLimit)
		})
	}
}

// TestDegradedFleetPause: as TestDegradedFleetRestart, but the server keeps
// its data: CLIENT PAUSE WRITE stalls every limiter call until it times out
// (a transient failure: the breakers open), and CLIENT UNPAUSE lets them
// close. The server admits L; paused, each instance admits its share in
// process; unpaused, the server, which kept its count, refuses; paused again
// in the same window, the instances admit nothing more in process. The
// fleet admits L + N x share in the window, 10 + 9 = 19: the bound with a
// server that keeps its counts, reached, and at most 2L.
func TestDegradedFleetPause(t *testing.T) {
	for _, fl := range fleetLimiters {
		t.Run(fl.name, func(t *testing.T) {
			srv := harness.Fresh(t, harness.Redis70)
			harness.Use(t, harness.AreaFaults)
			f := newFleet(t, srv, fl.make)
			f.fill(t)
			for outage := 0; outage < 2; outage++ {
				srv.Cmd(t, "CLIENT", "PAUSE", "600000", "WRITE")
				f.degrade(t)
				srv.Cmd(t, "CLIENT", "UNPAUSE")
				f.recover(t)
				f.fill(t)
			}
			require.Equal(t, []int{fleetLimit}, f.server)
			require.Equal(t, fleetLimit+fleetInstances*fleetShare, f.check(t))
		})
	}
}

// TestDegradedRefusalCache: a refusal the inner limiter answers from its
// refusal cache is no verdict on the server, so with the server dead the
// breaker still opens after 3 failures however many cached refusals come
// between them.
func TestDegradedRefusalCache(t *testing.T) {
	srv := harness.Fresh(t, harness.Redis70)
	harness.Use(t, harness.AreaFaults)
	g, err := limit.NewGCRA(srv.Client(t), "g", 1, time.Hour, 1)
	require.NoError(t, err)
	d, err := limit.Degrade(g, limit.WithFailures(3), limit.WithCooldown(time.Hour))
	require.NoError(t, err)
	ctx := ctxT(t)
	first, err := d.Allow(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, first.Allowed)
	refused, err := d.Allow(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, refused.Allowed)
	srv.Kill(t)
	for i := range 3 {
		dec, err := d.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.False(t, dec.Allowed)
		require.False(t, dec.Degraded, "a remembered refusal answers while the server is down")
		require.Equal(t, "closed", d.State())
		call, cancel := context.WithTimeout(ctx, 2*time.Second)
		dec, err = d.Allow(call, "other"+strconv.Itoa(i), 1)
		cancel()
		require.NoError(t, err)
		require.True(t, dec.Degraded, "a dead server: decided in process")
	}
	require.Equal(t, "open", d.State(), "3 failures open the breaker; the cached refusals between them are no verdict")
}
