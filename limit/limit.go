// Package limit is rate limiting on top of windowstore: one Limiter
// interface, three algorithms behind it, each atomic in one round trip on the
// server's clock.
//
//   - SlidingWindow: the bucketed window of package store. Memory is one hash
//     field per bucket, whatever the rate; precision is one bucket.
//   - Log: the seed documents' exact sliding log on a sorted set, done right:
//     unique members (a random nonce per call, so two requests in one
//     millisecond never collide), refused requests never recorded, the check
//     and the add in one script, and a key that expires with its newest event.
//     Exact to the millisecond, but memory grows with every admitted event.
//   - FixedWindow: a counter per aligned window, incremented and given its
//     expiry in one script. Cheapest, but up to twice the limit can pass
//     around a window edge.
//
// Every Decision reports Allowed, Limit, Remaining, RetryAfter (exact for Log
// and SlidingWindow: a retry at that time succeeds, one before it fails) and
// ResetAfter. The trade-offs, measured, are in the README.
//
// Every limiter keeps key's state under its own policy name (name + ":" + key),
// so several limiters can share a prefix, a store and a key.
//
// Limiters are safe for concurrent use. Their zero values are not usable;
// create them with the New functions.
package limit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalid reports a limit, window, cost or name that a limiter refuses.
var ErrInvalid = errors.New("limit: invalid argument")

// Decision is the outcome of one Allow call.
//
// Worked example: a Log of 3 per minute for key "ip:1.2.3.4", with requests
// admitted at 12:00:00, 12:00:10 and 12:00:20, asked again at 12:00:30:
//
//	Decision{Allowed: false, Limit: 3, Remaining: 0, RetryAfter: 30s, ResetAfter: 50s}
//
// The first event leaves the window at 12:01:00, so a retry then succeeds; the
// last leaves at 12:01:20, when all 3 are free again.
type Decision struct {
	// Allowed reports whether the request was admitted and counted. Refused
	// requests are not counted. In the example: false.
	Allowed bool
	// Limit is the policy's limit: 3.
	Limit int64
	// Remaining is how much cost the key may still spend now: 0. After an
	// admitted request it already accounts for that request.
	Remaining int64
	// RetryAfter is 0 when allowed; when refused, how long until the same
	// request would be admitted if nothing else were counted: 30s. It is -1 when
	// the cost exceeds the limit and never fits.
	RetryAfter time.Duration
	// ResetAfter is how long until the key's whole limit is free again if
	// nothing else is counted: 50s. 0 when nothing is counted.
	ResetAfter time.Duration
}

// Policy describes a limiter, for the RateLimit-Policy header and for logs.
type Policy struct {
	// Name identifies the policy: a Structured Fields token, such as "perminute".
	Name string
	// Limit is the most cost admitted per Window.
	Limit int64
	// Window is the length of the window.
	Window time.Duration
	// Algorithm is "sliding-window", "log" or "fixed-window".
	Algorithm string
}

// A Limiter admits or refuses requests per key.
type Limiter interface {
	// Policy returns the limiter's policy.
	Policy() Policy
	// Allow admits n units of cost for key now, on the server's clock, if they
	// fit under the limit, and counts them; or refuses them and counts nothing.
	Allow(ctx context.Context, key string, n int64) (Decision, error)
	// AllowAt is Allow at instant t on the client's clock.
	AllowAt(ctx context.Context, t time.Time, key string, n int64) (Decision, error)
}

// maxExact (2^53) bounds limits and costs: the scripts compare in doubles.
const maxExact = 1 << 53

func check(name string, limit int64, window time.Duration) error {
	if !ValidName(name) {
		return fmt.Errorf("%w: policy name %q is not a token (a letter or *, then letters, digits or :/!#$%%&'*+-.^_`|~)", ErrInvalid, name)
	}
	if limit < 0 || limit > maxExact {
		return fmt.Errorf("%w: limit %d is not within [0, 2^53]", ErrInvalid, limit)
	}
	if window < time.Millisecond || window%time.Millisecond != 0 {
		return fmt.Errorf("%w: window %v is not a positive whole number of milliseconds", ErrInvalid, window)
	}
	return nil
}

func checkCost(n, max int64) error {
	if n < 0 || n > max {
		return fmt.Errorf("%w: cost %d is not within [0, %d]", ErrInvalid, n, max)
	}
	return nil
}

// ValidName reports whether s can name a policy: a Structured Fields token
// (RFC 8941 section 3.3.4), as the RateLimit header fields need.
func ValidName(s string) bool {
	if s == "" {
		return false
	}
	c := s[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == ':' || c == '/' || c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' ||
			c == '*' || c == '+' || c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}

func ms(d int64) time.Duration {
	if d < 0 {
		return -1
	}
	return time.Duration(d) * time.Millisecond
}
