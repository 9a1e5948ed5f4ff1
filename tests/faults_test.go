package tests

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

var faultWindow = store.Window{Length: time.Minute, Bucket: time.Second}

// netErr tells whether err is a network error: the connection refused,
// reset or closed (EOF), or a net.Error.
func netErr(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &ne)
}

// namedClient is a client of srv whose connections carry name in CLIENT
// LIST, so that the server can count them. With ping false, it sends no
// background PING on idle connections (rueidis sends one every
// Dialer.KeepAlive, 1 s by default, and replaces a connection whose PING
// fails).
func namedClient(t *testing.T, srv *harness.Server, name string, ping bool) rueidis.Client {
	t.Helper()
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true, ClientName: name}
	if !ping {
		opt.Dialer.KeepAlive = -1
	}
	c, err := rueidis.NewClient(opt)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// connections counts the server's connections named name.
func connections(t *testing.T, srv *harness.Server, name string) int {
	t.Helper()
	return strings.Count(srv.Cmd(t, "CLIENT", "LIST"), " name="+name+" ")
}

// afterRestart sends 64 writes, one after another, to new keys, and returns
// the keys and which writes failed; every failure must be a network error.
func afterRestart(t *testing.T, s *store.Store, name string) (keys []string, failed map[string]bool) {
	t.Helper()
	ctx := ctxT(t)
	failed = map[string]bool{}
	for i := 0; i < 64; i++ {
		k := name + ":" + strconv.Itoa(i)
		keys = append(keys, k)
		if _, err := s.Add(ctx, k, 1); err != nil {
			require.True(t, netErr(err), "%s: write %d after the restart: not a network error: %v", name, i, err)
			require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
			failed[k] = true
		}
	}
	// Never retried: a failed write counted nothing, a successful one once.
	sums, err := s.SumMany(ctx, keys)
	require.NoError(t, err)
	for i, k := range keys {
		want := int64(1)
		if failed[k] {
			want = 0
		}
		require.Equal(t, want, sums[i], "%s (failed: %v)", k, failed[k])
	}
	return keys, failed
}

// TestFaultScriptCacheGone: after SCRIPT FLUSH and FUNCTION FLUSH, and after a
// real restart that loses data and scripts, every operation (single and
// batched) still works: a missing library is loaded again, and NOSCRIPT falls
// back to EVAL. Across the restart: a pooled connection that
// the restart broke fails the next write sent on it, once, with a network
// error, and that write is not retried (it counts nothing); unless rueidis's
// background PING of idle connections found the break first and replaced the
// connection, in which case no write fails.
func TestFaultScriptCacheGone(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	harness.Use(t, harness.AreaFaults)
	ctx := ctxT(t)
	// Two clients: rueidis's defaults, and one without the background PING,
	// whose broken connections can only be found by a write.
	c := namedClient(t, srv, "ws-fault", true)
	quiet := namedClient(t, srv, "ws-fault-noping", false)
	s, err := store.New(ctx, c, faultWindow)
	require.NoError(t, err)
	sq, err := store.New(ctx, quiet, faultWindow)
	require.NoError(t, err)
	// The store runs functions (FCALL) by default; one with EVALSHA too.
	evalsha, err := store.New(ctx, c, faultWindow, store.WithPrefix("evalsha:"), hook.WithFunctions(false).(store.Option))
	require.NoError(t, err)
	// flush empties the script cache and the functions.
	flush := func() {
		require.NoError(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error())
		require.NoError(t, c.Do(ctx, c.B().FunctionFlush().Build()).Error())
	}
	for _, st := range []*store.Store{s, evalsha} {
		_, err = st.Add(ctx, "k", 1)
		require.NoError(t, err)
		flush()
		n, err := st.Add(ctx, "k", 1)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		flush()
		sums, err := st.SumMany(ctx, []string{"k", "other"})
		require.NoError(t, err)
		require.Equal(t, []int64{2, 0}, sums)
		flush()
		_, err = st.Inspect(ctx, "k")
		require.NoError(t, err)
		flush()
		r, err := st.Allow(ctx, "k", 10, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
	}
	require.True(t, hook.Functions(s))
	require.False(t, hook.Functions(evalsha))

	// rueidis picks one of its pipelined connections at random for each
	// call: enough calls (one at a time) open them all.
	for i := 0; i < 64; i++ {
		_, err := s.Sum(ctx, "warm"+strconv.Itoa(i))
		require.NoError(t, err)
		_, err = sq.Sum(ctx, "warm"+strconv.Itoa(i))
		require.NoError(t, err)
	}
	conns, quietConns := connections(t, srv, "ws-fault"), connections(t, srv, "ws-fault-noping")
	require.Positive(t, conns)
	require.Positive(t, quietConns)

	srv.Restart(t)
	_, failed := afterRestart(t, sq, "noping")
	t.Logf("RESTART, no background PING: %d pooled connections before; %d of 64 writes after failed", quietConns, len(failed))
	require.Len(t, failed, quietConns, "each broken pooled connection must fail exactly one write")
	_, failed = afterRestart(t, s, "default")
	t.Logf("RESTART, rueidis defaults: %d pooled connections before; %d of 64 writes after failed (the PING of idle connections replaces broken ones)", conns, len(failed))
	require.LessOrEqual(t, len(failed), conns, "a broken pooled connection failed more than one write")

	_, err = s.Add(ctx, "k", 5)
	require.NoError(t, err)
	n, err := s.Sum(ctx, "k")
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "the restart lost the data (no persistence), and counting went on")
	r, err := s.Allow(ctx, "a", 1, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed)
}

