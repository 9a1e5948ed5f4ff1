package tests

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
)

// TestLateEventTierSums is a new user's report: a late event that misses the
// short tier of a multi-resolution counter counts only in the tiers it is
// still inside, and still answers every tier's sum (the short tier's is what
// it holds, not 0), through store and through features, on every backend.
func TestLateEventTierSums(t *testing.T) {
	hour := store.Window{Length: time.Hour, Bucket: time.Minute}
	day := store.Window{Length: 24 * time.Hour, Bucket: time.Hour}
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, hour, store.WithTiers(day))
		ctx := ctxT(t)
		p := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
		_, err := s.At(p).Record(ctx, store.Event{Key: "c1", Delta: 1000})
		require.NoError(t, err)
		a, err := s.At(p.Add(10*time.Minute)).Record(ctx, store.Event{Key: "c1", Delta: 70, Time: p.Add(-65 * time.Minute)})
		require.NoError(t, err)
		require.Equal(t, []int64{1000, 1070}, a.Sums)
		require.Equal(t, []bool{false, true}, a.Counted)
		require.EqualValues(t, 1000, a.Sum)
		n, err := s.At(p.Add(10*time.Minute)).Sum(ctx, "c1")
		require.NoError(t, err)
		require.EqualValues(t, 1000, n)

		// The same through a feature set: a Sum and a Count over both windows,
		// and a Distinct, whose late member misses the hour too.
		set, err := features.New(ctx, clientOf(s), []features.Feature{
			{Name: "spend", Entity: "card", Kind: features.Sum, Windows: []store.Window{hour, day}},
			{Name: "uses", Entity: "card", Kind: features.Count, Windows: []store.Window{hour, day}},
			{Name: "ips", Entity: "card", Kind: features.Distinct, Of: "ip", Windows: []store.Window{hour, day}},
		}, store.WithPrefix(prefixFor(t)+"fx:"), store.WithBackend(tg.backend))
		require.NoError(t, err)
		_, err = set.At(p).Record(ctx, features.Event{Entities: map[string]string{"card": "c1", "ip": "a"}, Amount: 1000})
		require.NoError(t, err)
		r, err := set.At(p.Add(10*time.Minute)).Record(ctx, features.Event{Entities: map[string]string{"card": "c1", "ip": "b"},
			Amount: 70, Time: p.Add(-65 * time.Minute)})
		require.NoError(t, err)
		for name, want := range map[string][]int64{"spend": {1000, 1070}, "uses": {1, 2}, "ips": {1, 2}} {
			v, ok := r.Get(name)
			require.True(t, ok, name)
			require.Equal(t, want, v.Sums, name)
			require.Equal(t, want[0], v.Sum, name)
			require.False(t, v.Counted, "%s: the main window did not count the late event", name)
		}
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

// TestRecordValuesInSetOrder: Result.Values lists the features in the order
// the set declares them, whatever their entities, for Record and for Read;
// and Read, which writes nothing, marks nothing counted.
func TestRecordValuesInSetOrder(t *testing.T) {
	minute := []store.Window{{Length: time.Minute, Bucket: time.Second}}
	tg := targets[0]
	ctx := ctxT(t)
	srv := newStoreServer(t, tg)
	c := srv.Client(t)
	prefix := prefixFor(t)
	set, err := features.New(ctx, c, []features.Feature{
		{Name: "logins", Entity: "user", Kind: features.Count, Windows: minute},
		{Name: "login_limit", Entity: "user", Kind: features.Limit, Windows: minute, Limits: []int64{5}},
		{Name: "ip_count", Entity: "ip", Kind: features.Count, Windows: minute},
		{Name: "ip_users", Entity: "ip", Kind: features.Distinct, Of: "user", Windows: minute},
		{Name: "agents", Entity: "agent", Kind: features.Count, Windows: minute},
	}, store.WithPrefix(prefix))
	require.NoError(t, err)
	names := func(r features.Result) []string {
		var out []string
		for _, v := range r.Values {
			out = append(out, v.Feature)
		}
		return out
	}
	ents := map[string]string{"user": "u", "ip": "1.2.3.4", "agent": "x"}
	r, err := set.Record(ctx, features.Event{Entities: ents})
	require.NoError(t, err)
	require.Equal(t, []string{"logins", "login_limit", "ip_count", "ip_users", "agents"}, names(r))
	keys := scanKeys(t, c, prefix)
	before := dump(t, c, keys...)
	rd, err := set.Read(ctx, ents)
	require.NoError(t, err)
	require.Equal(t, names(r), names(rd))
	for _, v := range rd.Values {
		require.False(t, v.Counted, "Read marks %s counted", v.Feature)
	}
	require.Equal(t, before, dump(t, c, keys...), "Read wrote")
}

