package tests

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

type event struct {
	at    time.Time
	delta int64
}

// modelSum is the reference window sum: every event at or before now whose
// bucket starts after now - lookback. Bucket starts come from the codec, whose
// own tests check it against a brute-force walk of the calendar.
func modelSum(c *codec.Codec, evs []event, now time.Time, lookback time.Duration) int64 {
	var sum int64
	for _, e := range evs {
		_, start, _ := c.Bounds(e.at)
		if !e.at.After(now) && start.After(now.Add(-lookback)) {
			sum += e.delta
		}
	}
	return sum
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestConformanceEventStream plays the same timed event streams on every backend
// and checks every sum against the model: across a year end after a leap year,
// across a leap day, and with a bucket that does not divide the year.
func TestConformanceEventStream(t *testing.T) {
	t.Parallel()
	streams := []struct {
		name  string
		w     store.Window
		from  string
		step  time.Duration
		count int
	}{
		{"year end after leap year", store.Window{Length: 10 * time.Second, Bucket: time.Second}, "2024-12-31T23:59:48.3Z", 700 * time.Millisecond, 50},
		{"leap day", store.Window{Length: time.Hour, Bucket: 10 * time.Minute}, "2024-02-28T23:20:00Z", 7 * time.Minute, 30},
		{"short last bucket", store.Window{Length: 70 * time.Second, Bucket: 7 * time.Second}, "2025-12-31T23:58:30Z", 3300 * time.Millisecond, 60},
		{"plain year end", store.Window{Length: 6 * time.Second, Bucket: 2 * time.Second}, "2025-12-31T23:59:55Z", 450 * time.Millisecond, 40},
	}
	forEach(t, func(t *testing.T, tg target) {
		for _, st := range streams {
			t.Run(st.name, func(t *testing.T) {
				s, _ := newStore(t, tg, st.w)
				ctx := ctxT(t)
				var evs []event
				at := utc(st.from)
				for i := 0; i < st.count; i++ {
					delta := int64(i%7 + 1)
					if i%5 == 4 {
						delta = -2
					}
					evs = append(evs, event{at, delta})
					got, err := s.At(at).Add(ctx, "stream", delta)
					require.NoError(t, err)
					require.Equal(t, modelSum(hook.Codec(s), evs, at, st.w.Length), got, "AddAt %v", at)
					q := at.Add(st.step / 2)
					got, err = s.At(q).Sum(ctx, "stream")
					require.NoError(t, err)
					require.Equal(t, modelSum(hook.Codec(s), evs, q, st.w.Length), got, "SumAt %v", q)
					half := st.w.Length / 2 / st.w.Bucket * st.w.Bucket
					got, err = s.At(q).Over(half).Sum(ctx, "stream")
					require.NoError(t, err)
					require.Equal(t, modelSum(hook.Codec(s), evs, q, half), got, "SumWithinAt %v %v", q, half)
					at = at.Add(st.step)
				}
				// Long after the last event everything has left the window.
				got, err := s.At(at.Add(st.w.Length+st.w.Bucket)).Sum(ctx, "stream")
				require.NoError(t, err)
				require.Zero(t, got)
			})
		}
	})
}

// TestConformanceExpiry checks on the server's clock that no bucket outlives
// its window: key and field TTLs are within window + bucket, no field lives
// forever, and the sum and the key are gone once window + bucket has passed.
func TestConformanceExpiry(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 2 * time.Second, Bucket: 500 * time.Millisecond}
		s, srv := newStore(t, tg, w)
		ctx := ctxT(t)
		c := srv.Client(t)
		ks, _ := hook.CounterKeys(s, "exp")
		limit := (w.Length + w.Bucket).Milliseconds()
		for i := 0; i < 6; i++ {
			_, err := s.Add(ctx, "exp", 1)
			require.NoError(t, err)
			for j, k := range ks {
				pttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
				require.NoError(t, err)
				switch {
				case tg.wantBackend == "tairhash":
					// No key TTL on TairHash: a key expiry crashed the module (see
					// package tairhash); the key goes with its last field.
					require.EqualValues(t, -1, pttl)
				case j == 0 && len(ks) > 1 && pttl == -2:
					// The plain hash's current bucket is in its head: until a
					// bucket has gone by, there is no hash.
				default:
					require.Greater(t, pttl, int64(0), "%s", k)
					require.LessOrEqual(t, pttl, limit, "%s", k)
				}
			}
			snap, err := s.Inspect(ctx, "exp")
			require.NoError(t, err)
			for _, b := range snap.Buckets {
				if tg.wantFieldTTL {
					require.Greater(t, b.TTL, time.Duration(0), "field %s has no TTL", b.Field)
					require.LessOrEqual(t, b.TTL.Milliseconds(), limit, "field %s", b.Field)
				}
			}
			time.Sleep(170 * time.Millisecond)
		}
		time.Sleep(w.Length + w.Bucket + 50*time.Millisecond)
		n, err := s.Sum(ctx, "exp")
		require.NoError(t, err)
		require.Zero(t, n)
		if tg.wantBackend == "tairhash" {
			// TairHash (SORT mode) hides expired fields from EXHGETALL at
			// once, but deletes them, and the emptied key, only in its
			// active expire, which runs every active_expire_period (1 s by
			// default) over a bounded number of keys (a backlog of expired
			// keys on a busy shared server delays it: 2.5 s was seen to be
			// too short), or on a later write to the key.
			require.Eventually(t, func() bool {
				ex, err := c.Do(ctx, c.B().Exists().Key(ks[0]).Build()).AsInt64()
				return err == nil && ex == 0
			}, 15*time.Second, 50*time.Millisecond, "the key outlived window + bucket + TairHash's active expiry")
			return
		}
		ex, err := c.Do(ctx, c.B().Exists().Key(ks...).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, ex, "the keys %v outlived window + bucket", ks)
	})
}

