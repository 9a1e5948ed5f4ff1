package store

import (
	"context"
	"fmt"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/batch"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/internal/keyspace"
)

// The defaults of the options.
const (
	defaultPrefix  = "ws:"
	defaultFuture  = 5 * time.Second
	defaultRetries = 3
)

// Option configures New.
type Option func(*config)

type config struct {
	prefix     string
	backend    string
	now        func() time.Time
	cal        codec.Calendar
	batchOps   int
	batchCalls int
	future     time.Duration
	tiers      []Window
	retries    int
	observer   Observer
	functions  bool
	trace      string // backend.Trace, for tests
}

func defaults() config {
	return config{prefix: defaultPrefix, backend: "auto", batchOps: batch.DefaultOps, batchCalls: batch.DefaultCalls,
		future: defaultFuture, retries: defaultRetries, functions: true}
}

// WithPrefix sets the prefix of every counter's Redis key. The default is
// "ws:". An empty prefix is allowed; a prefix with a brace is
// not (New fails with ErrInvalid), since a brace would make a hash tag.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// The names WithBackend takes besides "auto", the default, which picks the
// best backend the server offers (see the package doc). Backends lists them all.
const (
	BackendTairHash   = backend.NameTairHash     // TairHash: buckets expire per field (package tairhash)
	BackendNativeHash = backend.FamilyNativeHash // the native hash: field TTL where the server has it, else plain
	BackendFieldTTL   = backend.NameFieldTTL     // the native hash with hash-field TTL (Redis >= 7.4, Valkey >= 9)
	BackendPlain      = backend.NamePlain        // the plain native hash, on any Redis or Valkey, even one with field TTL
)

// WithBackend forces a backend, or a family of backends, by name (one of the
// Backend constants), instead of "auto", the default. The counters of
// BackendPlain and BackendFieldTTL can be read by each other. New fails with
// ErrUnavailable when the server does not offer the backend, and with
// ErrInvalid for an unknown name.
func WithBackend(name string) Option { return func(c *config) { c.backend = name } }

// WithClientClock makes the store's operations use now() instead of the
// server's clock. A nil now means time.Now. Every client of a counter must
// then have clocks that agree to well within the future tolerance (see
// WithFutureTolerance): a bucket written by a client further ahead looks
// stale to one behind it, and is deleted.
func WithClientClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			now = time.Now
		}
		c.now = now
	}
}

// WithBatching sets how the store coalesces concurrent writes (every write:
// Add, Allow, Record, Apply, AllowAll): at most ops operations per script call, and at
// most calls script calls in flight before further writes queue up for the
// next call. A write is never held back on a timer: one that finds fewer than
// calls in flight is sent at once. The defaults are 64 and 4; ops = 1 sends every write as its own script call.
// Each operation stays atomic on its own and fails on its own; batching
// changes only how many round trips and script calls carry them. Values below
// 1 are taken as 1.
func WithBatching(ops, calls int) Option {
	return func(c *config) { c.batchOps, c.batchCalls = max(ops, 1), max(calls, 1) }
}

// WithFutureTolerance sets how far ahead of the store's clock an event time
// may be (see Event.Time); an event within it counts in the current bucket,
// one further ahead is refused with ErrFuture. It also bounds how far ahead
// of a client's clock another client's buckets may be and still count (see
// WithClientClock). The default is 5 s; it must be
// between 0 and an hour.
func WithFutureTolerance(d time.Duration) Option { return func(c *config) { c.future = d } }

// WithTiers makes every counter of the store a multi-resolution counter: it
// keeps the store's Window and each of these windows, each at its own bucket
// length, for example 10 s buckets for 10 minutes (the store's Window), 1 min
// buckets for an hour and 1 h buckets for a day. Every write updates every
// tier in one script; Sum and Allow use the store's Window, and an Over
// view the tier that answers a span exactly. Each tier is a key of
// its own (prefix + "{" + key + "}:" + the tier's shape), in the key's slot,
// so each stays a small hash; at most 8 windows in all.
func WithTiers(windows ...Window) Option {
	return func(c *config) { c.tiers = append(c.tiers, windows...) }
}

// WithRetries sets how many times a write that carries an event id (see
// Event.ID and Batch.ID) is sent again after a connection error or a
// connection timeout, with a backoff of 10 ms doubling up to 500 ms, while its
// context lasts: such a write counts once however often it is sent. The
// default is 3; 0 turns retries off. Writes without an id
// are never sent again after a connection error, since they could count
// twice. Any write, with an id or not, is sent again after the server's
// TRYAGAIN, which says that nothing ran: a Redis Cluster slot it touches is
// being migrated, and its keys are on both nodes for now. Those resends
// wait 10 ms, doubling up to 100 ms, for as long as ctx lasts and at most 5 s
// in all (with retries on: 0 turns them off too).
func WithRetries(n int) Option { return func(c *config) { c.retries = max(n, 0) } }

func init() {
	hook.WithCalendar = func(cal codec.Calendar) any { return Option(func(c *config) { c.cal = cal }) }
	hook.WithFunctions = func(on bool) any { return Option(func(c *config) { c.functions = on }) }
	hook.WithTrace = func(tag string, general bool) any {
		return Option(func(c *config) { c.trace = backend.Trace(tag, general) })
	}
	hook.Paths = func(ctx context.Context, st any, tag string) (map[string]int64, error) {
		s := st.(*Store)
		msg, err := s.runner.Exec(ctx, s.be.Write, nil, append(s.header(), backend.OpPaths, tag)).ToMessage()
		if err != nil {
			return nil, err
		}
		v, err := msg.ToArray()
		if err != nil || len(v) < 1 {
			return nil, fmt.Errorf("paths: %v %v", msg, err)
		}
		kv := v[1:]
		out := map[string]int64{}
		for i := 0; i+1 < len(kv); i += 2 {
			p, _ := kv[i].ToString()
			n, _ := kv[i+1].AsInt64()
			out[p] = n
		}
		return out, nil
	}
	// tag is the shape tag of the counter a hook names: for an Over view
	// whose span is a tier's window, that tier's; else the first tier's.
	tag := func(s *Store) string {
		t, err := s.overTier()
		if err != nil {
			t = 0
		}
		return s.tiers[t].tag
	}
	hook.CounterKeys = func(st any, key string) ([]string, error) {
		s := st.(*Store)
		tg := tag(s)
		rk, err := s.redisKey(key, tg)
		if err != nil {
			return nil, err
		}
		return s.counterKeys(rk, tg), nil
	}
	hook.RedisKey = func(st any, key string) (string, error) {
		s := st.(*Store)
		return s.redisKey(key, tag(s))
	}
	hook.Functions = func(st any) bool { return st.(*Store).runner.Functions() }
	hook.Codec = func(st any) *codec.Codec { return st.(*Store).codec }
	hook.Client = func(st any) any { return st.(*Store).client }
	hook.WindowTag = func(w any) string { return w.(Window).tag() }
	hook.UnescapeKey = func(s string) (string, error) {
		k, err := keyspace.Unescape(s)
		if err != nil {
			return "", invalid("unescape", "", reason(err))
		}
		return k, nil
	}
}
