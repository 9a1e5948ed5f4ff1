// Package store keeps sliding-window counters in a Redis-compatible server and
// answers "how much in the last W?" for any key, in one round trip.
//
// A counter is one key: a hash whose fields are bucket codes (see package
// fieldcodec) and whose values are the amounts counted in each bucket. The
// window sum is the sum of the live buckets:
//
//	key "ws:login:user42"            Window{Length: 10 * time.Minute, Bucket: time.Minute}
//	field (bucket code)  value       bucket start
//	467990               2           12:50   <- stale: deleted or expired
//	467991               1           12:51   ┐
//	...                              ...     │ live: start > now - 10m
//	468000               3           13:00   ┘ <- now = 13:00:40; Sum = 1 + ... + 3
//
// Each operation runs inside a Lua script (EVALSHA, with EVAL on a cold
// server), so it is atomic and costs one round trip. Concurrent writes are
// coalesced: the writes that arrive while earlier ones are in flight go out
// together, many operations in one script call, each still atomic and
// answered on its own (see WithBatching); SumMany sends its keys the same way.
// Sums are read-only scripts (EVALSHA_RO), so replicas can serve them and
// rueidis retries them on connection errors. By default the scripts read the
// server's clock (TIME), so application servers whose clocks disagree still
// share buckets. WithClientClock and the ...At methods use a client clock
// instead.
//
// The backend is picked at New from what the server offers (see Detect and
// WithBackend); every backend gives the same sums.
package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/backend"
	"github.com/windowstore/windowstore/fieldcodec"
)

// DefaultPrefix is prepended to every counter key unless WithPrefix says otherwise.
const DefaultPrefix = "ws:"

// MaxKeyLen is the longest key (before the prefix) that the store accepts.
const MaxKeyLen = 1024

// maxExact is 2^53: limits and costs beyond it cannot be compared exactly in Lua.
const maxExact = 1 << 53

// Option configures New.
type Option func(*config)

type config struct {
	prefix     string
	backend    Backend
	now        func() time.Time
	cal        fieldcodec.Calendar
	batchOps   int
	batchCalls int
}

// WithPrefix sets the prefix of every counter's Redis key. The default is
// DefaultPrefix ("ws:"). An empty prefix is allowed.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithBackend forces a backend instead of Auto. New fails with ErrUnavailable
// when the server does not offer it.
func WithBackend(b Backend) Option { return func(c *config) { c.backend = b } }

// WithClientClock makes Add, Sum, SumMany, SumWithin and Allow use now() instead
// of the server's clock. A nil now means time.Now. Every client of a counter must
// then have clocks that agree to well within a bucket: a bucket written by a
// client that is ahead looks stale to one that is behind, and is deleted.
func WithClientClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			now = time.Now
		}
		c.now = now
	}
}

// WithBatching sets how the store coalesces concurrent writes (Add, AddNoSum,
// Allow and their ...At forms): at most ops operations per script call, and at
// most calls script calls in flight before further writes queue up for the
// next call. A write is never held back on a timer: one that finds fewer than
// calls in flight is sent at once. The defaults are DefaultBatchOps (64) and
// DefaultBatchCalls (4); ops = 1 sends every write as its own script call.
// Each operation stays atomic on its own and fails on its own; batching
// changes only how many round trips and script calls carry them. Values below
// 1 are taken as 1.
func WithBatching(ops, calls int) Option {
	return func(c *config) { c.batchOps, c.batchCalls = max(ops, 1), max(calls, 1) }
}

// WithCalendar sets where years begin, and so where field codes wrap to 0. The
// default is fieldcodec.UTC. It exists for tests (fieldcodec.Shifted); every
// client of a counter must use the same calendar.
func WithCalendar(cal fieldcodec.Calendar) Option { return func(c *config) { c.cal = cal } }

// Store keeps window counters of one Window shape in one server (or cluster).
//
// The zero value is not usable; create a Store with New. A Store is safe for
// concurrent use by many goroutines; it holds no connection of its own, only the
// caller's client.
type Store struct {
	client rueidis.Client
	win    Window
	codec  *fieldcodec.Codec
	be     *backend.Backend
	det    Detection
	prefix string
	now    func() time.Time // nil: the server's clock
	bucket int64            // ms
	winMs  int64            // ms
	entity string           // the hash tag of an Entity view
	tagged bool
	argc   *backend.ArgsCache
	writes *batcher
	reads  *batcher
}