// TestConformanceAllowConcurrent: of many concurrent Allow calls, exactly the
// limit is admitted.
func TestConformanceAllowConcurrent(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.Allow(ctx, "burst", 10, 1)
				if !assert.NoError(t, err) {
					return
				}
				if r.Allowed {
					allowed.Add(1)
				} else {
					assert.Greater(t, r.RetryAfter, time.Duration(0))
					assert.LessOrEqual(t, r.RetryAfter, time.Minute)
				}
			}()
		}
		wg.Wait()
		require.EqualValues(t, 10, allowed.Load())
		n, err := s.Sum(ctx, "burst")
		require.NoError(t, err)
		require.EqualValues(t, 10, n)
	})
}

// TestConformanceRetryAfterHonest: a retry at RetryAfter succeeds, and one a
// millisecond before it fails.
func TestConformanceRetryAfterHonest(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 10 * time.Second, Bucket: time.Second}
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Second)
		for i, at := range []time.Duration{100 * time.Millisecond, 2300 * time.Millisecond, 2400 * time.Millisecond, 5 * time.Second} {
			r, err := s.At(t0.Add(at)).Allow(ctx, "honest", 4, 1)
			require.NoError(t, err)
			require.True(t, r.Allowed, "call %d", i)
		}
		now := t0.Add(6 * time.Second)
		r, err := s.At(now).Allow(ctx, "honest", 4, 2)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		require.EqualValues(t, 4, r.Sum)
		require.Zero(t, r.Remaining)
		// Two must leave: the +0.1s bucket leaves at +10s, the +2s one at +12s.
		require.Equal(t, 6*time.Second, r.RetryAfter)
		require.Equal(t, 9*time.Second, r.ResetAfter)
		r, err = s.At(now.Add(r.RetryAfter-time.Millisecond)).Allow(ctx, "honest", 4, 2)
		require.NoError(t, err)
		require.False(t, r.Allowed, "a retry before RetryAfter must fail")
		r, err = s.At(now.Add(6*time.Second)).Allow(ctx, "honest", 4, 2)
		require.NoError(t, err)
		require.True(t, r.Allowed, "a retry at RetryAfter must succeed")
		// A cost over the limit never fits.
		r, err = s.At(now.Add(6*time.Second)).Allow(ctx, "honest", 4, 5)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		require.Equal(t, time.Duration(-1), r.RetryAfter)
	})
}

