// Package hook reaches into the public packages' internals for this
// repository's tests and tools, without making those internals public API.
// Package store sets the functions when it is initialized; they take and
// return interface values to avoid an import cycle (a *store.Store, a
// store.Option).
package hook

import (
	"context"

	"github.com/windowstore/windowstore/internal/codec"
)

var (
	// WithCalendar returns a store.Option that sets where years begin, so
	// that tests see field codes wrap to 0 at an instant of their choosing
	// (codec.Shifted). Every client of a counter must use the same calendar.
	WithCalendar func(cal codec.Calendar) any
	// WithFunctions returns a store.Option: true (the default) runs the
	// scripts as Redis Functions, false as EVALSHA from the start.
	WithFunctions func(on bool) any
	// WithTrace returns a store.Option: its write script counts the paths
	// its operations take under tag (see Paths), and with general takes the
	// event pipeline alone, never a backend's fast path (backend.Trace).
	WithTrace func(tag string, general bool) any
	// Paths returns the paths a *store.Store's writes took under tag, since
	// the last call ("fast", "event"), and forgets them (Redis Functions
	// only: a script run with EVALSHA keeps nothing).
	Paths func(ctx context.Context, st any, tag string) (map[string]int64, error)
	// RedisKey returns the Redis key of a *store.Store's counter key, as the
	// keys of its event ids and distinct counts begin; the keys that hold
	// the counter itself are CounterKeys.
	RedisKey func(st any, key string) (string, error)
	// CounterKeys returns every Redis key of a *store.Store's counter key,
	// as its scripts take them: the hash of its buckets, then, with a
	// backend that keeps heads (the plain hash), the key's head.
	CounterKeys func(st any, key string) ([]string, error)
	// Functions reports whether a *store.Store runs its scripts as Redis
	// Functions now.
	Functions func(st any) bool
	// Client returns a *store.Store's client (a rueidis.Client).
	Client func(st any) any
	// Codec returns a *store.Store's field codec.
	Codec func(st any) *codec.Codec
	// UnescapeKey reverses the escaping of a counter key in its Redis key.
	UnescapeKey func(s string) (string, error)
	// WindowTag returns a store.Window's shape as its counters' Redis keys
	// carry it: "10m/1m".
	WindowTag func(w any) string
)