// New returns a Store for counters of window w, kept through the caller's
// client. It checks w, then detects the server's backend in one round trip
// (see Detect). The client may be a single-node, sentinel or cluster client.
func New(ctx context.Context, client rueidis.Client, w Window, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalid)
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	cfg := config{prefix: DefaultPrefix, backend: Auto, batchOps: DefaultBatchOps, batchCalls: DefaultBatchCalls}
	for _, o := range opts {
		o(&cfg)
	}
	codec, err := fieldcodec.New(w.Bucket, cfg.cal)
	if err != nil {
		return nil, fmt.Errorf("store: %w: %w", ErrInvalid, err)
	}
	det, err := Detect(ctx, client)
	if err != nil {
		return nil, err
	}
	be, err := det.pick(cfg.backend)
	if err != nil {
		return nil, err
	}
	return &Store{
		client: client, win: w, codec: codec, be: be, det: det,
		prefix: cfg.prefix, now: cfg.now, argc: &backend.ArgsCache{},
		bucket: w.Bucket.Milliseconds(), winMs: w.Length.Milliseconds(),
		writes: newBatcher(client, be.Write, cfg.batchOps, cfg.batchCalls),
		reads:  newBatcher(client, be.Sum, cfg.batchOps, cfg.batchCalls),
	}, nil
}

// Window returns the store's window.
func (s *Store) Window() Window { return s.win }

// Detection returns what New detected and the backend it picked.
func (s *Store) Detection() Detection { return s.det }

// Codec returns the field codec of the store's buckets.
func (s *Store) Codec() *fieldcodec.Codec { return s.codec }

// CheckKey reports whether the store accepts key: it must not be empty nor
// longer than MaxKeyLen bytes. Its errors wrap ErrInvalid.
func CheckKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: key of %d bytes is longer than %d", ErrInvalid, len(key), MaxKeyLen)
	}
	return nil
}

// RedisKey returns the Redis key that holds the counter key: the prefix and
// the key, escaped (see Entity and the rules in keys.go). It fails, wrapping
// ErrInvalid, for a key that CheckKey refuses.
func (s *Store) RedisKey(key string) (string, error) { return s.redisKey(key) }

// header builds ARGV 1..9 of a script for the instant at (client clock), or
// for the server clock when at is nil.
func (s *Store) header(at *time.Time, lookback int64) []string {
	clock, ref := backend.ServerClock, time.Now()
	if at != nil {
		clock, ref = backend.ClientClock(at.UnixMilli()), *at
	} else if s.now != nil {
		ref = s.now()
		clock = backend.ClientClock(ref.UnixMilli())
	}
	return s.argc.Header(clock, s.bucket, s.winMs, lookback, s.codec.YearStarts(ref))
}

// write runs one write operation through the batcher.
func (s *Store) write(ctx context.Context, at *time.Time, rk string, args ...string) (rueidis.RedisMessage, error) {
	return s.writes.do(ctx, rk, s.header(at, s.winMs), args...)
}

// Add adds delta (any int64, negative allowed) to the current bucket of key
// and returns the new window sum. A new key is created; the key expires on its
// own once its newest bucket has left the window.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	return s.add(ctx, nil, key, delta)
}

// AddAt is Add at instant t on the client's clock.
func (s *Store) AddAt(ctx context.Context, t time.Time, key string, delta int64) (int64, error) {
	return s.add(ctx, &t, key, delta)
}

func (s *Store) add(ctx context.Context, at *time.Time, key string, delta int64) (int64, error) {
	rk, err := s.RedisKey(key)
	if err != nil {
		return 0, fmt.Errorf("store: add: %w", err)
	}
	msg, err := s.write(ctx, at, rk, backend.OpAdd, strconv.FormatInt(delta, 10))
	if err != nil {
		return 0, wrap("add", key, err)
	}
	n, err := sumMessage(msg)
	return n, wrap("add", key, err)
}

// AddNoSum adds delta to the current bucket of key like Add, but does not
// return the sum. On the field-TTL and TairHash backends it does not read the
// counter either: the cheapest write there. It then does not check the other
// fields of the key (a hash that is not a counter gets a bucket field; another
// Redis type is still refused with ErrWrongType), nor the window sum's int64
// range (each bucket's is checked). On the plain hash it does what Add does
// (the running total must stay exact), and saves only the reply.
func (s *Store) AddNoSum(ctx context.Context, key string, delta int64) error {
	return s.addNoSum(ctx, nil, key, delta)
}