// TestConformanceWrongType: a key of another type, or a hash that is not a
// counter, is refused with ErrWrongType and left untouched.
func TestConformanceWrongType(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		s, srv := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		c := srv.Client(t)
		// (The keys that hold the counter: with a head, its buckets' hash.)
		str, lst, foreign := counterKey(t, s, "str"), counterKey(t, s, "list"), counterKey(t, s, "foreign")
		require.NoError(t, c.Do(ctx, c.B().Set().Key(str).Value("hello").Build()).Error())
		require.NoError(t, c.Do(ctx, c.B().Rpush().Key(lst).Element("a").Build()).Error())
		require.NoError(t, c.Do(ctx, c.B().Hset().Key(foreign).FieldValue().FieldValue("name", "x").Build()).Error())
		for _, k := range []string{"str", "list", "foreign"} {
			_, err := s.Add(ctx, k, 1)
			require.ErrorIs(t, err, store.ErrWrongType, k)
			_, err = s.Sum(ctx, k)
			require.ErrorIs(t, err, store.ErrWrongType, k)
			_, err = s.Allow(ctx, k, 10, 1)
			require.ErrorIs(t, err, store.ErrWrongType, k)
			_, err = s.Record(ctx, store.Event{Key: k, Delta: 1, NoSum: true})
			require.ErrorIs(t, err, store.ErrWrongType, k)
			_, err = s.Inspect(ctx, k)
			require.ErrorIs(t, err, store.ErrWrongType, k)
			_, err = s.Record(ctx, store.Event{ID: "e", Key: k, Delta: 1})
			require.ErrorIs(t, err, store.ErrWrongType, k)
			// Decided with a counter of another key (linked, all or
			// nothing): refused, and the other counter is not written.
			_, err = store.AllowAll(ctx, 1, store.Quota{Store: s, Key: "fine", Limit: 10}, store.Quota{Store: s, Key: k, Limit: 10})
			require.ErrorIs(t, err, store.ErrWrongType, k)
			n, err := s.Sum(ctx, "fine")
			require.NoError(t, err)
			require.Zero(t, n, "the other counter counted beside %s", k)
		}
		v, err := c.Do(ctx, c.B().Get().Key(str).Build()).ToString()
		require.NoError(t, err)
		require.Equal(t, "hello", v)
		l, err := c.Do(ctx, c.B().Lrange().Key(lst).Start(0).Stop(-1).Build()).AsStrSlice()
		require.NoError(t, err)
		require.Equal(t, []string{"a"}, l)
		h, err := c.Do(ctx, c.B().Hgetall().Key(foreign).Build()).AsStrMap()
		require.NoError(t, err)
		require.Equal(t, map[string]string{"name": "x"}, h)
		for _, k := range []string{str, lst, foreign} {
			ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			require.NoError(t, err)
			require.EqualValues(t, -1, ttl, "%s got an expiry", k)
		}
	})
}

// TestConformanceOverflow: a bucket past int64 is refused and nothing changes;
// sums beyond 2^53 are exact; a sum past int64 is an error.
func TestConformanceOverflow(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Second)
		n, err := s.At(t0).Add(ctx, "of", math.MaxInt64)
		require.NoError(t, err)
		require.EqualValues(t, int64(math.MaxInt64), n)
		_, err = s.At(t0).Add(ctx, "of", 1)
		require.ErrorIs(t, err, store.ErrOverflow)
		n, err = s.At(t0).Sum(ctx, "of")
		require.NoError(t, err)
		require.EqualValues(t, int64(math.MaxInt64), n, "a refused write changed the counter")
		// Allow decides exactly on a sum beyond 2^53: refused, and told when the
		// bucket leaves (t0 is on a bucket start: a full window from now).
		r, err := s.At(t0).Allow(ctx, "of", 10, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		require.Equal(t, int64(math.MaxInt64), r.Sum)
		require.Zero(t, r.Remaining)
		require.Equal(t, time.Minute, r.RetryAfter)

		// 2^60 + 3 and 2^60 + 5 in two buckets: 2^61 + 8, beyond doubles, exact here.
		a, b := int64(1)<<60+3, int64(1)<<60+5
		_, err = s.At(t0).Add(ctx, "big", a)
		require.NoError(t, err)
		n, err = s.At(t0.Add(time.Second)).Add(ctx, "big", b)
		require.NoError(t, err)
		require.Equal(t, a+b, n)
		sums, err := s.At(t0.Add(time.Second)).SumMany(ctx, []string{"big", "of", "none"})
		require.NoError(t, err)
		require.Equal(t, []int64{a + b, math.MaxInt64, 0}, sums)
		// Two buckets of 2^62 + 2^62 = 2^63: past int64. Refused, nothing written.
		_, err = s.At(t0).Add(ctx, "past", 1<<62)
		require.NoError(t, err)
		_, err = s.At(t0.Add(time.Second)).Add(ctx, "past", 1<<62)
		require.ErrorIs(t, err, store.ErrOverflow)
		n, err = s.At(t0.Add(time.Second)).Sum(ctx, "past")
		require.NoError(t, err)
		require.EqualValues(t, int64(1)<<62, n, "a refused add changed the counter")
		snap, err := s.Inspect(ctx, "past")
		require.NoError(t, err)
		require.Len(t, snap.Buckets, 1)
		// The same below: -2^62 - 2^62 - 1 < MinInt64.
		_, err = s.At(t0).Add(ctx, "neg", -(1 << 62))
		require.NoError(t, err)
		n, err = s.At(t0.Add(time.Second)).Add(ctx, "neg", -(1 << 62))
		require.NoError(t, err)
		require.Equal(t, int64(math.MinInt64), n)
		_, err = s.At(t0.Add(2*time.Second)).Add(ctx, "neg", -1)
		require.ErrorIs(t, err, store.ErrOverflow)
		// Exact mixed signs beyond 2^53: (2^62 + 1) + (-2^62 + 2) = 3.
		_, err = s.At(t0).Add(ctx, "mix", 1<<62+1)
		require.NoError(t, err)
		n, err = s.At(t0.Add(time.Second)).Add(ctx, "mix", -(1<<62)+2)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
	})
}