// TestFaultServerDown: with the server down, calls fail within their deadline
// with the context's error or a network error, do not panic, and leak no
// goroutines.
func TestFaultServerDown(t *testing.T) {
	srv := harness.Fresh(t, harness.Redis70)
	harness.Use(t, harness.AreaFaults)
	c := srv.Client(t)
	s, err := store.New(ctxT(t), c, faultWindow)
	require.NoError(t, err)
	_, err = s.Add(ctxT(t), "k", 1)
	require.NoError(t, err)
	srv.Kill(t)
	before := runtime.NumGoroutine()
	kinds := map[string]int{}
	first := map[string]string{}
	for i := 0; i < 50; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		_, err := s.Add(ctx, "k", 1)
		took := time.Since(start)
		cancel()
		require.Error(t, err)
		require.Less(t, took, time.Second, "call %d took %v with a 200ms deadline", i, took)
		require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
		kind := ""
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			kind = "deadline"
		case netErr(err):
			kind = "network"
		default:
			t.Fatalf("call %d: neither the context's error nor a network error: %v", i, err)
		}
		if kinds[kind]++; kinds[kind] == 1 {
			first[kind] = err.Error()
		}
	}
	t.Logf("with the server down, 50 adds failed with: %v; first of each: %q", kinds, first)
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+5 }, 3*time.Second, 50*time.Millisecond,
		"goroutines grew while the server was down: %d before", before)
	// Sums are read-only scripts, which rueidis retries on connection errors
	// until the context ends: with a deadline they fail at it.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.SumMany(ctx, []string{"a", "b"})
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded) || netErr(err), "%v", err)
	require.Less(t, time.Since(start), time.Second)
}

