package tests

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

var faultWindow = store.Window{Length: time.Minute, Bucket: time.Second}

// TestFaultScriptCacheGone: after SCRIPT FLUSH, and after a real restart that
// loses data and scripts, every operation (single and batched) still works:
// NOSCRIPT falls back to EVAL.
func TestFaultScriptCacheGone(t *testing.T) {
	srv := harness.Process(t)
	c := srv.Client(t)
	ctx := ctxT(t)
	s, err := store.New(ctx, c, faultWindow)
	require.NoError(t, err)
	_, err = s.Add(ctx, "k", 1)
	require.NoError(t, err)
	require.NoError(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error())
	n, err := s.Add(ctx, "k", 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.NoError(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error())
	sums, err := s.SumMany(ctx, []string{"k", "other"})
	require.NoError(t, err)
	require.Equal(t, []int64{2, 0}, sums)
	require.NoError(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error())
	_, err = s.Inspect(ctx, "k")
	require.NoError(t, err)

	srv.Restart(t)
	// Each pooled connection that the restart broke fails its next call once
	// (EOF): writes are not retried, since a retry could count twice. Read
	// until the pool is healthy again, then count.
	healthy := 0
	require.Eventually(t, func() bool {
		if _, err := s.Sum(ctx, "probe"); err != nil {
			healthy = 0
			return false
		}
		healthy++
		return healthy >= 10
	}, 10*time.Second, 20*time.Millisecond, "no recovery after the restart")
	_, err = s.Add(ctx, "k", 5)
	require.NoError(t, err)
	n, err = s.Sum(ctx, "k")
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "the restart lost the data (no persistence), and counting went on")
	r, err := s.Allow(ctx, "a", 1, 1)
	require.NoError(t, err)
	require.True(t, r.Allowed)
}

// TestFaultServerDown: with the server down, calls fail within their deadline
// with a clear error, do not panic, and leak no goroutines.
func TestFaultServerDown(t *testing.T) {
	srv := harness.Process(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, ForceSingleClient: true})
	require.NoError(t, err)
	defer c.Close()
	s, err := store.New(ctxT(t), c, faultWindow)
	require.NoError(t, err)
	srv.Kill()
	time.Sleep(100 * time.Millisecond)
	before := runtime.NumGoroutine()
	for i := 0; i < 50; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		start := time.Now()
		_, err := s.Add(ctx, "k", 1)
		took := time.Since(start)
		cancel()
		require.Error(t, err)
		require.NotErrorIs(t, err, store.ErrWrongType)
		require.Less(t, took, time.Second, "call %d took %v with a 200ms deadline", i, took)
		require.True(t, strings.HasPrefix(err.Error(), "store: "), err.Error())
	}
	time.Sleep(300 * time.Millisecond)
	require.LessOrEqual(t, runtime.NumGoroutine(), before+5, "goroutines grew while the server was down")
	// Sums are read-only scripts, which rueidis retries on connection errors
	// until the context ends: with a deadline they fail at it.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.SumMany(ctx, []string{"a", "b"})
	require.Error(t, err)
	require.Less(t, time.Since(start), time.Second)
}

// TestFaultServerStalls: a server that stops answering (DEBUG SLEEP) makes
// calls fail at their deadline, not hang; afterwards everything works.
func TestFaultServerStalls(t *testing.T) {
	srv := harness.Process(t, "--enable-debug-command", "yes")
	c := srv.Client(t)
	s, err := store.New(ctxT(t), c, faultWindow)
	require.NoError(t, err)
	other := srv.Client(t)
	go func() {
		_ = other.Do(context.Background(), other.B().Arbitrary("DEBUG", "SLEEP").Args("1.5").Build()).Error()
	}()
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Add(ctx, "k", 1)
	took := time.Since(start)
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded), err.Error())
	require.Less(t, took, time.Second, "the deadline was not honoured: %v", took)
	require.Eventually(t, func() bool {
		_, err := s.Add(context.Background(), "k2", 1)
		return err == nil
	}, 5*time.Second, 50*time.Millisecond)
}

// TestFaultOutOfMemory: under maxmemory with noeviction a write is refused with
// ErrOutOfMemory and the counter is unchanged; reads still work.
func TestFaultOutOfMemory(t *testing.T) {
	for _, tg := range targets {
		if tg.backend != store.Auto || tg.kind == harness.TairHash {
			continue
		}
		t.Run(tg.name, func(t *testing.T) {
			srv := harness.Fresh(t, tg.kind, "--maxmemory-policy", "noeviction")
			c := srv.Client(t)
			ctx := ctxT(t)
			s, err := store.New(ctx, c, faultWindow)
			require.NoError(t, err)
			_, err = s.Add(ctx, "k", 7)
			require.NoError(t, err)
			// Fill, then set maxmemory below what is used: every write is refused.
			blob := strings.Repeat("x", 1024)
			for i := 0; i < 2000; i++ {
				require.NoError(t, c.Do(ctx, c.B().Set().Key("fill:"+strconv.Itoa(i)).Value(blob).Build()).Error())
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
			ex, err := c.Do(ctx, c.B().Exists().Key("ws:new").Build()).AsInt64()
			require.NoError(t, err)
			require.Zero(t, ex)
		})
	}
}