// TestConformanceSumMany reads many keys in one call, with a bad key among them.
func TestConformanceSumMany(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		s, srv := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
		ctx := ctxT(t)
		c := srv.Client(t)
		keys := make([]string, 100)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
			if i%3 == 0 {
				_, err := s.Add(ctx, keys[i], int64(i))
				require.NoError(t, err)
			}
		}
		sums, err := s.SumMany(ctx, keys)
		require.NoError(t, err)
		for i, n := range sums {
			want := int64(0)
			if i%3 == 0 {
				want = int64(i)
			}
			require.Equal(t, want, n, keys[i])
		}
		bad, _ := hook.CounterKeys(s, "k5")
		require.NoError(t, c.Do(ctx, c.B().Set().Key(bad[0]).Value("x").Build()).Error())
		sums, err = s.SumMany(ctx, []string{"k3", "k5", "", "k6"})
		var many *store.ManyError
		require.ErrorAs(t, err, &many)
		require.ErrorIs(t, err, store.ErrWrongType)
		require.ErrorIs(t, err, store.ErrInvalid)
		require.Nil(t, many.Errs[0])
		require.NotNil(t, many.Errs[1])
		require.NotNil(t, many.Errs[2])
		require.Equal(t, []int64{3, 0, 0, 6}, sums)
	})
}

// TestConformanceInspect checks what Inspect reports.
func TestConformanceInspect(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 10 * time.Second, Bucket: time.Second}
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		snap, err := s.Inspect(ctx, "none")
		require.NoError(t, err)
		require.Empty(t, snap.Buckets)
		require.Equal(t, time.Duration(-2), snap.KeyTTL)
		require.NotEmpty(t, snap.RedisKey)
		added := time.Now()
		for i := 0; i < 3; i++ {
			_, err := s.Add(ctx, "ins", int64(i+1))
			require.NoError(t, err)
		}
		snap, err = s.Inspect(ctx, "ins")
		require.NoError(t, err)
		var total int64
		for _, b := range snap.Buckets {
			require.True(t, b.Live, fmt.Sprint(b))
			require.False(t, b.Start.After(snap.Now))
			require.Greater(t, b.TTL, time.Duration(0))
			total += b.Value
		}
		require.EqualValues(t, 6, total)
		if tg.wantBackend == "tairhash" {
			require.Equal(t, time.Duration(-1), snap.KeyTTL)
		} else {
			// The key expires when its newest bucket leaves: at least
			// window - bucket after the adds.
			require.Greater(t, snap.KeyTTL, w.Length-w.Bucket-time.Since(added))
		}
	})
}

