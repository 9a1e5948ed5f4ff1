package tests

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// callErrors counts the script calls that failed, as the store's observer
// sees them.
type callErrors struct{ n atomic.Int64 }

func (c *callErrors) Start(ctx context.Context, _ string) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (c *callErrors) Call(_ string, _ int, _ time.Duration, err error) {
	if err != nil {
		c.n.Add(1)
	}
}

// TestFaultRetryWithIDs: connections killed while batches of writes with
// event ids are in flight (CLIENT KILL, over and over): every write is sent
// again and succeeds, and every event counts exactly once, although some
// first sends did reach the server. 40 writers, 50 events each, WithRetries(20).
func TestFaultRetryWithIDs(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	harness.Use(t, harness.AreaFaults)
	c := srv.Client(t)
	ctx := ctxT(t)
	obs := &callErrors{}
	s, err := store.New(ctx, c, store.Window{Length: time.Hour, Bucket: time.Minute}, store.WithRetries(20), store.WithObserver(obs))
	require.NoError(t, err)
	admin := srv.Client(t)
	stop := make(chan struct{})
	var kills atomic.Int64
	// 40 rounds of kills, 15 ms apart, from the start: under a loaded
	// machine a round trip can outlast 15 ms, and kills without end would
	// then fail every resend.
	go func() {
		for round := 0; round < 40; round++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			n, err := admin.Do(context.Background(), admin.B().ClientKill().TypeNormal().SkipmeYes().Build()).AsInt64()
			if err == nil {
				kills.Add(n)
			}
		}
	}()
	const writers, each = 40, 50
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, err := s.Record(ctx, store.Event{Key: "k", Delta: 1, ID: fmt.Sprintf("w%d-%d", g, i)})
				if err != nil {
					t.Errorf("writer %d event %d: %v", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	n, err := s.Sum(ctx, "k")
	require.NoError(t, err)
	t.Logf("%d connections killed, %d script calls failed and were sent again", kills.Load(), obs.n.Load())
	require.Positive(t, kills.Load())
	require.Positive(t, obs.n.Load(), "no write was interrupted: the test proved nothing")
	require.EqualValues(t, writers*each, n, "an event counted twice, or not at all")
}

// TestReplicationEventIDs: an event id travels in the same script as its
// count, so after a failover a retried event counts once: a duplicate if its
// first write reached the replica, counted anew if it was lost with it.
func TestReplicationEventIDs(t *testing.T) {
	t.Parallel()
	for _, kind := range []harness.Kind{harness.Redis70, harness.Valkey} {
		t.Run(string(kind), func(t *testing.T) {
			master := harness.Fresh(t, kind)
			replica := harness.Replica(t, master)
			harness.Use(t, harness.AreaReplication)
			ctx := ctxT(t)
			w := store.Window{Length: time.Hour, Bucket: time.Minute}
			ms, err := store.New(ctx, master.Client(t), w)
			require.NoError(t, err)
			ev := func(i int) store.Event { return store.Event{Key: "k", Delta: 1, ID: "e" + strconv.Itoa(i)} }
			// A: replicated (WAIT). B: acknowledged by the master after the
			// replica was promoted: lost with the master.
			for i := 0; i < 50; i++ {
				_, err := ms.Record(ctx, ev(i))
				require.NoError(t, err)
			}
			require.EqualValues(t, 1, master.WaitReplicas(t, harness.Prefix(t)+"wait", 5*time.Second), "the replica acknowledged the first 50 events")
			rc := replica.Client(t)
			require.NoError(t, rc.Do(ctx, rc.B().Replicaof().No().One().Build()).Error())
			for i := 50; i < 80; i++ {
				_, err := ms.Record(ctx, ev(i))
				require.NoError(t, err)
			}
			master.Stop()
			// The client retries every event against the promoted replica.
			rs, err := store.New(ctx, rc, w)
			require.NoError(t, err)
			dups := 0
			for i := 0; i < 80; i++ {
				a, err := rs.Record(ctx, ev(i))
				require.NoError(t, err)
				if a.Duplicate {
					dups++
				}
			}
			require.Equal(t, 50, dups, "the replicated events are duplicates, the lost ones count anew")
			sum, err := rs.Sum(ctx, "k")
			require.NoError(t, err)
			require.EqualValues(t, 80, sum, "every event counts once")
		})
	}
}

// TestShapesNeverMeet: two stores of different windows under one prefix keep
// different counters for one key (the shape is part of the Redis key), on
// every backend: neither corrupts the other.
func TestShapesNeverMeet(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		a, srv := newStore(t, tg, store.Window{Length: 10 * time.Second, Bucket: time.Second})
		b, err := store.New(ctxT(t), srv.Client(t), store.Window{Length: time.Minute, Bucket: 5 * time.Second},
			store.WithPrefix(prefixOf(t, a)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		ctx := ctxT(t)
		now := time.Now()
		for i := 0; i < 20; i++ {
			_, err := a.At(now.Add(time.Duration(i)*300*time.Millisecond)).Add(ctx, "k", 2)
			require.NoError(t, err)
			_, err = b.At(now.Add(time.Duration(i)*300*time.Millisecond)).Add(ctx, "k", 3)
			require.NoError(t, err)
		}
		at := now.Add(6 * time.Second)
		na, err := a.At(at).Sum(ctx, "k")
		require.NoError(t, err)
		nb, err := b.At(at).Sum(ctx, "k")
		require.NoError(t, err)
		require.EqualValues(t, 40, na)
		require.EqualValues(t, 60, nb)
		ka, _ := hook.RedisKey(a, "k")
		kb, _ := hook.RedisKey(b, "k")
		require.NotEqual(t, ka, kb)
	})
}

// TestNegativeSums pins Allow's semantics on a negative sum (credits): a cost
// fits when cost <= limit and sum + cost <= limit; no cost above the limit
// ever fits; Remaining stays within [0, limit].
func TestNegativeSums(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		now := time.Now()
		_, err := s.At(now).Add(ctx, "credit", -5)
		require.NoError(t, err)
		r, err := s.At(now).Allow(ctx, "credit", 3, 0)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.EqualValues(t, -5, r.Sum)
		require.EqualValues(t, 3, r.Remaining, "remaining never exceeds the limit")
		r, err = s.At(now).Allow(ctx, "credit", 3, 4)
		require.NoError(t, err)
		require.False(t, r.Allowed, "a cost above the limit never fits, credits or not")
		require.Equal(t, time.Duration(-1), r.RetryAfter)
		r, err = s.At(now).Allow(ctx, "credit", 3, 3)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.EqualValues(t, -2, r.Sum)
		require.EqualValues(t, 3, r.Remaining)
		r, err = s.At(now).Allow(ctx, "credit", 3, 3)
		require.NoError(t, err)
		require.True(t, r.Allowed, "-2 + 3 <= 3")
		require.EqualValues(t, 1, r.Sum)
		require.EqualValues(t, 2, r.Remaining)
	})
}