// AddNoSumAt is AddNoSum at instant t on the client's clock.
func (s *Store) AddNoSumAt(ctx context.Context, t time.Time, key string, delta int64) error {
	return s.addNoSum(ctx, &t, key, delta)
}

func (s *Store) addNoSum(ctx context.Context, at *time.Time, key string, delta int64) error {
	rk, err := s.RedisKey(key)
	if err != nil {
		return fmt.Errorf("store: add: %w", err)
	}
	_, err = s.write(ctx, at, rk, backend.OpAddNoSum, strconv.FormatInt(delta, 10))
	return wrap("add", key, err)
}

// Sum returns the window sum of key; 0 for a key that does not exist. It is a
// read-only script: it writes nothing (stale buckets are left to the next
// write), so a replica can serve it. Being read-only, rueidis retries it on
// connection errors until ctx ends: give it a deadline.
func (s *Store) Sum(ctx context.Context, key string) (int64, error) {
	return s.sum(ctx, nil, key, s.winMs)
}

// SumAt is Sum at instant t on the client's clock.
func (s *Store) SumAt(ctx context.Context, t time.Time, key string) (int64, error) {
	return s.sum(ctx, &t, key, s.winMs)
}

// SumWithin returns the sum of key over the last lookback instead of the whole
// window: the buckets that start after now - lookback. The lookback must be a
// multiple of the bucket, from one bucket up to the window length.
func (s *Store) SumWithin(ctx context.Context, key string, lookback time.Duration) (int64, error) {
	lb, err := s.lookback(lookback)
	if err != nil {
		return 0, err
	}
	return s.sum(ctx, nil, key, lb)
}

// SumWithinAt is SumWithin at instant t on the client's clock.
func (s *Store) SumWithinAt(ctx context.Context, t time.Time, key string, lookback time.Duration) (int64, error) {
	lb, err := s.lookback(lookback)
	if err != nil {
		return 0, err
	}
	return s.sum(ctx, &t, key, lb)
}

func (s *Store) lookback(d time.Duration) (int64, error) {
	if d < s.win.Bucket || d > s.win.Length || d%s.win.Bucket != 0 {
		return 0, fmt.Errorf("store: sum within: %w: lookback %v is not a multiple of the bucket %v between %v and %v",
			ErrInvalid, d, s.win.Bucket, s.win.Bucket, s.win.Length)
	}
	return d.Milliseconds(), nil
}

func (s *Store) sum(ctx context.Context, at *time.Time, key string, lookback int64) (int64, error) {
	rk, err := s.RedisKey(key)
	if err != nil {
		return 0, fmt.Errorf("store: sum: %w", err)
	}
	msg, err := s.reads.do(ctx, rk, s.header(at, lookback))
	if err != nil {
		return 0, wrap("sum", key, err)
	}
	n, err := sumMessage(msg)
	return n, wrap("sum", key, err)
}

// SumMany returns the window sums of many keys, in the order given, in one
// round trip: one read-only script call per DefaultBatchOps keys (see
// WithBatching), all pipelined; on a cluster, per slot, in parallel per node. If some
// keys fail, the others' sums are still returned and the error is a
// *ManyError that says which keys failed; errors.Is sees each key's error.
func (s *Store) SumMany(ctx context.Context, keys []string) ([]int64, error) {
	return s.sumMany(ctx, nil, keys)
}

// SumManyAt is SumMany at instant t on the client's clock.
func (s *Store) SumManyAt(ctx context.Context, t time.Time, keys []string) ([]int64, error) {
	return s.sumMany(ctx, &t, keys)
}

// ManyError is the error of SumMany when some keys fail.
type ManyError struct {
	// Errs has one entry per key given to SumMany: nil where the key's sum was
	// read, else why not.
	Errs []error
}

