package tests

import (
	"math"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
)

// fits reports whether every policy admits cost at now.
func (m *multiModel) fits(now time.Time, cost int64, limits []int64) bool {
	for i, mm := range m.models {
		if cost > limits[i] || new(big.Int).Add(mm.sum(now, mm.w.Length), big.NewInt(cost)).Cmp(big.NewInt(limits[i])) > 0 {
			return false
		}
	}
	return true
}

// add answers "ok", "old" or "future", and counts the event when ok.
func (m *lateModel) add(now, e time.Time, d int64) string {
	switch {
	case e.After(now.Add(m.future)):
		return "future"
	case !e.Before(now):
		e = now
	}
	s := m.start(e)
	if s <= now.Add(-m.w.Length).UnixMilli() {
		return "old"
	}
	v := m.value(s)
	m.buckets[s] = new(big.Int).Add(v, big.NewInt(d))
	return "ok"
}

// TestApplyRules: batches that break the rules fail before anything is sent.
func TestApplyRules(t *testing.T) {
	tg := targets[0]
	s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second})
	ctx := ctxT(t)
	_, err := store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: s, Key: "a"}, {Store: s, Key: "b"}}})
	require.ErrorIs(t, err, store.ErrInvalid, "two keys, two slots")
	_, err = store.Apply(ctx, store.Batch{Ops: []store.Op{{Store: s, Key: "a"}, {Store: s, Key: "a", Kind: store.OpLimit, Limit: 5, Delta: 1}}})
	require.ErrorIs(t, err, store.ErrInvalid, "counted and limited")
	u := s.Entity("user:1")
	res, err := store.Apply(ctx, store.Batch{ID: "e", Ops: []store.Op{{Store: u, Key: "logins", Delta: 1}, {Store: u, Key: "cards", Kind: store.OpDistinct, Members: []string{"c1"}}}},
		store.Batch{Ops: []store.Op{{Store: s, Key: "other", Delta: 2}}})
	require.NoError(t, err)
	require.EqualValues(t, 1, res[0].Values[0].Sum)
	require.EqualValues(t, 1, res[0].Values[1].Sum)
	require.EqualValues(t, 2, res[1].Values[0].Sum)
}

