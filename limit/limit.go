// Package limit is rate limiting on top of windowstore: one Limiter
// interface, five algorithms behind it, each atomic in one round trip on the
// server's clock.
//
//   - NewSlidingWindow: the bucketed window of package store. Memory is one hash
//     field per bucket, whatever the rate; precision is one bucket.
//   - NewLog: the common exact sliding log on a sorted set, done right:
//     unique members (a random nonce per call, so two requests in one
//     millisecond never collide), refused requests never recorded, the check
//     and the add in one script, and a key that expires with its newest event.
//     Exact to the millisecond, but memory grows with every admitted event.
//   - NewFixedWindow: a counter per aligned window, incremented and given its
//     expiry in one script. Cheapest, but up to twice the limit can pass
//     around a window edge.
//   - NewGCRA: the generic cell rate algorithm, a token bucket kept as one
//     timestamp per key: a smooth rate with bursts up to a burst size,
//     exact to the ms, in constant memory.
//   - NewWindows: several sliding windows of one key ("5 a minute, 100 an
//     hour") kept as one counter: a running total, and per window a mark,
//     so an event reads and writes one total whatever the number of windows.
//
// Every limiter remembers its refusals in process (RefusalCache, on by
// default) and answers the same cost refused again, until its RetryAfter,
// without a server call: exactly, since costs are at least 0.
//
// Two wrappers change how a limiter enforces: Shadow watches without
// refusing, and Degrade decides in process, on an instance's share of the
// limit, while the server fails, behind a circuit breaker.
//
// Every limiter answers a store.Decision, the one decision type of windowstore:
// Allowed, Limit, Remaining, RetryAfter (exact for Log, SlidingWindow and GCRA:
// a retry at that time succeeds, one before it fails) and ResetAfter. For
// example, a Log of 3 per minute for key "ip:1.2.3.4", with requests admitted
// at 12:00:00, 12:00:10 and 12:00:20, asked again at 12:00:30, answers
//
//	{Allowed: false, Limit: 3, Remaining: 0, RetryAfter: 30s, ResetAfter: 50s, Policy: "perminute"}
//
// (the first event leaves the window at 12:01:00, so a retry then succeeds;
// the last leaves at 12:01:20, when all 3 are free again). The trade-offs,
// measured, are in docs/ratelimiting.md.
//
// Most callers need one constructor (NewSlidingWindow, NewWindows for several
// windows of one key, or NewGCRA for a smooth rate) and Limiter.Allow;
// Combine for sliding windows whose counters are also a store's, Degrade to
// survive a server outage, Shadow to try a limit before enforcing it.
//
// Keys come from user input and are escaped as the store's are: no hash tag
// of the caller's choosing, and the key's own hash tag, so that every
// limiter's state for one key lives in one Redis Cluster slot. A limiter keeps key's state under its policy name, so
// several limiters can share a prefix and a key:
//
//	NewLog, NewFixedWindow, NewGCRA  prefix + "{" + escape(key) + "}:" + name
//	NewWindows                       prefix + "{" + escape(key) + "}:" + name + ":" + shapes, then ":2"...
//	NewSlidingWindow                 the store's prefix + "{" + escape(key) + "}:" + name + ":" + shape
//
// Limiters are safe for concurrent use. Their zero values are not usable;
// create them with the New functions.
package limit

import (
	"context"
	"strconv"
	"time"

	"github.com/windowstore/windowstore/internal/keyspace"
	"github.com/windowstore/windowstore/store"
)

// defaultPrefix is the key prefix of Log, FixedWindow and GCRA limiters unless
// WithPrefix says otherwise.
const defaultPrefix = "rl:"

// Policy describes a limiter, for the RateLimit-Policy header and for logs.
type Policy struct {
	// Name identifies the policy: a Structured Fields token, such as "perminute".
	Name string
	// Limit is the most cost admitted per Window.
	Limit int64
	// Window is the length of the window.
	Window time.Duration
	// Algorithm is "sliding-window", "log", "fixed-window" or "gcra".
	Algorithm string
	// Burst is, for a GCRA, the most cost admitted at once (a GCRA's Limit
	// and Window are its rate and period); 0 for the other algorithms.
	Burst int64
}

