package tests

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/engine"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// Decisions across keys: what a refusal, a replay and an undo leave.

type slowUndoKey struct{}

func init() {
	engine.BeforeUndo = func(ctx context.Context) {
		if d, ok := ctx.Value(slowUndoKey{}).(time.Duration); ok {
			time.Sleep(d)
		}
	}
}

// TestUndoTakesFromTheReservedBucket: a decision of stores on two clients
// (one script call each: a check, a reservation, an undo, as on a cluster)
// that one refuses takes the other's reservation back from the bucket it
// went to, though the undo comes in a later bucket: every bucket holds 0
// after it, on every backend.
func TestUndoTakesFromTheReservedBucket(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		srv := harness.Shared(t, tg.kind)
		w := store.Window{Length: 5 * time.Second, Bucket: 200 * time.Millisecond}
		opts := []store.Option{store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend)}
		a, err := store.New(ctxT(t), srv.Client(t), w, opts...)
		require.NoError(t, err)
		b, err := store.New(ctxT(t), srv.Client(t), w, opts...) // another client: not one script
		require.NoError(t, err)
		ctx := context.WithValue(ctxT(t), slowUndoKey{}, 450*time.Millisecond) // two buckets and more
		for i := range 3 {
			d, err := store.AllowAll(ctx, 2, store.Quota{Store: a, Key: "user", Limit: 100}, store.Quota{Store: b, Key: "ip", Limit: 1})
			require.NoError(t, err)
			require.False(t, d.Allowed, "round %d", i)
			snap, err := a.Inspect(ctxT(t), "user")
			require.NoError(t, err)
			for _, bk := range snap.Buckets {
				require.Zero(t, bk.Value, "round %d: bucket %s (%v) after the undo: %+v", i, bk.Field, bk.Start, snap.Buckets)
			}
			if tg.wantBackend == "nativehash-plain" {
				require.Equal(t, "0", snap.Meta["t"], "round %d: the running total", i)
			}
		}
	})
}

// TestReplayInRefusedDecision: an event recorded and admitted, replayed with
// an entity whose limit is full, is refused and changes no count of the
// entity that saw it: the user's limit keeps the first recording's cost, a
// limit of 8 never admits a 9th, and a replay of the first recording still
// answers its decision. On one server and on a cluster.
func TestReplayInRefusedDecision(t *testing.T) {
	run := func(t *testing.T, set *features.Set) {
		ctx := ctxT(t)
		rec := func(id, user, ip string) features.Result {
			t.Helper()
			r, err := set.Record(ctx, features.Event{ID: id, Entities: map[string]string{"user": user, "ip": ip}})
			require.NoError(t, err)
			return r
		}
		limitOf := func(entity string, kv ...string) int64 {
			t.Helper()
			r, err := set.Read(ctx, map[string]string{entity: kv[0]})
			require.NoError(t, err)
			v, ok := r.Get(entity + "_limit")
			require.True(t, ok)
			return v.Sum
		}
		for i := range 8 { // fill ip i
			require.True(t, rec("fill"+strconv.Itoa(i), "other"+strconv.Itoa(i), "i").Allowed)
		}
		require.True(t, rec("e1", "u", "j").Allowed)
		require.EqualValues(t, 1, limitOf("user", "u"))
		r := rec("e1", "u", "i") // a replay, with a full ip
		require.False(t, r.Allowed)
		require.False(t, r.Duplicate, "ip i never saw e1")
		require.EqualValues(t, 1, limitOf("user", "u"), "the replay took the first recording's cost off the user")
		require.EqualValues(t, 8, limitOf("ip", "i"))
		r = rec("e1", "u", "j") // the first recording's entities: a duplicate
		require.True(t, r.Allowed, "a replay of the first recording answers its decision")
		require.True(t, r.Duplicate)
		admitted := int64(1)
		for i := range 20 {
			if rec("n"+strconv.Itoa(i), "u", "k"+strconv.Itoa(i)).Allowed {
				admitted++
			}
		}
		require.EqualValues(t, 8, admitted, "a limit of 8 admitted %d", admitted)
		require.EqualValues(t, 8, limitOf("user", "u"))
	}
	fs := []features.Feature{
		{Name: "user_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{{Length: 70 * time.Second, Bucket: time.Second}}, Limits: []int64{8}},
		{Name: "ip_limit", Entity: "ip", Kind: features.Limit, Windows: []store.Window{{Length: 70 * time.Second, Bucket: time.Second}}, Limits: []int64{8}},
	}
	t.Run("one server", func(t *testing.T) {
		forEach(t, func(t *testing.T, tg target) {
			srv := harness.Shared(t, tg.kind)
			set, err := features.New(ctxT(t), srv.Client(t), fs, store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend))
			require.NoError(t, err)
			run(t, set)
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := harness.NewCluster(t)
		set, err := features.New(ctxT(t), cl.Client(t), fs, store.WithPrefix(harness.Prefix(t)))
		require.NoError(t, err)
		run(t, set)
	})
}
