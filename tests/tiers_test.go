package tests

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
)

// TestTiers: a multi-resolution counter keeps every tier in one write, and a
// sum over a window reads that window's tier, exactly, against the model of
// each tier's buckets; and a tiered Allow counts the cost in every tier.
func TestTiers(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		ws := []store.Window{{Length: 10 * time.Minute, Bucket: 10 * time.Second}, {Length: time.Hour, Bucket: time.Minute},
			{Length: 24 * time.Hour, Bucket: time.Hour}}
		s, _ := newStore(t, tg, ws[0], store.WithTiers(ws[1:]...))
		ctx := ctxT(t)
		var models []*exactModel
		for _, w := range ws {
			c := mustCodec(t, w.Bucket)
			models = append(models, newExactModel(c, w))
		}
		rng := rand.New(rand.NewPCG(3, 3))
		at := utc("2026-02-28T20:00:00Z")
		for step := 0; step < 200; step++ {
			at = at.Add(time.Duration(rng.Int64N(int64(10 * time.Minute))))
			d := rng.Int64N(50) - 10
			got, err := s.At(at).Add(ctx, "t", d)
			require.NoError(t, err)
			for _, m := range models {
				_, ok := m.add(at, d)
				require.True(t, ok)
			}
			require.Equal(t, models[0].sum(at, ws[0].Length).Int64(), got, "step %d", step)
			for _, d := range []time.Duration{30 * time.Second, 10 * time.Minute, 30 * time.Minute, time.Hour, 7 * time.Hour, 24 * time.Hour} {
				i := map[time.Duration]int{30 * time.Second: 0, 10 * time.Minute: 0, 30 * time.Minute: 1, time.Hour: 1, 7 * time.Hour: 2, 24 * time.Hour: 2}[d]
				n, err := s.At(at).Over(d).Sum(ctx, "t")
				require.NoError(t, err)
				require.Equal(t, models[i].sum(at, d).Int64(), n, "step %d: SumOver %v", step, d)
			}
		}
		_, err := s.Over(90*time.Second).Sum(ctx, "t")
		require.NoError(t, err, "90s is 9 buckets of the 10-minute tier")
		_, err = s.Over(25*time.Hour).Sum(ctx, "t")
		require.ErrorIs(t, err, store.ErrInvalid)
		// A tiered Allow decides on the store's window and counts in every tier.
		r, err := s.At(at).Allow(ctx, "lim", 1, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		for _, d := range []time.Duration{10 * time.Minute, time.Hour, 24 * time.Hour} {
			n, err := s.At(at).Over(d).Sum(ctx, "lim")
			require.NoError(t, err)
			require.EqualValues(t, 1, n, d)
		}
		r, err = s.At(at).Allow(ctx, "lim", 1, 1)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		n, err := s.At(at).Over(24*time.Hour).Sum(ctx, "lim")
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "a refusal counted in another tier")
	})
}

// TestLateEventTiers: an event too old for the short tier still counts in
// the tiers whose window it is inside.
func TestLateEventTiers(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		s, _ := newStore(t, tg, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithTiers(store.Window{Length: time.Hour, Bucket: time.Minute}))
		ctx := ctxT(t)
		now := utc("2026-05-05T10:30:30Z")
		a, err := s.At(now).Record(ctx, store.Event{Key: "k", Delta: 4, Time: now.Add(-10 * time.Minute)})
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, a.Counted)
		require.Equal(t, []int64{0, 4}, a.Sums)
		_, err = s.At(now).Record(ctx, store.Event{Key: "k", Delta: 4, Time: now.Add(-2 * time.Hour)})
		require.ErrorIs(t, err, store.ErrTooOld)
		n, err := s.At(now).Over(time.Hour).Sum(ctx, "k")
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
	})
}

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