// A Limiter admits or refuses requests per key. Allow is the method to call;
// AllowAt decides at an instant of the caller's (backfills, replays, tests),
// and Policy describes the limiter for headers and logs. Every constructor of
// this package returns one (NewSlidingWindow, NewWindows, NewLog,
// NewFixedWindow, NewGCRA, Combine, Shadow), and every one is safe for
// concurrent use. A nil Limiter is not usable.
//
// A refusal counts nothing, and its Decision says when to retry:
//
//	d, err := perMinute.Allow(ctx, "ip:1.2.3.4", 1)
//	if err == nil && !d.Allowed {
//		// d.RetryAfter: the same cost fits then, and not a millisecond before.
//	}
type Limiter interface {
	// Policy returns the limiter's policy.
	Policy() Policy
	// Allow admits n units of cost for key now, on the server's clock, if they
	// fit under the limit, and counts them; or refuses them and counts nothing.
	Allow(ctx context.Context, key string, n int64) (store.Decision, error)
	// AllowAt is Allow at instant t on the client's clock.
	AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error)
}

// Option configures a limiter (WithPrefix, WithObserver, WithRefusalCache) or Degrade
// (WithInstances, WithFailures, WithCooldown, WithLocalKeys,
// WithOnStateChange). Each refuses the other's options with
// store.ErrInvalid.
type Option func(*options)

type options struct {
	prefix   string
	observer store.Observer
	limiter  bool // a limiter's option was given
	deg      degradeOptions
	degrade  bool // a Degrade option was given

	refusals    *RefusalCache // WithRefusalCache's
	refusalsSet bool
}

// WithPrefix sets the key prefix of a Log, FixedWindow, GCRA or Windows
// limiter (the default is "rl:"). A SlidingWindow keeps its counters under its
// store's prefix and refuses this option.
func WithPrefix(p string) Option { return func(o *options) { o.prefix, o.limiter = p, true } }

// WithObserver has a Log, FixedWindow, GCRA or Windows limiter tell o of
// every decision (operation "allow") and script call (script "log",
// "fixed-window", "gcra" or "windows"), as a store tells its observer
// (store.WithObserver). A SlidingWindow's store tells its own.
func WithObserver(o store.Observer) Option {
	return func(opts *options) { opts.observer, opts.limiter = o, true }
}

// maxExact (2^53) bounds limits and costs: the scripts compare in doubles.
const maxExact = 1 << 53

func check(name string, limit int64, window time.Duration) error {
	if err := checkName(name); err != nil {
		return err
	}
	if limit < 0 || limit > maxExact {
		return newError(name, store.ErrInvalid, "limit "+strconv.FormatInt(limit, 10)+" is not within [0, 2^53]")
	}
	if window < time.Millisecond || window%time.Millisecond != 0 {
		return newError(name, store.ErrInvalid, "window "+window.String()+" is not a positive whole number of milliseconds")
	}
	return nil
}

func checkName(name string) error {
	if !keyspace.Token(name) {
		return newError(name, store.ErrInvalid, "policy name "+strconv.Quote(name)+
			" is not a token ("+keyspace.TokenForm+")")
	}
	return nil
}

// newError is an error of a constructor: it has a policy but no key.
func newError(policy string, kind error, detail string) error {
	return &store.Error{Package: "limit", Op: policy, Kind: kind, Detail: detail}
}

// callError is an error of a call for key.
func callError(policy, key string, kind error, detail string, cause error) error {
	return &store.Error{Package: "limit", Op: policy, Key: key, Kind: kind, Detail: detail, Err: cause}
}

func checkCost(policy, key string, n, max int64) error {
	if n < 0 || n > max {
		return callError(policy, key, store.ErrInvalid, "cost "+strconv.FormatInt(n, 10)+
			" is not within [0, "+strconv.FormatInt(max, 10)+"]", nil)
	}
	return nil
}

func ms(d int64) time.Duration {
	if d < 0 {
		return -1
	}
	return time.Duration(d) * time.Millisecond
}