// TestSumWritesNothing: Sum changes nothing on the server when there is nothing
// stale to delete (the server's dirty counter does not move).
func TestSumWritesNothing(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		// The dirty counter is the server's: a server of the test's own.
		srv := harness.Fresh(t, tg.kind)
		c := srv.Client(t)
		ctx := ctxT(t)
		s, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithBackend(tg.backend))
		require.NoError(t, err)
		require.Equal(t, tg.wantFieldTTL, s.Detection().FieldTTL)
		for i := 0; i < 5; i++ {
			_, err := s.Add(ctx, "ro", 1)
			require.NoError(t, err)
		}
		before := dirty(t, c)
		for i := 0; i < 3; i++ {
			n, err := s.Sum(ctx, "ro")
			require.NoError(t, err)
			require.EqualValues(t, 5, n)
		}
		require.Equal(t, before, dirty(t, c), "Sum wrote to the server")
	})
}

func dirty(t testing.TB, c rueidis.Client) string {
	info, err := c.Do(ctxT(t), c.B().Info().Section("persistence").Build()).ToString()
	require.NoError(t, err)
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, "rdb_changes_since_last_save:") {
			return strings.TrimSpace(l)
		}
	}
	t.Fatal("no rdb_changes_since_last_save in INFO")
	return ""
}

// TestConformanceAddNoSum: AddNoSum counts like Add, and on the plain hash
// keeps the key from piling up stale buckets even when nothing reads it.
func TestConformanceAddNoSum(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 5 * time.Second, Bucket: time.Second}
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Second)
		var evs []event
		for i := 0; i < 40; i++ {
			at := t0.Add(time.Duration(i) * 700 * time.Millisecond)
			_, err := s.At(at).Record(ctx, store.Event{Key: "ns", Delta: int64(i%3 + 1), NoSum: true})
			require.NoError(t, err)
			evs = append(evs, event{at, int64(i%3 + 1)})
			// (With field TTLs, buckets go when real time passes, and this
			// clock runs ahead of it; only the plain hash must sweep.)
			if !tg.wantFieldTTL {
				snap, err := s.Inspect(ctx, "ns")
				require.NoError(t, err)
				require.LessOrEqual(t, len(snap.Buckets), int(w.Length/w.Bucket)+2, "stale buckets pile up")
			}
		}
		last := evs[len(evs)-1].at
		n, err := s.At(last).Sum(ctx, "ns")
		require.NoError(t, err)
		require.Equal(t, modelSum(hook.Codec(s), evs, last, w.Length), n)
		_, err = s.Record(ctx, store.Event{Key: "", Delta: 1, NoSum: true})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

// TestAddNoSumIsAdd: on the plain hash a write without a sum moves the
// running total as Add does, and calls the commands Add calls: on a synced
// counter one GET and one SET of the head, nothing else; on a move, Add's
// move. (Since it runs Add's own Lua, the lean path, it also costs what Add
// costs: see docs/benchmarks.md, row addnosum.) On a server of its own,
// whose command counts are the calls' alone.
func TestAddNoSumIsAdd(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxT(t)
	s, err := store.New(ctx, c, store.Window{Length: 10 * time.Second, Bucket: time.Second},
		store.WithBackend("nativehash-plain"), store.WithPrefix(harness.Prefix(t)))
	require.NoError(t, err)
	at := s.At(time.Now().Truncate(time.Second).Add(500 * time.Millisecond))
	// commands runs write and answers the commands the server ran for it,
	// as "name=calls": the script's, not the script call itself, the
	// stats' own, or a connection's setup (the client opens one when it
	// needs one).
	commands := func(write func() error) []string {
		srv.Cmd(t, "CONFIG", "RESETSTAT")
		require.NoError(t, write())
		var out []string
		for _, l := range strings.Split(srv.Cmd(t, "INFO", "commandstats"), "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
			name, isCmd := strings.CutPrefix(name, "cmdstat_")
			if !ok || !isCmd || slices.Contains([]string{"fcall", "info", "config|resetstat", "hello", "ping", "select", "auth"}, name) ||
				strings.HasPrefix(name, "client|") || strings.HasPrefix(name, "cluster|") || strings.HasPrefix(name, "command") {
				continue
			}
			calls, _, _ := strings.Cut(rest, ",")
			out = append(out, name+"="+strings.TrimPrefix(calls, "calls="))
		}
		slices.Sort(out)
		return out
	}
	_, err = at.Add(ctx, "k", 1) // the counter's record, on the current bucket
	require.NoError(t, err)
	add := commands(func() error { _, err := at.Add(ctx, "k", 2); return err })
	require.Equal(t, []string{"get=1", "set=1"}, add, "Add on a synced counter")
	noSum := commands(func() error { _, err := at.Record(ctx, store.Event{Key: "k", Delta: 3, NoSum: true}); return err })
	require.Equal(t, add, noSum, "a write without a sum calls what Add calls")
	// A move: the next second's first write, on two counters alike.
	next := s.At(time.Now().Truncate(time.Second).Add(1500 * time.Millisecond))
	_, err = at.Add(ctx, "k2", 1)
	require.NoError(t, err)
	_, err = at.Add(ctx, "k2", 2)
	require.NoError(t, err)
	add = commands(func() error { _, err := next.Add(ctx, "k", 1); return err })
	noSum = commands(func() error { _, err := next.Record(ctx, store.Event{Key: "k2", Delta: 1, NoSum: true}); return err })
	require.Equal(t, add, noSum, "a move without a sum calls what Add's calls")
	for k, want := range map[string]int64{"k": 7, "k2": 4} {
		n, err := next.Sum(ctx, k)
		require.NoError(t, err)
		require.Equal(t, want, n, k)
	}
}

