// Package httplimit is rate-limiting middleware for net/http, on the
// limiters of package limit. Since it is a func(http.Handler) http.Handler, it
// works as is with chi, gorilla/mux and any router built on net/http.
//
//	perIP := httplimit.Rule{
//		Name:     "api",
//		Key:      httplimit.ClientIP(),
//		Limiters: []limit.Limiter{perSecond, perHour},
//	}
//	mw, err := httplimit.New([]httplimit.Rule{perIP})
//	http.ListenAndServe(":8080", mw(mux))
//
// For each request the first rule whose Match accepts it applies (a nil Match
// accepts all). Its limiters are asked in order; the first refusal answers 429
// Too Many Requests with Retry-After. Every limited response carries the IETF
// RateLimit-Policy and RateLimit header fields
// (draft-ietf-httpapi-ratelimit-headers):
//
//	RateLimit-Policy: persec;q=10;w=1, perhour;q=1000;w=3600
//	RateLimit: persec;r=3;t=1
//
// where RateLimit names the policy with the least remaining (on a refusal, the
// one that refused, with t equal to Retry-After), and optionally the legacy
// X-RateLimit-Limit, -Remaining and -Reset fields.
//
// A request admitted by earlier limiters and refused by a later one has been
// counted by the earlier ones: order a rule's limiters from the one most
// likely to refuse.
//
// A Middleware is safe for concurrent use.
package httplimit

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/windowstore/windowstore/limit"
)

// Rule is one limiting rule.
type Rule struct {
	// Name names the rule in keys, metrics and errors. It must be a
	// Structured Fields token (see limit.Policy).
	Name string
	// Match selects the requests the rule applies to; nil selects all.
	Match func(r *http.Request) bool
	// Key names the counter a request is charged to. Required.
	Key KeyFunc
	// Limiters are the limits that apply together, such as per second and
	// per hour. Each is asked with the key "Name:" + Key(r).
	Limiters []limit.Limiter
	// Cost is a request's cost; nil means 1.
	Cost func(r *http.Request) int64
	// FailOpen admits requests when a limiter fails (the server is down, a
	// timeout). The default, fail closed, answers 503 Service Unavailable.
	// Either way the error goes to Options.OnError.
	FailOpen bool
}

// Options tune the middleware. The zero value is usable.
type Options struct {
	// OnError is told of every limiter or key error, with the rule's name.
	OnError func(r *http.Request, rule string, err error)
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset to every limited response.
	LegacyHeaders bool
	// Local, when set, remembers refused keys until their retry-after and
	// refuses them again without asking the server (see LocalTier).
	Local *LocalTier
	// Metrics, when set, is told of every decision.
	Metrics Recorder
	// Now is the clock of the local tier; nil means time.Now.
	Now func() time.Time
}

// Recorder receives one call per decision: the rule, the outcome, and how
// long the limiters took. Package metrics/prom has a Prometheus recorder.
type Recorder interface {
	Observe(rule string, outcome Outcome, latency time.Duration)
}

// Outcome is what a rule decided for one request.
type Outcome string

// Outcomes.
const (
	Allowed    Outcome = "allowed"
	Refused    Outcome = "refused"     // 429 from a limiter
	LocalShed  Outcome = "local_shed"  // 429 from the local tier, no server call
	FailedOpen Outcome = "failed_open" // a limiter failed; admitted
	FailedShut Outcome = "failed_closed"
)

// ErrInvalid reports a rule the middleware refuses.
var ErrInvalid = errors.New("httplimit: invalid rule")

// New returns the middleware for rules, or an error for a rule without a
// valid name, key function or limiter.
func New(rules []Rule, opts ...Options) (func(http.Handler) http.Handler, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	for i, r := range rules {
		switch {
		case !limit.ValidName(r.Name):
			return nil, fmt.Errorf("%w: rule %d: name %q is not a token", ErrInvalid, i, r.Name)
		case r.Key == nil:
			return nil, fmt.Errorf("%w: rule %s: no key function", ErrInvalid, r.Name)
		case len(r.Limiters) == 0:
			return nil, fmt.Errorf("%w: rule %s: no limiter", ErrInvalid, r.Name)
		}
		for _, l := range r.Limiters {
			if l == nil {
				return nil, fmt.Errorf("%w: rule %s: nil limiter", ErrInvalid, r.Name)
			}
		}
	}
	rs := append([]Rule(nil), rules...)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for i := range rs {
				if rs[i].Match == nil || rs[i].Match(r) {
					if !serve(&o, &rs[i], w, r) {
						return
					}
					break
				}
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// serve applies one rule; it reports whether the request may go on.
func serve(o *Options, rule *Rule, w http.ResponseWriter, r *http.Request) bool {
	start := time.Now()
	observe := func(out Outcome) {
		if o.Metrics != nil {
			o.Metrics.Observe(rule.Name, out, time.Since(start))
		}
	}
	fail := func(err error) bool {
		if o.OnError != nil {
			o.OnError(r, rule.Name, err)
		}
		if rule.FailOpen {
			observe(FailedOpen)
			return true
		}
		observe(FailedShut)
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		return false
	}
	key, err := rule.Key(r)
	if err != nil {
		return fail(err)
	}
	key = rule.Name + ":" + key
	cost := int64(1)
	if rule.Cost != nil {
		cost = rule.Cost(r)
	}
	h := w.Header()
	h.Set("RateLimit-Policy", policyField(rule.Limiters))

	if o.Local != nil {
		if i, until, ok := o.Local.refused(key, cost, o.Now()); ok {
			l := rule.Limiters[i]
			retry := until.Sub(o.Now())
			setFields(o, h, l.Policy(), 0, retry)
			refuse(w, retry)
			observe(LocalShed)
			return false
		}
	}

	var best limit.Decision
	bestAt := -1
	for i, l := range rule.Limiters {
		d, err := l.Allow(r.Context(), key, cost)
		if err != nil {
			return fail(err)
		}
		if !d.Allowed {
			if o.Local != nil && d.RetryAfter > 0 {
				now := o.Now()
				o.Local.remember(key, i, cost, now, now.Add(d.RetryAfter))
			}
			setFields(o, h, l.Policy(), 0, d.RetryAfter)
			refuse(w, d.RetryAfter)
			observe(Refused)
			return false
		}
		if bestAt < 0 || d.Remaining < best.Remaining {
			best, bestAt = d, i
		}
	}
	setFields(o, h, rule.Limiters[bestAt].Policy(), best.Remaining, best.ResetAfter)
	observe(Allowed)
	return true
}

func refuse(w http.ResponseWriter, retry time.Duration) {
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(seconds(retry), 10))
	}
	http.Error(w, "too many requests", http.StatusTooManyRequests)
}

// seconds rounds up: a client that waits that long will find room.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

func policyField(ls []limit.Limiter) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		p := l.Policy()
		parts[i] = fmt.Sprintf("%s;q=%d;w=%d", p.Name, p.Limit, seconds(p.Window))
	}
	return strings.Join(parts, ", ")
}

func setFields(o *Options, h http.Header, p limit.Policy, remaining int64, reset time.Duration) {
	t := seconds(reset)
	h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", p.Name, remaining, t))
	if o.LegacyHeaders {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(p.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(t, 10))
	}
}