// TestRecordEmptyEntity: an entity whose value is empty is the same as one
// the event does not have: no feature keyed on it counts, no distinct count
// counts it, and no key names it; an event whose every entity is empty is
// refused with ErrInvalid.
func TestRecordEmptyEntity(t *testing.T) {
	minute := []store.Window{{Length: time.Minute, Bucket: time.Second}}
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		srv := newStoreServer(t, tg)
		c := srv.Client(t)
		prefix := prefixFor(t)
		set, err := features.New(ctx, c, []features.Feature{
			{Name: "card_uses", Entity: "card", Kind: features.Count, Windows: minute},
			{Name: "device_cards", Entity: "device", Kind: features.Distinct, Of: "card", Windows: minute},
			{Name: "device_uses", Entity: "device", Kind: features.Count, Windows: minute},
		}, store.WithPrefix(prefix), store.WithBackend(tg.backend))
		require.NoError(t, err)
		r, err := set.Record(ctx, features.Event{Entities: map[string]string{"card": "", "device": "d1"}})
		require.NoError(t, err)
		_, ok := r.Get("card_uses")
		require.False(t, ok, "a feature keyed on an empty card")
		_, ok = r.Get("device_cards")
		require.False(t, ok, "an empty card counted as a distinct card")
		v, ok := r.Get("device_uses")
		require.True(t, ok)
		require.EqualValues(t, 1, v.Sum)
		r, err = set.Record(ctx, features.Event{Entities: map[string]string{"card": "c1", "device": "d1"}})
		require.NoError(t, err)
		v, _ = r.Get("device_cards")
		require.EqualValues(t, 1, v.Sum, "only c1 is a card")
		for _, k := range scanKeys(t, c, prefix) {
			require.False(t, strings.Contains(k, "card:}"), "a key for an empty card: %s", k)
		}
		_, err = set.Record(ctx, features.Event{Entities: map[string]string{"card": "", "device": ""}})
		require.ErrorIs(t, err, store.ErrInvalid)
	})
}

