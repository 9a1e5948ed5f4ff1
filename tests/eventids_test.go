package tests

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/windowstore/windowstore/features"

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

// TestEventIDs: an event id is counted once, whatever the retries, on every
// backend: sequential repeats, 40 concurrent callers, and repeats coalesced
// into one script call; a refused Allow records nothing, so its retry is
// decided anew; an admitted one answers its decision again.
func TestEventIDs(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, srv := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithBatching(64, 1))
		ctx := ctxT(t)
		a, err := s.Record(ctx, store.Event{Key: "k", Delta: 5, ID: "evt-1"})
		require.NoError(t, err)
		require.False(t, a.Duplicate)
		require.EqualValues(t, 5, a.Sum)
		a, err = s.Record(ctx, store.Event{Key: "k", Delta: 5, ID: "evt-1"})
		require.NoError(t, err)
		require.True(t, a.Duplicate)
		require.EqualValues(t, 5, a.Sum, "a duplicate answers the state now")
		// 40 callers, one id each round: one counts.
		for round := 0; round < 3; round++ {
			var counted atomic.Int64
			var wg sync.WaitGroup
			id := "burst-" + strconv.Itoa(round)
			for i := 0; i < 40; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a, err := s.Record(ctx, store.Event{Key: "c", Delta: 1, ID: id})
					if assert.NoError(t, err) && !a.Duplicate {
						counted.Add(1)
					}
				}()
			}
			wg.Wait()
			require.EqualValues(t, 1, counted.Load())
		}
		n, err := s.Sum(ctx, "c")
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		// Allow: an admitted id answers its decision again; a refused one
		// records nothing.
		r, err := s.Record(ctx, store.Event{Key: "a", Delta: 1, ID: "x", Limit: 1})
		require.NoError(t, err)
		require.True(t, r.Allowed)
		r, err = s.Record(ctx, store.Event{Key: "a", Delta: 1, ID: "x", Limit: 1})
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.True(t, r.Duplicate)
		r, err = s.Record(ctx, store.Event{Key: "a", Delta: 1, ID: "y", Limit: 1})
		require.NoError(t, err)
		require.False(t, r.Allowed)
		require.False(t, r.Duplicate)
		rk, _ := hook.RedisKey(s, "a")
		c := srv.Client(t)
		ex, err := c.Do(ctx, c.B().Exists().Key(rk+":id:y").Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, ex, "a refusal recorded its id")
		// The id lives as long as the window (and a bucket), no longer.
		pttl, err := c.Do(ctx, c.B().Pttl().Key(rk+":id:x").Build()).AsInt64()
		require.NoError(t, err)
		require.Greater(t, pttl, int64(0))
		require.LessOrEqual(t, pttl, (time.Minute + time.Second).Milliseconds())
		// Ids from user input are escaped like keys.
		a, err = s.Record(ctx, store.Event{Key: "k", Delta: 1, ID: "{evil} id"})
		require.NoError(t, err)
		require.False(t, a.Duplicate)
		ex, err = c.Do(ctx, c.B().Exists().Key(rk[:len(rk)-len("{a}:1m/1s")]+"{k}:1m/1s:id:%7Bevil%7D%20id").Build()).AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, ex)
	})
}

// TestRecordDuplicateOfRefusal: a redelivered event that its first recording
// refused answers one consistent decision: refused, by the limits that
// refused it then (not by the others), each of those limits' values saying
// so; and it counts nothing. A redelivered admitted event answers admitted.
func TestRecordDuplicateOfRefusal(t *testing.T) {
	minute := store.Window{Length: time.Minute, Bucket: time.Second}
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		srv := newStoreServer(t, tg)
		set, err := features.New(ctx, srv.Client(t), []features.Feature{
			{Name: "attempts", Entity: "user", Kind: features.Count, Windows: []store.Window{minute}},
			{Name: "loose", Entity: "user", Kind: features.Limit, Windows: []store.Window{minute}, Limits: []int64{100}},
			{Name: "tight", Entity: "user", Kind: features.Limit, Windows: []store.Window{minute}, Limits: []int64{1}},
		}, store.WithPrefix(prefixFor(t)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		t0 := time.Now().UTC().Truncate(time.Minute).Add(-10 * time.Minute)
		rec := func(at time.Duration, id string) features.Result {
			r, err := set.At(t0.Add(at)).Record(ctx, features.Event{ID: id, Entities: map[string]string{"user": "u"}})
			require.NoError(t, err)
			return r
		}
		first := rec(0, "e1")
		require.True(t, first.Allowed)
		refused := rec(time.Second, "e2")
		require.False(t, refused.Allowed)
		require.Equal(t, []string{"tight"}, refused.RefusedBy)
		for _, at := range []time.Duration{2 * time.Second, 2 * time.Minute} { // still refused now; would be admitted now
			dup := rec(at, "e2")
			require.True(t, dup.Duplicate, "at +%v", at)
			require.False(t, dup.Allowed, "at +%v: the first decision was a refusal", at)
			require.Equal(t, []string{"tight"}, dup.RefusedBy, "at +%v", at)
			tight, _ := dup.Get("tight")
			require.False(t, tight.Decision.Allowed, "at +%v: the refusing limit's value contradicts the decision", at)
			require.False(t, tight.Counted)
			loose, _ := dup.Get("loose")
			require.True(t, loose.Decision.Allowed, "at +%v: the limit that admitted is not to blame", at)
			if at == 2*time.Second {
				require.Greater(t, dup.RetryAfter, time.Duration(0))
				require.Equal(t, dup.RetryAfter, tight.Decision.RetryAfter)
				v, _ := dup.Get("attempts")
				require.EqualValues(t, 2, v.Sum, "a duplicate counted")
			} else {
				require.Zero(t, dup.RetryAfter, "a new event would be admitted now")
			}
		}
		again := rec(3*time.Second, "e1")
		require.True(t, again.Duplicate)
		require.True(t, again.Allowed)
		require.Empty(t, again.RefusedBy)
	})
}