// TestConformanceRandomWalk plays a random stream of Add, AddNoSum, Allow and
// Sum at random gaps on every backend and checks every answer against the
// model. The gaps stress the plain hash's running total: none (same bucket),
// a few buckets (swept one by one), more than it sweeps one by one (rebuilt
// from a full read), and more than the window (all gone); the walks cross a
// year end with a short last bucket and a leap day.
func TestConformanceRandomWalk(t *testing.T) {
	t.Parallel()
	walks := []struct {
		name string
		w    store.Window
		from string
	}{
		{"year end, short last bucket", store.Window{Length: 70 * time.Second, Bucket: 7 * time.Second}, "2025-12-31T23:50:00Z"},
		{"leap day", store.Window{Length: 10 * time.Minute, Bucket: 10 * time.Second}, "2024-02-29T23:40:00Z"},
		{"one bucket", store.Window{Length: time.Second, Bucket: time.Second}, "2026-12-31T23:59:00Z"},
	}
	forEach(t, func(t *testing.T, tg target) {
		for wi, wk := range walks {
			t.Run(wk.name, func(t *testing.T) {
				s, _ := newStore(t, tg, wk.w)
				ctx := ctxT(t)
				rng := rand.New(rand.NewPCG(uint64(wi), 42))
				var evs []event
				at := utc(wk.from)
				real := time.Now()
				for i := 0; i < 400; i++ {
					prev := at
					switch r := rng.IntN(20); {
					case r < 8: // same bucket, or the next
						at = at.Add(time.Duration(rng.Int64N(int64(wk.w.Bucket))))
					case r < 16: // a few buckets
						at = at.Add(time.Duration(rng.Int64N(int64(5 * wk.w.Bucket))))
					case r < 19: // more than a sweep takes one by one
						at = at.Add(wk.w.Bucket * time.Duration(33+rng.IntN(40)))
					default: // the whole window
						at = at.Add(wk.w.Length + time.Duration(rng.Int64N(int64(wk.w.Length))))
					}
					// Field TTLs run on the server's real clock: a field
					// written at an instant near its bucket's end may expire
					// within a few ms of real time. The walk's clock never
					// runs slower than the real one (with 100 ms to spare for
					// a call's latency on a loaded machine), so the server
					// never drops a bucket that the walk still counts.
					if el := time.Since(real) + 100*time.Millisecond; at.Sub(prev) < el {
						at = prev.Add(el)
					}
					real = time.Now()
					delta := rng.Int64N(20) - 5
					model := modelSum(hook.Codec(s), evs, at, wk.w.Length)
					switch rng.IntN(4) {
					case 0:
						got, err := s.At(at).Add(ctx, "walk", delta)
						require.NoError(t, err)
						evs = append(evs, event{at, delta})
						require.Equal(t, model+delta, got, "AddAt %v (step %d)", at, i)
					case 1:
						_, err := s.At(at).Record(ctx, store.Event{Key: "walk", Delta: delta, NoSum: true})
						require.NoError(t, err)
						evs = append(evs, event{at, delta})
					case 2:
						cost, limit := rng.Int64N(4), rng.Int64N(60)
						r, err := s.At(at).Allow(ctx, "walk", limit, cost)
						require.NoError(t, err)
						want := model+cost <= limit
						require.Equal(t, want, r.Allowed, "AllowAt %v sum %d cost %d limit %d (step %d)", at, model, cost, limit, i)
						if want {
							evs = append(evs, event{at, cost})
							model += cost
						}
						require.Equal(t, model, r.Sum, "AllowAt %v (step %d)", at, i)
					default:
						got, err := s.At(at).Sum(ctx, "walk")
						require.NoError(t, err)
						require.Equal(t, model, got, "SumAt %v (step %d)", at, i)
					}
				}
			})
		}
	})
}