// TestEventEdges pins the exact edges of an event's time, on every backend,
// at a clock on a bucket's edge (where "the window starts at now - length"
// is itself a bucket's start):
//   - a bucket is live when it starts after now - window: an event in the
//     bucket that starts exactly at now - window is too old, one a
//     millisecond later (the next bucket) counts;
//   - an event up to the future tolerance ahead of now counts (in the
//     current bucket), one a millisecond further fails;
//   - an event refused for either reason writes nothing (DUMP of every key
//     of the prefix, before and after).
func TestEventEdges(t *testing.T) {
	w := store.Window{Length: time.Minute, Bucket: time.Second}
	const tol = 2 * time.Second
	forEach(t, func(t *testing.T, tg target) {
		s, srv := newStore(t, tg, w, store.WithFutureTolerance(tol))
		c := srv.Client(t)
		ctx := ctxT(t)
		now := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Minute) // on a bucket's edge
		_, err := s.At(now).Add(ctx, "e", 1)
		require.NoError(t, err)
		prefix := prefixOf(t, s)
		keys := scanKeys(t, c, prefix)
		require.NotEmpty(t, keys)
		before := dump(t, c, keys...)
		start := now.Add(-w.Length) // a bucket starts here, and has left the window
		for _, at := range []time.Time{start.Add(-time.Millisecond), start, start.Add(time.Second - time.Millisecond)} {
			_, err := s.At(now).Record(ctx, store.Event{Key: "e", Delta: 1, Time: at})
			require.ErrorIs(t, err, store.ErrTooOld, "event at now-window%+v", at.Sub(start))
		}
		_, err = s.At(now).Record(ctx, store.Event{Key: "e", Delta: 1, Time: now.Add(tol + time.Millisecond)})
		require.ErrorIs(t, err, store.ErrFuture, "an event a millisecond beyond the tolerance")
		require.Equal(t, keys, scanKeys(t, c, prefix), "a refused event made a key")
		require.Equal(t, before, dump(t, c, keys...), "a refused event wrote")

		a, err := s.At(now).Record(ctx, store.Event{Key: "e", Delta: 10, Time: start.Add(time.Second)})
		require.NoError(t, err, "the oldest live bucket's first millisecond")
		require.EqualValues(t, 11, a.Sum)
		a, err = s.At(now).Record(ctx, store.Event{Key: "e", Delta: 100, Time: now.Add(tol)})
		require.NoError(t, err, "an event at the tolerance")
		require.EqualValues(t, 111, a.Sum)
		// The late event's bucket leaves the window exactly a window after it
		// started: a millisecond before, it still counts.
		n, err := s.At(start.Add(time.Second+w.Length-time.Millisecond)).Sum(ctx, "e")
		require.NoError(t, err)
		require.EqualValues(t, 111, n)
		n, err = s.At(start.Add(time.Second+w.Length)).Sum(ctx, "e")
		require.NoError(t, err)
		require.EqualValues(t, 101, n)
	})
}

// TestDistinctKeysExpire: the keys of a distinct count, of every tier (the
// hash of which bucket each ring key holds, the union once built, and the
// current bucket's ring key), carry a TTL that ends exactly when the newest bucket
// leaves that tier's window (checked against PTTL, within the test's own
// elapsed time: the expiry is set by the add that gave the bucket its key,
// which turns the client clock's instant into the server's); the ring never holds more keys than its size; and once the
// longest window has passed, no key is left.
func TestDistinctKeysExpire(t *testing.T) {
	short := store.Window{Length: 2 * time.Second, Bucket: 500 * time.Millisecond}
	long := store.Window{Length: 3 * time.Second, Bucket: time.Second}
	forEach(t, func(t *testing.T, tg target) {
		s, srv := newStore(t, tg, short, store.WithTiers(long))
		c := srv.Client(t)
		ctx := ctxT(t)
		prefix := prefixOf(t, s)
		var longest int64 // the longest add so far, ms: the keys' expiry may come from any earlier add
		unions := 0       // checks of a union's expiry
		for i := 0; i < 12; i++ {
			at := time.Now()
			t0 := time.Now()
			_, err := addDistinct(ctx, s.At(at), "dev", "m"+strconv.Itoa(i))
			require.NoError(t, err)
			longest = max(longest, time.Since(t0).Milliseconds())
			for ti, w := range []store.Window{short, long} {
				rk, err := hook.RedisKey(s.Over(w.Length), "dev")
				require.NoError(t, err)
				_, start, _ := mustCodec(t, w.Bucket).Bounds(at)
				idx, err := c.Do(ctx, c.B().Hget().Key(rk+":d").Field(strconv.FormatInt(start.UnixMilli(), 10)).Build()).ToString()
				require.NoError(t, err, "tier %d: the current bucket has no ring key", ti)
				want := start.Add(w.Length).UnixMilli() - at.UnixMilli() // when the newest bucket leaves the window (the scripts see whole ms)
				for _, key := range []string{rk + ":d", rk + ":d:u", rk + ":d:r" + idx} {
					pttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
					require.NoError(t, err)
					slack := time.Since(t0).Milliseconds() + longest + 3 // after the PTTL; whole ms, on both clocks
					if pttl == -2 && key == rk+":d:u" {
						continue // the union is built by the second add after the oldest bucket changed
					}
					if key == rk+":d:u" {
						unions++
					}
					// (within slack either way: the script turns the client clock's
					// instant into the server's at the moment it runs)
					require.LessOrEqual(t, pttl, want+slack, "tier %d key %s: TTL past the newest bucket's life", ti, key)
					require.Greater(t, pttl, want-slack, "tier %d key %s: TTL %d ms, the newest bucket lives %d ms more", ti, key, pttl, want)
				}
				ring := 0
				for _, k := range scanKeys(t, c, prefix) {
					if strings.HasPrefix(k, rk+":d:r") {
						ring++
					}
				}
				n := int((w.Length + w.Bucket - 1) / w.Bucket)
				size := n + 3 + min(int((5*time.Second+w.Bucket-1)/w.Bucket), n) // the default future tolerance, 5 s
				require.LessOrEqual(t, ring, size, "tier %d: more ring keys than the ring's size", ti)
			}
			time.Sleep(200 * time.Millisecond)
		}
		require.Greater(t, unions, 6, "too few unions were built to check their expiry")
		time.Sleep(long.Length + long.Bucket)
		for _, k := range scanKeys(t, c, prefix) {
			require.NotContains(t, k, ":d", "a key of the distinct count is left once the window has passed")
		}
	})
}

