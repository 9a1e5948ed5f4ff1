package tests

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/figures"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestFeatureSetMemory measures the README's feature set (logins per user
// over a minute, an hour and a day; a per-minute login limit; distinct cards
// per device over a day) as the growth of used_memory per pair of entities on
// a fresh Redis 7.0 (plain hash), every bucket of every window written: one
// event a second over the last minute, a minute over the last hour and an
// hour over the last day, each with a card of its own.
func TestFeatureSetMemory(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxLong(t)
	minute := store.Window{Length: time.Minute, Bucket: time.Second}
	hour := store.Window{Length: time.Hour, Bucket: time.Minute}
	day := store.Window{Length: 24 * time.Hour, Bucket: time.Hour}
	set, err := features.New(ctx, c, []features.Feature{
		{Name: "logins", Entity: "user", Kind: features.Count, Windows: []store.Window{minute, hour, day}},
		{Name: "login_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{minute}, Limits: []int64{1 << 40}},
		{Name: "cards", Entity: "device", Kind: features.Distinct, Of: "card", Windows: []store.Window{day}},
	}, store.WithPrefix(harness.Prefix(t)), store.WithBackend("nativehash-plain"))
	require.NoError(t, err)
	at := threeWindowsFull() // (the logins' three windows full)
	fill := func(k int) error {
		id := strconv.Itoa(k)
		for i, ts := range at {
			res, err := set.At(ts).Record(ctx, features.Event{Entities: map[string]string{
				"user": "u" + id, "device": "d" + id, "card": id + ":" + strconv.Itoa(i)}})
			if err != nil {
				return err
			}
			if !res.Allowed {
				return errors.New("refused")
			}
		}
		return nil
	}
	require.NoError(t, fill(-1)) // the scripts in the cache, the connections made
	before := memoryInfo(t, c)
	const pairs = 500
	parallelKeys(t, pairs, fill)
	after := memoryInfo(t, c)
	per := float64(dataGrowth(t, before, after)) / pairs
	t.Logf("the README's feature set, every bucket written: %.0f bytes per user and device", per)
	res, err := set.At(at[len(at)-1]).Read(ctx, map[string]string{"user": "u0", "device": "d0"})
	require.NoError(t, err)
	logins, _ := res.Get("logins")
	require.Equal(t, []int64{60, 119, 142}, logins.Sums)
	figures.Check(t, "features/readme/bytes", figures.Figure{Value: math.Round(per), Unit: "B", Server: srv.Version(t),
		How: "growth of used_memory per user and device on a fresh server, every bucket of every window written"}, usedMemoryTolerance)
}
