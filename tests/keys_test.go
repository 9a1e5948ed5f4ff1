package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
)

// counterKeys are the Redis keys that hold a store's counter key: its
// buckets' hash, then, on the plain hash, the key's head (see package
// nativehash).
func counterKeys(t testing.TB, s *store.Store, key string) []string {
	t.Helper()
	ks, err := hook.CounterKeys(s, key)
	require.NoError(t, err)
	return ks
}

// counterKey is the Redis key that holds a store's counter key's buckets.
func counterKey(t testing.TB, s *store.Store, key string) string { return counterKeys(t, s, key)[0] }

// counterLife is a counter's remaining life as Inspect reports it: the
// longest PTTL of its keys (-2 when none exists, -1 when one has no expiry).
func counterLife(t testing.TB, ctx context.Context, c rueidis.Client, s *store.Store, key string) int64 {
	t.Helper()
	life := int64(-2)
	for _, k := range counterKeys(t, s, key) {
		p, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		if p == -1 || life == -1 {
			life = -1
		} else if p > life {
			life = p
		}
	}
	return life
}

// cliCounterKeys are the Redis keys that may hold the buckets of the
// counter whose Redis key (the name its ids and distinct counts start with)
// is rk, whatever the backend: rk itself, and the plain hash's rk + ":b".
// A test that plants a key of another type where windowctl will look plants
// it at both.
func cliCounterKeys(rk string) []string { return []string{rk, rk + ":b"} }

// counterNames are the Redis keys that may hold the counter whose Redis key
// (the name its ids and distinct counts start with) is rk, whatever the
// backend: rk itself, and the plain hash's buckets' hash (rk + ":b") and
// head (rk less its shape, + "h").
func counterNames(rk string) []string {
	return append(cliCounterKeys(rk), rk[:strings.LastIndexByte(rk, ':')+1]+"h")
}