// opLog records the operations and script calls (their numbers of
// operations) an observer is told of.
type opLog struct {
	mu    sync.Mutex
	ops   []string
	calls []int
}

func (o *opLog) Start(ctx context.Context, op string) (context.Context, func(error)) {
	o.mu.Lock()
	o.ops = append(o.ops, op)
	o.mu.Unlock()
	return ctx, func(error) {}
}

func (o *opLog) Call(_ string, ops int, _ time.Duration, _ error) {
	o.mu.Lock()
	o.calls = append(o.calls, ops)
	o.mu.Unlock()
}

// takeCalls returns the script calls since the last take.
func (o *opLog) takeCalls() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.calls
	o.calls = nil
	return out
}

func (o *opLog) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.ops
	o.ops = nil
	return out
}

// TestObserverOncePerCall: the observer hears of each call the caller makes
// once, under its own name, whatever path it takes inside (a tiered Add or
// Allow, an event, a distinct count, AllowAll, Apply).
func TestObserverOncePerCall(t *testing.T) {
	log := &opLog{}
	w := store.Window{Length: time.Minute, Bucket: time.Second}
	s, _ := newStore(t, targets[0], w, store.WithObserver(log), store.WithTiers(store.Window{Length: time.Hour, Bucket: time.Minute}))
	ctx := ctxT(t)
	for _, c := range []struct {
		want string
		call func() error
	}{
		{"add", func() error { _, err := s.Add(ctx, "k", 1); return err }},
		{"add", func() error { _, err := s.Record(ctx, store.Event{Key: "k", Delta: 1, NoSum: true}); return err }},
		{"add", func() error { _, err := s.Record(ctx, store.Event{Key: "k", Delta: 1, ID: "e"}); return err }},
		{"allow", func() error { _, err := s.Allow(ctx, "k", 100, 1); return err }},
		{"allow", func() error {
			_, err := s.Record(ctx, store.Event{Key: "k", Delta: 1, ID: "f", Limit: 100})
			return err
		}},
		{"allow", func() error {
			_, err := store.AllowAll(ctx, 1, store.Quota{Store: s, Key: "k", Limit: 100}, store.Quota{Store: s.Over(time.Hour), Key: "k", Limit: 100})
			return err
		}},
		{"apply", func() error {
			_, err := store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: s, Key: "k", Delta: 1}}})
			return err
		}},
		{"record stat", func() error { _, err := addDistinct(ctx, s, "d", "m"); return err }},
		{"read stat", func() error { _, err := countDistinct(ctx, s, "d"); return err }},
		{"sum", func() error { _, err := s.Sum(ctx, "k"); return err }},
	} {
		require.NoError(t, c.call())
		require.Equal(t, []string{c.want}, log.take())
	}
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