func (e *ManyError) Error() string {
	var msgs []string
	for _, err := range e.Errs {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	return fmt.Sprintf("store: %d of %d keys failed: %s", len(msgs), len(e.Errs), strings.Join(msgs, "; "))
}

// Unwrap returns the keys' errors, so that errors.Is and errors.As see them.
func (e *ManyError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

func (s *Store) sumMany(ctx context.Context, at *time.Time, keys []string) ([]int64, error) {
	out := make([]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rks := make([]string, 0, len(keys))
	idx := make([]int, 0, len(keys))
	errs := make([]error, len(keys))
	failed := false
	for i, k := range keys {
		rk, err := s.RedisKey(k)
		if err != nil {
			errs[i], failed = fmt.Errorf("store: sum %q: %w", k, err), true
			continue
		}
		rks = append(rks, rk)
		idx = append(idx, i)
	}
	if len(rks) > 0 {
		for j, o := range s.reads.many(ctx, rks, s.header(at, s.winMs)) {
			err := o.err
			if err == nil {
				out[idx[j]], err = sumMessage(o.res)
			}
			if err != nil {
				errs[idx[j]], failed = wrap("sum", keys[idx[j]], err), true
			}
		}
	}
	if failed {
		return out, &ManyError{Errs: errs}
	}
	return out, nil
}

// sumMessage reads a sum: an integer, or, when the sum is beyond what Lua's
// doubles hold exactly, its exact decimal string.
func sumMessage(msg rueidis.RedisMessage) (int64, error) {
	if n, err := msg.AsInt64(); err == nil {
		return n, nil
	}
	s, err := msg.ToString()
	if err != nil {
		return 0, fmt.Errorf("store: unexpected reply %v", msg)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("store: unexpected reply %q: %w", s, err)
	}
	return n, nil
}

// Result is the decision of Allow.
//
// Worked example: a limit of 10 logins per Window{10 * time.Minute, time.Minute},
// with 9 already counted, 4 of them in the oldest live bucket, which leaves the
// window in 30 s and the newest in 9 min 50 s.
//
//	Allow(ctx, "login:42", 10, 1) -> {Allowed: true, Limit: 10, Sum: 10, Remaining: 0,
//	                                   RetryAfter: 0, ResetAfter: 10m}
//	Allow(ctx, "login:42", 10, 1) -> {Allowed: false, Limit: 10, Sum: 10, Remaining: 0,
//	                                   RetryAfter: 30s, ResetAfter: 10m}
//
// (The first call counted into the current bucket, which has a full 10 minutes
// to live; the second is refused until the oldest bucket's 4 have left.)
type Result struct {
	// Allowed reports whether the cost was counted. In the example: true, then false.
	Allowed bool
	// Limit is the limit the decision was made against: 10.
	Limit int64
	// Sum is the window sum after the decision: it includes the cost when
	// allowed. In the example 10, then still 10.
	Sum int64
	// Remaining is Limit - Sum, never below 0: how much more cost fits now. 0, then 0.
	Remaining int64
	// RetryAfter is 0 when allowed. When refused, it is the time until enough
	// buckets have left the window for the same cost to fit, if nothing else is
	// counted meanwhile: 30s in the example. It is never more than the window.
	// It is -1 when the cost can never fit, because it is larger than the limit.
	RetryAfter time.Duration
	// ResetAfter is the time until every bucket counted now has left the window,
	// when the sum returns to 0 if nothing else is counted: 10m in the example.
	ResetAfter time.Duration
}

// Allow counts cost into key only if the window sum stays at or under limit,
// atomically: of many concurrent calls, exactly as many are allowed as fit. A
// refused call counts nothing. A cost of 0 only asks whether sum <= limit.
// Limit and cost must be between 0 and 2^53.
func (s *Store) Allow(ctx context.Context, key string, limit, cost int64) (Result, error) {
	return s.allow(ctx, nil, key, limit, cost)
}

// AllowAt is Allow at instant t on the client's clock.
func (s *Store) AllowAt(ctx context.Context, t time.Time, key string, limit, cost int64) (Result, error) {
	return s.allow(ctx, &t, key, limit, cost)
}

func (s *Store) allow(ctx context.Context, at *time.Time, key string, limit, cost int64) (Result, error) {
	if limit < 0 || limit > maxExact || cost < 0 || cost > maxExact {
		return Result{}, fmt.Errorf("store: allow %q: %w: limit %d and cost %d must be within [0, 2^53]", key, ErrInvalid, limit, cost)
	}
	rk, err := s.RedisKey(key)
	if err != nil {
		return Result{}, fmt.Errorf("store: allow: %w", err)
	}
	msg, err := s.write(ctx, at, rk, backend.OpAllow, strconv.FormatInt(limit, 10), strconv.FormatInt(cost, 10))
	var v []int64
	if err == nil {
		v, err = msg.AsIntSlice()
	}
	if err == nil && len(v) != 4 {
		err = fmt.Errorf("store: unexpected allow reply %v", v)
	}
	if err != nil {
		return Result{}, wrap("allow", key, err)
	}
	r := Result{
		Allowed:    v[0] == 1,
		Limit:      limit,
		Sum:        v[1],
		Remaining:  max(0, limit-v[1]),
		RetryAfter: time.Duration(v[2]) * time.Millisecond,
		ResetAfter: time.Duration(v[3]) * time.Millisecond,
	}
	if v[2] < 0 {
		r.RetryAfter = -1
	}
	return r, nil
}

// Snapshot is what Inspect saw of one counter.
type Snapshot struct {
	Key      string        // the counter key, as given
	RedisKey string        // the Redis key that holds it
	Backend  string        // the backend's name
	Now      time.Time     // the instant the snapshot was taken (the script's clock)
	KeyTTL   time.Duration // the key's remaining life; -1: no expiry; -2: no key
	Buckets  []Bucket      // every bucket field of the key, live or not, oldest first
	// Total and Mark are the plain hash's running total (field "t") and the
	// start of the oldest bucket it covers (field "m", Unix ms), as stored:
	// the total is not yet swept of the buckets that left the window since
	// Mark. Both are empty on other backends, and before a counter's first
	// write.
	Total, Mark string
}

// Bucket is one field of a counter.
type Bucket struct {
	Field string        // the field name: the bucket's code
	Start time.Time     // when the bucket starts; zero if Field is not a code
	Value int64         // the amount counted in it
	TTL   time.Duration // the field's remaining life as the server keeps it; -1: none
	Live  bool          // whether the bucket is inside the window now
}

// Inspect returns every field of key as the server holds it, for operators. It
// is read-only (EVALSHA_RO): it deletes nothing, not even stale buckets.
func (s *Store) Inspect(ctx context.Context, key string) (Snapshot, error) {
	rk, err := s.RedisKey(key)
	if err != nil {
		return Snapshot{}, fmt.Errorf("store: inspect: %w", err)
	}
	snap := Snapshot{Key: key, RedisKey: rk, Backend: s.be.Name}
	vals, err := s.be.Inspect.Exec(ctx, s.client, rk, s.header(nil, s.winMs)).ToArray()
	if err != nil {
		return snap, wrap("inspect", key, err)
	}
	if len(vals) < 2 || (len(vals)-2)%3 != 0 {
		return snap, fmt.Errorf("store: inspect %q: unexpected reply of %d elements", key, len(vals))
	}
	now, _ := vals[0].AsInt64()
	pttl, _ := vals[1].AsInt64()
	snap.Now = time.UnixMilli(now)
	snap.KeyTTL = ttl(pttl)
	live, err := s.codec.Live(snap.Now, s.win.Length)
	if err != nil {
		return snap, err
	}
	for i := 2; i+2 < len(vals); i += 3 {
		var b Bucket
		b.Field, _ = vals[i].ToString()
		v, _ := vals[i+1].ToString()
		switch b.Field {
		case "t":
			snap.Total = v
			continue
		case "m":
			snap.Mark = v
			continue
		}
		b.Value, _ = strconv.ParseInt(v, 10, 64)
		t, _ := vals[i+2].AsInt64()
		b.TTL = ttl(t)
		if code, err := fieldcodec.Decode(b.Field); err == nil {
			if st, ok := live.StartOf(code); ok {
				b.Start, b.Live = time.UnixMilli(st), true
			} else if st, err := s.codec.Start(code, snap.Now); err == nil {
				b.Start = st
			}
		}
		snap.Buckets = append(snap.Buckets, b)
	}
	sortBuckets(snap.Buckets)
	return snap, nil
}

func ttl(ms int64) time.Duration {
	if ms < 0 {
		return time.Duration(ms)
	}
	return time.Duration(ms) * time.Millisecond
}

func sortBuckets(b []Bucket) {
	slices.SortStableFunc(b, func(x, y Bucket) int { return x.Start.Compare(y.Start) })
}
