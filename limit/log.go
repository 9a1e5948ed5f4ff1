package limit

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/errmsg"
	"github.com/windowstore/windowstore/internal/keyspace"
	"github.com/windowstore/windowstore/internal/limitlua"
	"github.com/windowstore/windowstore/store"
)

// maxLogCost is the largest cost of one Log call: the log adds one member per unit.
const maxLogCost = 1000

// NewLog returns the exact sliding log: a sorted set per key, one member per
// admitted unit of cost, scored by the server's clock in ms. It admits at most
// limit units in any window-long span of time, exactly; its memory grows with
// the admitted rate (see the table in docs/ratelimiting.md).
func NewLog(client rueidis.Client, name string, limit int64, window time.Duration, opts ...Option) (Limiter, error) {
	l, err := newRedisLimiter(client, limitlua.Log, maxLogCost, Policy{Name: name, Limit: limit, Window: window, Algorithm: "log"}, opts)
	if err != nil {
		return nil, err
	}
	l.nonce = true
	return l, nil
}

// NewFixedWindow returns a fixed-window counter: windows aligned on multiples
// of window since the Unix epoch, one small hash per key that expires when its
// window ends. Up to 2 x limit can pass in a window-long span that straddles an
// edge; RetryAfter and ResetAfter are the time to the next edge.
func NewFixedWindow(client rueidis.Client, name string, limit int64, window time.Duration, opts ...Option) (Limiter, error) {
	l, err := newRedisLimiter(client, limitlua.Fixed, maxExact, Policy{Name: name, Limit: limit, Window: window, Algorithm: "fixed-window"}, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func newRedisLimiter(client rueidis.Client, sc *backend.Script, maxCost int64, p Policy, opts []Option) (*redisLimiter, error) {
	if err := check(p.Name, p.Limit, p.Window); err != nil {
		return nil, err
	}
	return newScriptLimiter(client, sc, maxCost, p, p.Limit,
		[]string{strconv.FormatInt(p.Window.Milliseconds(), 10), strconv.FormatInt(p.Limit, 10)}, opts)
}

// newScriptLimiter is a limiter of a checked policy p on script sc, which
// takes args between the clock and the cost. Its decisions report limit.
func newScriptLimiter(client rueidis.Client, sc *backend.Script, maxCost int64, p Policy, limit int64, args []string, opts []Option) (*redisLimiter, error) {
	if client == nil {
		return nil, newError(p.Name, store.ErrInvalid, "nil client")
	}
	o := options{prefix: defaultPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	if o.degrade {
		return nil, newError(p.Name, store.ErrInvalid, "a Degrade option (WithInstances...) configures Degrade, not a limiter")
	}
	space, err := keyspace.New(o.prefix)
	if err != nil {
		return nil, newError(p.Name, store.ErrInvalid, reason(err))
	}
	return &redisLimiter{runner: backend.NewRunner(client, true), space: space, script: sc, max: maxCost, policy: p, obs: o.observer,
		suffix: ":" + p.Name, args: args, limit: limit, refusals: newRefusals(&o)}, nil
}

// redisLimiter is what Log, FixedWindow and GCRA share: a key space, a
// policy and one script whose arguments are the clock, args, the cost and,
// for the log, a nonce, and whose reply is {allowed, count, retry_ms,
// reset_ms}.
type redisLimiter struct {
	runner *backend.Runner // FCALL, or EVALSHA where functions are refused
	space  keyspace.Space
	suffix string
	policy Policy
	script *backend.Script
	max    int64    // the largest cost of one call
	args   []string // the script's arguments after the clock
	nonce  bool     // the script takes a nonce after the cost
	limit  int64    // the decisions' Limit: the policy's, or a GCRA's burst
	obs    store.Observer

	refusals refusals
}

func (l *redisLimiter) Policy() Policy { return l.policy }

func (l *redisLimiter) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	return l.run(ctx, backend.ServerClock, key, n)
}

func (l *redisLimiter) AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error) {
	return l.run(ctx, backend.ClientClock(t.UnixMilli()), key, n)
}

// refund gives back n units a GCRA limiter admitted for key (a decision
// taken back, as windowstored's across descriptors): the key's state moves
// back by n units, never past a fresh key. It answers the key's state
// after, as a decision of cost 0 would. Other limiters refuse it.
func (l *redisLimiter) refund(ctx context.Context, clock backend.Clock, key string, n int64) (store.Decision, error) {
	if l.script != limitlua.GCRA {
		return store.Decision{}, newError(l.policy.Name, store.ErrInvalid, "only a GCRA limiter gives back a cost")
	}
	if err := checkCost(l.policy.Name, key, n, l.max); err != nil {
		return store.Decision{}, err
	}
	l.refusals.forget(key)
	v, err := l.exec(ctx, clock, key, -n)
	l.refusals.forget(key) // (and keeps no refusal asked before the refund was done)
	if err != nil {
		return store.Decision{}, err
	}
	return l.decision(v), nil
}

func (l *redisLimiter) run(ctx context.Context, clock backend.Clock, key string, n int64) (_ store.Decision, err error) {
	if l.obs != nil {
		var end func(error)
		ctx, end = l.obs.Start(ctx, "allow")
		defer func() { end(err) }()
	}
	if err := checkCost(l.policy.Name, key, n, l.max); err != nil {
		return store.Decision{}, err
	}
	server := clock == backend.ServerClock
	cached, asked, ok := l.refusals.refused(ctx, server, key, n)
	if ok {
		return cached, nil
	}
	v, err := l.exec(ctx, clock, key, n)
	if err != nil {
		return store.Decision{}, err
	}
	d := l.decision(v)
	l.refusals.remember(server, key, n, asked, d)
	return d, nil
}

// decision is the script's reply {allowed, used, retry ms, reset ms} as a
// Decision.
func (l *redisLimiter) decision(v []int64) store.Decision {
	d := store.Decision{
		Policy:     l.policy.Name,
		Allowed:    v[0] == 1,
		Limit:      l.limit,
		Remaining:  max(0, l.limit-v[1]),
		RetryAfter: ms(v[2]),
		ResetAfter: ms(v[3]),
	}
	if l.script != limitlua.GCRA {
		d.Sum = v[1] // the log's live events, the fixed window's count (a GCRA's state is not a sum)
	}
	return d
}

// exec runs the script for a cost of n on key: its reply.
func (l *redisLimiter) exec(ctx context.Context, clock backend.Clock, key string, n int64) ([]int64, error) {
	rk, err := l.space.Name(key, l.suffix)
	if err != nil {
		return nil, callError(l.policy.Name, key, store.ErrInvalid, reason(err), err)
	}
	args := make([]string, 0, len(l.args)+3)
	args = append(append(append(args, clock.Arg()), l.args...), strconv.FormatInt(n, 10))
	if l.nonce {
		args = append(args, nonce())
	}
	start := time.Now()
	v, err := l.runner.Exec(ctx, l.script, []string{rk}, args).AsIntSlice()
	if l.obs != nil {
		l.obs.Call(l.policy.Algorithm, 1, time.Since(start), err)
	}
	if err == nil && len(v) != 4 {
		err = errors.New("unexpected reply")
	}
	if err != nil {
		return nil, scriptError(l.policy.Name, key, l.script, err)
	}
	return v, nil
}

// scriptError is the error of a call for key whose script failed: of the
// store's kinds where the server's error has one (WRONGTYPE:
// store.ErrWrongType, NOPERM: store.ErrNoPermission, OOM:
// store.ErrOutOfMemory).
func scriptError(policy, key string, sc *backend.Script, err error) error {
	err = sc.AsScriptError(err)
	var se *backend.ScriptError
	if errors.As(err, &se) {
		kind, detail := errmsg.Classify(se)
		if detail == "" {
			detail = se.Error()
		}
		return callError(policy, key, kind, detail, err)
	}
	return callError(policy, key, nil, err.Error(), err)
}

// reason is a keyspace error's text without its package's words.
func reason(err error) string {
	var ie *keyspace.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}

// nonce makes log members unique: 64 random bits, 11 characters.
func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:]) + ":"
}

// Refund gives back n units of key's cost to l, which NewGCRA made: Envoy's
// is_negative_hits, or a cost taken back when a later limit of the same
// request refuses. The key's state moves back by n units, never past that of
// a fresh key, and Refund answers it as an Allow of cost 0 would. It fails
// with ErrInvalid for another limiter, or for an n that Allow refuses as a
// cost (negative, or above the largest cost).
func Refund(ctx context.Context, l Limiter, key string, n int64) (store.Decision, error) {
	return RefundAt(ctx, l, time.Time{}, key, n)
}

// RefundAt is Refund at time t, as AllowAt is Allow; the zero t is the
// server's clock.
func RefundAt(ctx context.Context, l Limiter, t time.Time, key string, n int64) (store.Decision, error) {
	rl, ok := l.(*redisLimiter)
	if !ok {
		return store.Decision{}, newError("refund", store.ErrInvalid, "only a GCRA limiter gives back a cost")
	}
	clock := backend.ServerClock
	if !t.IsZero() {
		clock = backend.ClientClock(t.UnixMilli())
	}
	return rl.refund(ctx, clock, key, n)
}
