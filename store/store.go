// Package store keeps sliding-window counters in a Redis-compatible server and
// answers "how much in the last W?" for any key, in one round trip.
//
// A counter is a hash whose fields are bucket codes (see package fieldcodec)
// and whose values are the amounts counted in each bucket (the plain-hash
// backend adds a small head key beside it, ":h": docs/backends.md). The
// window sum is the sum of the live buckets:
//
//	key "ws:{user42}:10m/1m"         Window{Length: 10 * time.Minute, Bucket: time.Minute}
//	field (bucket code)  value       bucket start
//	467990               2           12:50   <- stale: deleted or expired
//	467991               1           12:51   ┐
//	...                              ...     │ live: start > now - 10m
//	468000               3           13:00   ┘ <- now = 13:00:40; Sum = 1 + ... + 3
//
// Each operation runs inside a Lua script, a function of the backend's Redis
// Functions library (FCALL; EVALSHA where a server or an ACL refuses
// functions), so it is atomic and costs one round trip. Concurrent writes are
// coalesced: the writes that arrive while earlier ones are in flight go out
// together, many operations in one script call, each still atomic and
// answered on its own (see WithBatching); SumMany sends its keys the same way.
// Sums are read-only scripts (FCALL_RO, or EVALSHA_RO), so replicas can serve
// them and rueidis retries them on connection errors. By default the scripts
// read the server's clock (TIME), so application servers whose clocks disagree
// still share buckets. WithClientClock and the At view use a client clock
// instead, as AllowN(t, n) does in golang.org/x/time/rate.
//
// Sums are exact for every int64 amount, negative ones included: the scripts
// add in doubles only while the magnitudes involved stay below 2^53, and in
// exact decimal parts beyond.
//
// The backend is picked at New from what the server offers, by capability:
// TairHash (per-field expiry), else the native hash with hash-field TTL
// (Redis >= 7.4, Valkey >= 9), else the plain native hash (any Redis >= 7.0);
// see WithBackend and Store.Detection. Every backend gives the same sums.
package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/batch"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/keyspace"
)

// Store keeps window counters of one Window shape in one server (or cluster).
//
// Most callers need three methods: Add to count, Sum to read a window sum, and
// Allow to count only under a limit. Record is the general write they
// shorten: event ids (exactly once), event times (late events), no-sum
// writes, and limits together. RecordStat and ReadStat keep window
// statistics (max, min, average, first and last seen, recent values,
// distinct counts); SumMany and ReadStatMany read many keys in one round
// trip; Inspect shows a counter's
// buckets to an operator. Four views change what the
// methods act on, and combine: At (a client-clock instant), Over (a shorter
// span, or another tier of WithTiers), Entity (an entity's counters in one
// cluster slot) and Sub (a named counter beside the key's own).
//
// The zero value is not usable; create a Store with New. A Store is safe for
// concurrent use by many goroutines; it holds no connection of its own, only the
// caller's client.
type Store struct {
	client   rueidis.Client
	runner   *backend.Runner // runs the backend's scripts: as functions, or EVALSHA
	win      Window
	codec    *codec.Codec
	be       *backend.Backend
	det      Detection
	space    keyspace.Space
	sub      string           // ":name" of a Sub view
	tag      string           // the window's shape in keys: "10m/1m"
	shape    string           // the window's shape as a script argument: "60000:600000"
	now      func() time.Time // nil: the server's clock
	bucketMs int64
	winMs    int64
	futureMs int64
	tiers    []tier // the store's Window first, then WithTiers's
	retries  int
	obs      Observer
	hdr      *backend.HeaderCache
	writes   *batch.Batcher
	reads    *batch.Batcher
	at       *time.Time    // an At view's instant; nil: the store's clock
	over     time.Duration // an Over view's span; 0: the Window
	trace    string        // the scripts' trace, for tests (backend.Trace); "" in use
}

// tier is one window of a store's counters, as the keys and scripts name it.
type tier struct {
	win             Window
	tag             string // in keys: "10m/1m"
	shape           string // in scripts: "60000:600000"
	bucketMs, winMs int64
}

func newTier(w Window) tier {
	b, l := w.Bucket.Milliseconds(), w.Length.Milliseconds()
	return tier{win: w, tag: w.tag(), shape: backend.Shape(b, l), bucketMs: b, winMs: l}
}

