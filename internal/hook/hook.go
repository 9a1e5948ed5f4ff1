// Package hook reaches into the public packages' internals for this
// repository's tests and tools, without making those internals public API.
// Package store sets the functions when it is initialized; they take and
// return interface values to avoid an import cycle (a *store.Store, a
// store.Option).
package hook

import (
	"context"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
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
	// BeforeUndo, when set, is called before a cluster's (or several
	// clients') refused decision takes its reservations back, with the
	// decision's context: a test that waits there moves the undo past the
	// reservation's bucket.
	BeforeUndo func(ctx context.Context)
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
	// Backends lists every backend name store.WithBackend accepts.
	Backends func() []string
	// UnescapeKey reverses the escaping of a counter key in its Redis key.
	UnescapeKey func(s string) (string, error)
	// FirstError is the error of the first failed batch (or key) of a
	// store.ManyError, and any other error as it is: what a caller of one
	// batch reports.
	FirstError func(err error) error
	// ClassifyScript maps a script's error to the store's sentinel error and
	// the detail worth showing (set by package store), for package limit.
	ClassifyScript func(sc *backend.ScriptError) (kind error, detail string)
	// AllowAllWith is store.AllowAll of cost over policies (a []store.Policy)
	// with one more op, lead (a store.Op: a lease's Acquire), decided with
	// them all or nothing in one script call per slot. It answers the
	// policies' store.Decision and lead's store.Value (set by package
	// store).
	AllowAllWith func(ctx context.Context, cost int64, policies, lead any) (any, any, error)
	// AcquireWith takes a lease of a *limit.Concurrency on key only if the
	// limit.Limiter l admits cost, and counts cost in l only if a lease is
	// free, in one script call; it answers the limit.Lease (its ID set only
	// when taken), l's store.Decision, and ok false when l cannot be decided
	// with the lease (not a sliding window or a Multi of them, another
	// client or slot): then nothing was sent (set by package limit).
	AcquireWith func(ctx context.Context, c, l any, key string, cost int64) (lease, d any, ok bool, err error)
	// SameClient reports whether two *store.Store use one client.
	SameClient func(a, b any) bool
	// WindowTag returns a store.Window's shape as its counters' Redis keys
	// carry it: "10m/1m".
	WindowTag func(w any) string
	// NewError returns a *store.Error of another package (pkg): limit,
	// features and httplimit report their errors in the store's one type.
	NewError func(pkg, op, key string, keyed bool, kind error, detail string, cause error) error
	// LimitPolicies returns a limit.Limiter's policies, as a []limit.Policy:
	// several for a Multi, or a Degraded of one.
	LimitPolicies func(l any) any
	// LimitACL returns package limit's declared ACL rules (set by package
	// limit).
	LimitACL func() []backend.ACLRule
	// LimitScripts returns package limit's scripts (set by package limit),
	// for the Lua checks that need no server.
	LimitScripts func() []*backend.Script
	// GCRARefund gives back n units that a GCRA limiter (a limit.Limiter
	// from limit.NewGCRA) admitted for key, for windowstored's decisions
	// across descriptors, at instant at (the zero time: the server's clock,
	// as Allow), and answers the key's state after as a store.Decision (set
	// by package limit).
	GCRARefund func(ctx context.Context, l any, at time.Time, key string, n int64) (any, error)
)