// TestGroupOverflowWritesNothing: a batch whose last item would overflow
// (its window sum, or only its bucket) fails with ErrOverflow and leaves the
// batch's other counters, counted and quiet, and its event id, unwritten;
// so a retry after the fix counts once.
func TestGroupOverflowWritesNothing(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: 10 * time.Second, Bucket: time.Second})
		u := s.Entity("user:1")
		ctx := ctxT(t)
		t0 := time.Now().Truncate(time.Minute).Add(-2 * time.Minute)
		// "sum": the window sum is at the top. "bucket": the sum is not, the
		// current bucket is (an older bucket holds -10).
		_, err := u.At(t0).Add(ctx, "sum", math.MaxInt64)
		require.NoError(t, err)
		_, err = u.At(t0).Add(ctx, "bucket", -10)
		require.NoError(t, err)
		_, err = u.At(t0.Add(time.Second)).Add(ctx, "bucket", math.MaxInt64)
		require.NoError(t, err)
		_, err = u.At(t0.Add(time.Second)).Add(ctx, "quiet", math.MaxInt64-10)
		require.NoError(t, err)
		keys := []string{}
		for _, k := range []string{"a", "b", "quiet", "sum", "bucket"} {
			keys = append(keys, counterKeys(t, u, k)...)
		}
		first, err := hook.RedisKey(u, "a") // what the batch's id key begins with
		require.NoError(t, err)
		c := clientOf(s)
		before := dump(t, c, keys...)
		at := t0.Add(time.Second + 500*time.Millisecond)
		for _, last := range []store.Op{
			{Store: u, Key: "sum", Delta: 1},
			{Store: u, Key: "bucket", Delta: 5},
			{Store: u, Key: "quiet", NoSum: true, Delta: 11},
		} {
			ops := []store.Op{{Store: u, Key: "a", Delta: 1}, {Store: u, Key: "b", NoSum: true, Delta: 1}}
			if last.Key != "quiet" {
				ops = append(ops, store.Op{Store: u, Key: "quiet", NoSum: true, Delta: 1})
			}
			ops = append(ops, last)
			_, err := applyAt(ctx, at, store.Batch{ID: "ev-" + last.Key, Ops: ops})
			require.ErrorIs(t, err, store.ErrOverflow, "overflow of %q", last.Key)
			require.Equal(t, before, dump(t, c, keys...), "a failed batch (overflow of %q) wrote", last.Key)
			idKey := first + ":id:ev-" + last.Key
			n, err := c.Do(ctx, c.B().Exists().Key(idKey).Build()).AsInt64()
			require.NoError(t, err)
			require.Zero(t, n, "the event id of a failed batch was kept")
		}
		// Limits alone, without an id (the script's fast path for them): the
		// window sum of "edge" is 0, within its limit, but its current bucket
		// is at the top, so counting the cost overflows it. The first limit,
		// which admits too, must not be counted either.
		_, err = u.At(t0).Add(ctx, "edge", -math.MaxInt64)
		require.NoError(t, err)
		_, err = u.At(t0.Add(time.Second)).Add(ctx, "edge", math.MaxInt64)
		require.NoError(t, err)
		keys = append(keys, counterKeys(t, u, "edge")...)
		before = dump(t, c, keys...)
		_, err = store.AllowAll(ctx, 1, store.Quota{Store: u.At(at), Key: "a", Limit: 100},
			store.Quota{Store: u.At(at), Key: "edge", Limit: 100})
		require.ErrorIs(t, err, store.ErrOverflow, "overflow of a limit's bucket")
		require.Equal(t, before, dump(t, c, keys...), "a failed AllowAll wrote")
		// Counts, a limit and a distinct add without an id or event time (the
		// script's fast path for an entity's batch of features.Set.Record):
		// when a count ("sum") or a limit's bucket ("edge") overflows, nothing
		// is written, neither the other counters nor the HyperLogLog.
		cards, err := hook.RedisKey(u, "cards")
		require.NoError(t, err)
		keys = append(keys, cards+":d", cards+":d:u")
		before = dump(t, c, keys...)
		for _, last := range []store.Op{{Store: u, Key: "sum", Delta: 1}, {Store: u, Key: "edge", Kind: store.OpLimit, Limit: 100, Delta: 1}} {
			_, err = applyAt(ctx, at, store.Batch{Ops: []store.Op{{Store: u, Key: "a", Delta: 1},
				{Store: u, Key: "cards", Kind: store.OpDistinct, Members: []string{"c1"}},
				{Store: u, Key: "b", Kind: store.OpLimit, Limit: 100, Delta: 1}, last}})
			require.ErrorIs(t, err, store.ErrOverflow, "overflow of %q beside a count, a limit and a distinct add", last.Key)
			require.Equal(t, before, dump(t, c, keys...), "a failed batch without an id (overflow of %q) wrote", last.Key)
		}
	})
}

// TestMalformedOpEndsBatch: on every backend and server, an operation the
// Write script cannot parse (here a list of limits without its cost), in a
// batch after one that wrote, answers its error and ends the batch: the
// call itself succeeds, the operation before it keeps its answer and its
// write, and the one after it never runs (its keys are never made).
func TestMalformedOpEndsBatch(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ctx := ctxT(t)
		w := store.Window{Length: 10 * time.Second, Bucket: time.Second}
		s, _ := newStore(t, tg, w)
		c := clientOf(s)
		be := backend.Named(s.Detection().Backend)
		keys := append(counterKeys(t, s, "before"), counterKeys(t, s, "after")...)
		if len(keys) != 2*len(counterKeys(t, s, "before")) {
			t.Fatalf("keys %v", keys)
		}
		shape := backend.Shape(1000, 10000)
		hdr := backend.Header(backend.ServerClock, mustCodec(t, time.Second).YearStarts(time.Now()), 5000, "")
		args := append(append([]string(nil), hdr...), backend.OpAdd, shape, "5", backend.OpLimits, shape+" 5", backend.OpAdd, shape, "7")
		cmd := append([]string{"EVAL", be.Write.Source(), strconv.Itoa(len(keys))}, append(keys, args...)...)
		vals, err := c.Do(ctx, c.B().Arbitrary(cmd...).Build()).ToArray()
		require.NoError(t, err, "the call")
		require.Len(t, vals, 4, "the add's count and sum, then -1 and the malformed operation's error")
		n, _ := vals[0].AsInt64()
		sum, _ := vals[1].AsInt64()
		code, _ := vals[2].AsInt64()
		require.Equal(t, []int64{1, 5, -1}, []int64{n, sum, code})
		require.ErrorContains(t, vals[3].Error(), backend.CodeArgs)
		got, err := s.Sum(ctx, "before")
		require.NoError(t, err)
		require.Equal(t, int64(5), got, "the operation before it wrote")
		after := counterKeys(t, s, "after")
		exists, err := c.Do(ctx, c.B().Exists().Key(after...).Build()).AsInt64()
		require.NoError(t, err)
		require.Zero(t, exists, "the operation after it ran")
	})
}