// New returns a Store for counters of window w, kept through the caller's
// client. It checks w, then detects the server's backend in one round trip
// (see Detection). The client may be a single-node, sentinel or cluster
// client.
func New(ctx context.Context, client rueidis.Client, w Window, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, invalid("new", "", "nil client")
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	space, err := keyspace.New(cfg.prefix)
	if err != nil {
		return nil, invalid("new", "", reason(err))
	}
	if cfg.future < 0 || cfg.future > time.Hour || cfg.future%time.Millisecond != 0 {
		return nil, invalid("new", "", "future tolerance "+cfg.future.String()+" is not whole milliseconds between 0 and 1h")
	}
	codec, err := codec.New(w.Bucket, cfg.cal)
	if err != nil {
		return nil, invalid("new", "", err.Error())
	}
	det, err := detect(ctx, client)
	if err != nil {
		return nil, err
	}
	be, err := det.pick(cfg.backend)
	if err != nil {
		return nil, err
	}
	tiers := []tier{newTier(w)}
	for _, tw := range cfg.tiers {
		if err := tw.Validate(); err != nil {
			return nil, invalid("new", "", "tier "+tw.String()+": "+err.(*Error).Detail)
		}
		t := newTier(tw)
		for _, o := range tiers {
			if o.tag == t.tag {
				return nil, invalid("new", "", "window "+tw.String()+" is twice among the tiers")
			}
		}
		tiers = append(tiers, t)
	}
	if len(tiers) > maxTiers {
		return nil, invalid("new", "", "at most "+strconv.Itoa(maxTiers)+" windows in all")
	}
	run := backend.NewRunner(client, cfg.functions)
	s := &Store{
		client: client, runner: run, win: w, codec: codec, be: be, det: det, space: space, now: cfg.now,
		tag: tiers[0].tag, shape: tiers[0].shape, bucketMs: tiers[0].bucketMs, winMs: tiers[0].winMs,
		futureMs: cfg.future.Milliseconds(), tiers: tiers, retries: cfg.retries, obs: cfg.observer, hdr: &backend.HeaderCache{},
		trace:  cfg.trace,
		writes: batch.New(client, run, be.Write, "write", cfg.observer, cfg.batchOps, cfg.batchCalls).Flatten(),
		reads:  batch.New(client, run, be.Sum, "sum", cfg.observer, cfg.batchOps, cfg.batchCalls),
	}
	s.writes.Runs, s.reads.Runs = true, true // the scripts read a run of equal operations' arguments once
	return s, nil
}

// Window returns the store's window; for an Over view whose span is a tier's
// window, that tier's.
func (s *Store) Window() Window {
	if t, err := s.overTier(); err == nil {
		return s.tiers[t].win
	}
	return s.win
}

// Detection returns what New detected and the backend it picked.
func (s *Store) Detection() Detection { return s.det }

// header builds the ARGV header of a script: for an At view's instant
// (client clock), else for the store's clock.
func (s *Store) header() []string {
	clock, ref := backend.ServerClock, time.Now()
	if s.at != nil {
		clock, ref = backend.ClientClock(s.at.UnixMilli()), *s.at
	} else if s.now != nil {
		ref = s.now()
		clock = backend.ClientClock(ref.UnixMilli())
	}
	return s.hdr.Get(clock, s.codec.YearStarts(ref), s.futureMs, s.trace)
}

// Add adds delta (any int64, negative allowed) to the current bucket of key
// and returns the new window sum. A new key is created; the key expires on its
// own once its newest bucket has left the window.
func (s *Store) Add(ctx context.Context, key string, delta int64) (n int64, err error) {
	ctx, end := s.start(ctx, "add")
	defer func() { end(err) }()
	return s.add(ctx, key, delta)
}

func (s *Store) add(ctx context.Context, key string, delta int64) (int64, error) {
	if len(s.tiers) > 1 {
		a, err := s.addEvent(ctx, Event{Key: key, Delta: delta}, OpCount)
		return a.Sum, rename(err, "add")
	}
	rk, err := s.redisKey(key, s.tag)
	if err != nil {
		return 0, rename(err, "add")
	}
	vals, err := s.run(ctx, s.counterKeys(rk, s.tag), s.header(), false, backend.OpAdd, s.shape, strconv.FormatInt(delta, 10))
	if err != nil {
		return 0, fail("add", key, s.be.Write, err)
	}
	n, err := sumOf(one(vals))
	return n, fail("add", key, nil, err)
}

func (s *Store) addNoSum(ctx context.Context, key string, delta int64) error {
	if len(s.tiers) > 1 {
		_, err := s.addEvent(ctx, Event{Key: key, Delta: delta}, countQuiet)
		return rename(err, "add")
	}
	rk, err := s.redisKey(key, s.tag)
	if err != nil {
		return rename(err, "add")
	}
	_, err = s.run(ctx, s.counterKeys(rk, s.tag), s.header(), false, backend.OpAddNoSum, s.shape, strconv.FormatInt(delta, 10))
	return fail("add", key, s.be.Write, err)
}

// rename sets the operation of an *Error built before the operation was known.
func rename(err error, op string) error {
	if e, ok := err.(*Error); ok {
		c := *e
		c.Op = op
		return &c
	}
	return err
}

// one is the one value of a write's reply (an empty message when there are
// more or fewer: sumOf refuses it).
func one(vals []rueidis.RedisMessage) rueidis.RedisMessage {
	if len(vals) != 1 {
		return rueidis.RedisMessage{}
	}
	return vals[0]
}

// sumOf reads a sum: an integer, or, when the sum is beyond what Lua's
// doubles hold exactly, its exact decimal string.
func sumOf(msg rueidis.RedisMessage) (int64, error) {
	if n, err := msg.AsInt64(); err == nil {
		return n, nil
	}
	s, err := msg.ToString()
	if err != nil {
		return 0, errors.New("unexpected reply " + msg.String())
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.New("unexpected reply " + strconv.Quote(s))
	}
	return n, nil
}