// TestConformanceRefusalInThePast: an Allow refused at an instant before the
// counter's newest bucket (a client clock behind another) must not break the
// plain hash's running total: once every bucket has left the window, the sum
// is exactly what was added since, on every backend.
func TestConformanceRefusalInThePast(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 10 * time.Second, Bucket: time.Second}
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		t0 := utc("2026-06-01T12:00:00.5Z")
		_, err := s.At(t0.Add(2*time.Second)).Add(ctx, "past", 5)
		require.NoError(t, err)
		r, err := s.At(t0).Allow(ctx, "past", 0, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		later := t0.Add(2*time.Second + w.Length + w.Bucket)
		n, err := s.At(later).Add(ctx, "past", 3)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		n, err = s.At(later.Add(w.Bucket)).Sum(ctx, "past")
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
	})
}

// TestInspectAheadOfClock: a bucket a little ahead of the server's clock (a
// client whose clock is ahead, within the future tolerance) is live, as the
// sums count it, and Inspect says so, with its own start (not one a year
// earlier).
func TestInspectAheadOfClock(t *testing.T) {
	w := store.Window{Length: time.Minute, Bucket: time.Second}
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, w)
		ctx := ctxT(t)
		ahead := time.Now().Add(3 * time.Second)
		_, err := s.At(ahead).Add(ctx, "k", 7)
		require.NoError(t, err)
		n, err := s.Sum(ctx, "k")
		require.NoError(t, err)
		require.EqualValues(t, 7, n, "the server's clock counts the bucket ahead")
		snap, err := s.Inspect(ctx, "k")
		require.NoError(t, err)
		require.Len(t, snap.Buckets, 1)
		_, start, _ := hook.Codec(s).Bounds(ahead)
		require.True(t, snap.Buckets[0].Live, "a bucket ahead of the clock within the tolerance")
		require.Equal(t, start.UnixMilli(), snap.Buckets[0].Start.UnixMilli())
	})
}