// TestFaultServerStalls: a server that stops answering (DEBUG SLEEP) makes
// calls fail at their deadline with context.DeadlineExceeded (or a dial's net
// timeout, at the same deadline), not hang;
// afterwards everything works, and no goroutine is left behind: a second
// stall ends with as many goroutines as the first.
func TestFaultServerStalls(t *testing.T) {
	srv := harness.Fresh(t, harness.Redis70, "--enable-debug-command", "yes")
	harness.Use(t, harness.AreaFaults)
	c := srv.Client(t)
	s, err := store.New(ctxT(t), c, faultWindow)
	require.NoError(t, err)
	other, probe := srv.Client(t), srv.Client(t)
	stall := func(round int) {
		slept := make(chan error, 1)
		go func() {
			slept <- other.Do(context.Background(), other.B().Arbitrary("DEBUG", "SLEEP").Args("3").Build()).Error()
		}()
		// Wait until the server really is blocked: a PING with a short
		// deadline times out.
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			return errors.Is(probe.Do(ctx, probe.B().Ping().Build()).Error(), context.DeadlineExceeded)
		}, 5*time.Second, 10*time.Millisecond, "the server never stalled")
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				start := time.Now()
				_, err := s.Add(ctx, "k"+strconv.Itoa(i), 1)
				took := time.Since(start)
				// A call that needed a new connection fails in its dial, at
				// the same deadline, with a net timeout ("dial tcp: i/o
				// timeout"; seen under CI's load).
				var ne net.Error
				if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &ne) && ne.Timeout()) {
					t.Errorf("round %d call %d: want context.DeadlineExceeded or a net timeout, got %v", round, i, err)
				}
				// The server sleeps 3 s: a call that waited for it took
				// more than 2.5 s; one that honoured its 300 ms deadline
				// returns well before, a loaded machine's delays included.
				if took > 2*time.Second {
					t.Errorf("round %d call %d: the deadline was not honoured: %v", round, i, took)
				}
			}()
		}
		wg.Wait()
		require.NoError(t, <-slept)
		require.Eventually(t, func() bool {
			_, err := s.Add(ctxT(t), "after", 1)
			return err == nil
		}, 5*time.Second, 20*time.Millisecond)
	}
	settled := func() int {
		time.Sleep(200 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	stall(1)
	first := settled()
	stall(2)
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= first+2 }, 3*time.Second, 50*time.Millisecond,
		"goroutines left behind by a stall: %d after the first, %d after the second", first, runtime.NumGoroutine())
}

// TestFaultOutOfMemory: under maxmemory with noeviction a write is refused with
// ErrOutOfMemory and the counter is unchanged; reads still work.
func TestFaultOutOfMemory(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		if tg.backend != "auto" || tg.kind == harness.TairHash {
			continue
		}
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			srv := harness.Fresh(t, tg.kind, "--maxmemory-policy", "noeviction")
			harness.Use(t, harness.AreaFaults)
			c := srv.Client(t)
			ctx := ctxT(t)
			s, err := store.New(ctx, c, faultWindow)
			require.NoError(t, err)
			_, err = s.Add(ctx, "k", 7)
			require.NoError(t, err)
			// Fill, then set maxmemory below what is used: every write is refused.
			blob := strings.Repeat("x", 1024)
			cmds := make(rueidis.Commands, 0, 2000)
			for i := 0; i < 2000; i++ {
				cmds = append(cmds, c.B().Set().Key("fill:"+strconv.Itoa(i)).Value(blob).Build())
			}
			for _, r := range c.DoMulti(ctx, cmds...) {
				require.NoError(t, r.Error())
			}
			used := usedMemory(t, c)
			require.NoError(t, c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", strconv.FormatInt(used-(256<<10), 10)).Build()).Error())
			err = c.Do(ctx, c.B().Set().Key("one-more").Value("x").Build()).Error()
			require.ErrorContains(t, err, "OOM")
			_, err = s.Add(ctx, "k", 1)
			require.ErrorIs(t, err, store.ErrOutOfMemory)
			_, err = s.Add(ctx, "new", 1)
			require.ErrorIs(t, err, store.ErrOutOfMemory)
			n, err := s.Sum(ctx, "k")
			require.NoError(t, err, "reads must still work")
			require.EqualValues(t, 7, n, "a refused write changed the counter")
			r, err := s.Allow(ctx, "k", 100, 1)
			require.ErrorIs(t, err, store.ErrOutOfMemory)
			require.False(t, r.Allowed)
			ex, err := c.Do(ctx, c.B().Exists().Key(counterKeys(t, s, "new")...).Build()).AsInt64()
			require.NoError(t, err)
			require.Zero(t, ex)
		})
	}
}