// TestYearWrapRealTime crosses a code wrap in real time, on the server's clock:
// a calendar whose year begins two seconds from now makes the codes restart at
// 0 while counting goes on. Every sum must match the model, and the buckets of
// the old year must be counted, then leave, like any others. It proves that it
// crossed: the buckets the server wrote (on its own clock) carry codes of the
// old year's last buckets and of the new year's first ones, and the adds ran
// on both sides of the boundary; a run that stays within one year fails.
func TestYearWrapRealTime(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 2 * time.Second, Bucket: 500 * time.Millisecond}
		// The wrap falls on a bucket edge 2 s (plus alignment) from now; on a
		// machine so loaded that making the store took most of that, again
		// with a longer lead, so that adds run before the wrap too.
		var wrap time.Time
		var s *store.Store
		for lead := 2 * time.Second; ; lead *= 2 {
			wrap = time.Now().Truncate(time.Second).Add(lead)
			_, next := codec.UTC.Year(wrap)
			s, _ = newStore(t, tg, w, hook.WithCalendar(codec.Shifted(wrap.Sub(next))).(store.Option))
			if time.Until(wrap) >= 1500*time.Millisecond || lead >= 16*time.Second {
				break
			}
			t.Logf("making the store left %v before the wrap: again, with a lead of %v", time.Until(wrap), 2*lead)
		}
		ctx := ctxT(t)
		cd := hook.Codec(s)

		// The codes of the old year's last buckets and of the new year's
		// first ones, as far as the adds below can reach even on a stalled
		// machine (reach buckets, 500 s): the year's last code is some 63
		// million at 500 ms buckets, far from the first.
		const reach = 1000
		lastOld := cd.Code(wrap.Add(-time.Millisecond))
		require.Greater(t, lastOld, int64(100*reach), "the old year's last code")
		require.EqualValues(t, 0, cd.Code(wrap), "the new year's first code")
		oldTail := func(c int64) bool { return c > lastOld-reach && c <= lastOld }
		newHead := func(c int64) bool { return c >= 0 && c < reach }
		var evs []event
		sawOld, sawNew := map[int64]bool{}, map[int64]bool{}
		addedBefore, addedAfter := false, false
		for i := 0; i < 20 || !addedAfter && i < 80; i++ { // (a longer lead takes more adds to pass the wrap)
			// Act in the middle of a bucket so that the server's clock and ours
			// (the same host clock) agree on the bucket.
			now := time.Now()
			_, start, _ := cd.Bounds(now)
			mid := start.Add(w.Bucket / 2)
			if mid.Before(now) {
				mid = mid.Add(w.Bucket)
			}
			time.Sleep(time.Until(mid))
			before := time.Now()
			got, err := s.Add(ctx, "wrap", 1)
			after := time.Now()
			require.NoError(t, err)
			snap, err := s.Inspect(ctx, "wrap")
			require.NoError(t, err)
			// The server's instant lies between before and after (the same
			// host clock). When both are in one bucket, the model knows where
			// the event went; when the call crossed bucket edges (a slow or
			// stalled machine: one or more), the server's buckets tell which
			// bucket got it: the one holding one more than the model's count.
			at := before
			if !bucketStart(cd, before).Equal(bucketStart(cd, after)) {
				// (A stall so long that the bucket has left the window
				// by the snapshot: the one bucket whose model sum is
				// the answer.)
				found, bySum := false, []time.Time(nil)
				for b := bucketStart(cd, before); !b.After(after) && !found; {
					for _, sb := range snap.Buckets {
						if sb.Start.Equal(b) && sb.Value == bucketCount(cd, evs, b)+1 {
							at, found = b, true
						}
					}
					if modelSum(cd, append(evs[:len(evs):len(evs)], event{b, 1}), b, w.Length) == got {
						bySum = append(bySum, b)
					}
					_, _, b = cd.Bounds(b)
				}
				if !found && len(bySum) == 1 {
					at, found = bySum[0], true
				}
				require.True(t, found, "add %d took from %v to %v: no one bucket of that span holds it (%+v)", i, before, after, snap.Buckets)
				t.Logf("add %d crossed a bucket edge (%v to %v): counted in the bucket of %v", i, before, after, at)
			}
			evs = append(evs, event{at, 1})
			require.Equal(t, modelSum(cd, evs, at, w.Length), got, "add %d at %v..%v (wrap at %v)", i, before, after, wrap)
			// after is no later than the server's instant of the add when
			// the add ran before the wrap, and before, no earlier, after it.
			addedBefore = addedBefore || after.Before(wrap)
			addedAfter = addedAfter || !before.Before(wrap)
			for _, b := range snap.Buckets {
				code, err := codec.Decode(b.Field)
				require.NoError(t, err)
				switch {
				case oldTail(code):
					sawOld[code] = true
				case newHead(code):
					sawNew[code] = true
				default:
					t.Fatalf("bucket %s (code %d) is neither among the old year's last %d codes (to %d) nor the new year's first", b.Field, code, reach, lastOld)
				}
			}
			if at.After(wrap.Add(w.Length)) {
				// No bucket that had left the window at the add's instant
				// is kept (the snapshot, taken a little later, may already
				// see one more bucket leave).
				low := bucketStart(cd, at).Add(-w.Length)
				for _, b := range snap.Buckets {
					require.True(t, b.Start.After(low), "stale bucket %s (start %v) after the wrap, at %v", b.Field, b.Start, at)
				}
			}
		}
		require.True(t, addedBefore && addedAfter, "the adds did not run on both sides of the year end at %v", wrap)
		require.NotEmpty(t, sawOld, "no bucket of the old year's end (codes %d to %d) was written", lastOld-reach+1, lastOld)
		require.NotEmpty(t, sawNew, "no bucket of the new year's start (codes 0 to %d) was written", reach-1)
		t.Logf("%s: buckets written at the old year's end %v, at the new year's start %v", tg.name, sortedCodes(sawOld), sortedCodes(sawNew))
	})
}

// sortedCodes returns a set's codes, sorted.
func sortedCodes(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func bucketStart(c *codec.Codec, t time.Time) time.Time {
	_, start, _ := c.Bounds(t)
	return start
}

// bucketCount is the model's count in the bucket that starts at start.
func bucketCount(c *codec.Codec, evs []event, start time.Time) int64 {
	var n int64
	for _, e := range evs {
		if bucketStart(c, e.at).Equal(start) {
			n += e.delta
		}
	}
	return n
}
