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
// accepts all). A rule limits one key of the request, or several (Rule.Also:
// per IP and per user), decided all or nothing in one call. When a rule's
// limiters are all sliding windows on one client (limit.NewSlidingWindow),
// they are asked together, atomically, in one round trip (limit.Combine): a
// request refused by one is counted by none. Other limiters are asked in
// order, and a request admitted by earlier ones and refused by a later one
// has been counted by the earlier ones: order them from the one most likely
// to refuse. A refusal answers 429 Too Many Requests with Retry-After. Every
// limited response carries the IETF RateLimit-Policy and RateLimit header
// fields (draft-ietf-httpapi-ratelimit-headers):
//
//	RateLimit-Policy: persec;q=10;w=1, perhour;q=1000;w=3600
//	RateLimit: persec;r=3;t=1, perhour;r=870;t=2400
//
// where RateLimit lists every policy that was asked, with what it has left and
// when that resets (a policy that refused: r=0 and t its retry, which
// Retry-After says too), and optionally the legacy X-RateLimit-Limit,
// -Remaining and -Reset fields, of the policy with the least remaining (on a
// refusal, the one that refused).
//
// A shadow rule (Rule.Shadow) or a shadow limiter (limit.Shadow) decides and
// counts as usual but never refuses: its would-be refusals go to the
// WithOnShadowRefusal hook and to the recorder as outcome ShadowRefused, so a
// limit can be watched in production before it is enforced.
//
// A rule's InFlight (limit.NewConcurrency) caps the requests of a key being
// served at once: a lease is taken before the limiters are asked and released
// when the handler returns; a request that finds none free is answered 429,
// or 503 with InFlightStatus.
//
// A degraded limiter (limit.Degrade) decides in process while its server
// fails, on this instance's share of the limit; its decisions are recorded as
// outcomes DegradedAllowed and DegradedRefused, and its circuit breaker's
// state is its own (limit.Degraded.State, Health).
//
// The middleware New returns is safe for concurrent use.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/windowstore/windowstore/internal/keyspace"
	"github.com/windowstore/windowstore/internal/refusal"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// Rule is one limiting rule: which requests it applies to (Match), the key
// each is charged to (Key) and the limits that decide it (Limiters, and Also
// for more keys of the request, InFlight for requests in flight). Name, Key
// and Limiters or InFlight are required; every other field's zero value is
// the usual choice: every request matches, a cost of 1, fail closed, and a
// refusal answered 429. New checks the rules and refuses a bad one with
// store.ErrInvalid. For example, 100 requests a minute per client IP, on st,
// a store of one-minute windows:
//
//	perMinute, _ := limit.NewSlidingWindow(st, "perminute", 100)
//	mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.ClientIP(), Limiters: []limit.Limiter{perMinute}}})
type Rule struct {
	// Name names the rule in keys, metrics and errors. It must be a
	// Structured Fields token (see limit.Policy).
	Name string
	// Match selects the requests the rule applies to; nil selects all.
	Match func(r *http.Request) bool
	// Key names the counter a request is charged to. Required. When it fails
	// (a request without the header it reads, say), the request is answered
	// 400 Bad Request: a key that cannot be named is the client's fault.
	Key KeyFunc
	// Limiters are the limits that apply together, such as per second and
	// per hour. Each is asked with the key "Name:" + Key(r).
	Limiters []limit.Limiter
	// Also are more keys of the request that the rule limits in the same
	// decision: per IP by the rule's Key and per user by a Part's, say. The
	// rule's Limiters and every Part's are decided all or nothing, in one
	// call (limit.AllowKeys): a request that one key's limit refuses counts
	// in no other key's. Every limiter must then be a sliding window
	// (limit.NewSlidingWindow, or limit.Combine of them), every policy name
	// distinct; such a rule takes no InFlight and is not a shadow rule.
	Also []Part
	// InFlight, when set, caps how many requests of a key are served at once
	// (limit.NewConcurrency): a lease of the key "Name:" + Key(r) is taken
	// with the Limiters' decision, and released when the handler returns
	// (or, if the process dies, at the end of its ttl). A request that finds
	// no free lease is answered InFlightStatus, with Retry-After the time
	// until the first held lease's ttl ends, and the Limiters count nothing;
	// one that the Limiters refuse holds no lease. When the Limiters are
	// sliding windows (limit.NewSlidingWindow) on the lease's client, the
	// lease and they are decided in one script call, all or nothing; other
	// Limiters are asked once the lease is taken, and a request they refuse
	// releases it at once (a second round trip). A rule needs Limiters,
	// InFlight, or both. A shadow rule takes no InFlight.
	InFlight *limit.Concurrency
	// InFlightStatus is the status of a request refused by InFlight: 0 for
	// 429 Too Many Requests (the default), or 503 Service Unavailable.
	InFlightStatus int
	// Cost is a request's cost; nil means 1.
	Cost func(r *http.Request) int64
	// FailOpen admits requests when a limiter fails (the server is down, a
	// timeout). The default, fail closed, answers 503 Service Unavailable.
	// Either way the error goes to the WithOnError hook. A degraded limiter
	// (limit.Degrade) fails only for errors it does not stand in for. Input
	// a limiter refuses (store.ErrInvalid: a key over 1,024 bytes, a cost
	// out of its range) is not a failure: it is answered 400 whatever
	// FailOpen says, so that no request passes a fail-open limit by making
	// its limiter fail.
	FailOpen bool
	// Shadow makes the rule watch without enforcing: its limiters decide and
	// count as usual (a refused request is counted by none, and the
	// limiters after the refusing one are not asked), but the request goes
	// on. A would-be refusal is told to the WithOnShadowRefusal hook and
	// recorded as outcome ShadowRefused. A shadow rule never answers: not
	// 429, not 400 for a key it cannot name (recorded as BadKey), not 503
	// (it fails open); it sets no header field, uses no local tier, and is
	// not the request's rule: the first matching rule that is not a shadow
	// still applies. A shadow rule placed before it sees the requests it
	// sees; one placed after it, the requests it admits.
	Shadow bool
}

// Part is one more key of a Rule (Rule.Also), with limits of its own.
type Part struct {
	// Name names the part's counters, "Name:" + Key(r), as a Rule's name
	// names its own; a Structured Fields token.
	Name string
	// Key names the part's counter of a request; an error answers 400, as
	// the Rule's Key.
	Key KeyFunc
	// Limiters are the part's limits: sliding windows.
	Limiters []limit.Limiter
}

// An Option tunes the middleware.
type Option func(*options)

type options struct {
	onError  func(r *http.Request, rule string, err error)
	onShadow func(r *http.Request, rule string, d store.Decision)
	legacy   bool
	local    *localTier
	metrics  Recorder
}

// WithOnError has every limiter or key error told to fn, with the rule's name.
func WithOnError(fn func(r *http.Request, rule string, err error)) Option {
	return func(o *options) { o.onError = fn }
}

// WithOnShadowRefusal has every would-be refusal told to fn, with the rule's
// name and the decision (WouldRefuse true): those of a shadow rule
// (Rule.Shadow), and those of a shadow limiter (limit.Shadow) in any rule.
// fn runs on the request's goroutine, before the request goes on.
func WithOnShadowRefusal(fn func(r *http.Request, rule string, d store.Decision)) Option {
	return func(o *options) { o.onShadow = fn }
}

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset to every limited response.
func WithLegacyHeaders() Option { return func(o *options) { o.legacy = true } }

// WithLocalTier has the middleware remember, in process memory, its
// refusals per rule and key, and answer the same cost refused again with 429
// (Outcome LocalShed) until its Retry-After has passed, without a server
// call: a rule of several limiters, or with Also parts, is shed in one
// lookup. It is the refusal cache of package limit (limit.RefusalCache)
// keyed by rule. It never admits, so the middleware never admits more than
// its limits; a larger cost asks the server, whose Retry-After may be later.
// It holds at most size keys (0 or less: 100,000); when full it drops its
// expired refusals, then keys at random. Its refusals count down on the
// process's clock (time.Now), as the limiters' refusal caches do. Without the
// option there is none (the limiters keep their own refusal caches).
func WithLocalTier(size int) Option {
	if size <= 0 {
		size = 100000
	}
	return func(o *options) { o.local = &localTier{refusal.New(size)} }
}

// WithRecorder has every decision told to r (package metrics/prom has a
// Prometheus recorder, package metrics/otel an OpenTelemetry one).
func WithRecorder(r Recorder) Option { return func(o *options) { o.metrics = r } }

// Recorder receives one call per decision: the rule, the outcome, and how
// long the limiters took. Package metrics/prom has a Prometheus recorder,
// package metrics/otel an OpenTelemetry one.
type Recorder interface {
	Observe(rule string, outcome Outcome, latency time.Duration)
}

// Outcome is what a rule decided for one request.
type Outcome string

// Outcomes.
const (
	Allowed      Outcome = "allowed"
	Refused      Outcome = "refused"       // 429 from a limiter
	LocalShed    Outcome = "local_shed"    // 429 from the local tier, no server call
	FailedOpen   Outcome = "failed_open"   // a limiter failed; admitted
	FailedClosed Outcome = "failed_closed" // a limiter failed; refused with 503
	// BadKey: 400 (or 431), the request's key or cost refused: by the key
	// function, for a key over 1,024 bytes, for a negative cost, or by a
	// limiter (store.ErrInvalid). Never admitted by FailOpen.
	BadKey Outcome = "bad_request"
	// ShadowRefused: admitted, but a shadow rule or a shadow limiter
	// (limit.Shadow) would have refused it.
	ShadowRefused Outcome = "shadow_refused"
	// DegradedAllowed: admitted while a degraded limiter (limit.Degrade)
	// decided in process, its server failing (Decision.Degraded). It takes
	// precedence over ShadowRefused: the hook is still told of a would-be
	// refusal.
	DegradedAllowed Outcome = "degraded_allowed"
	// DegradedRefused: 429 from a degraded limiter deciding in process.
	DegradedRefused Outcome = "degraded_refused"
	// InFlightRefused: InFlightStatus (429 or 503) because every lease of
	// the rule's InFlight limit was held.
	InFlightRefused Outcome = "inflight_refused"
)

// New returns the middleware for rules, or an error for a rule without a
// valid name, key function or limiter.
func New(rules []Rule, opts ...Option) (func(http.Handler) http.Handler, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	for i, r := range rules {
		switch {
		case !keyspace.Token(r.Name):
			return nil, invalidRule(strconv.Itoa(i), fmt.Sprintf("name %q is not a token (%s)", r.Name, keyspace.TokenForm))
		case r.Key == nil:
			return nil, invalidRule(r.Name, "no key function")
		case len(r.Limiters) == 0 && r.InFlight == nil:
			return nil, invalidRule(r.Name, "no limiter")
		case r.InFlight != nil && r.Shadow:
			return nil, invalidRule(r.Name, "a shadow rule takes no InFlight limit")
		case r.InFlightStatus != 0 && r.InFlightStatus != http.StatusTooManyRequests && r.InFlightStatus != http.StatusServiceUnavailable:
			return nil, invalidRule(r.Name, fmt.Sprintf("InFlightStatus %d is not 0, 429 or 503", r.InFlightStatus))
		}
		for _, l := range r.Limiters {
			if l == nil {
				return nil, invalidRule(r.Name, "nil limiter")
			}
		}
		if err := checkAlso(r); err != nil {
			return nil, err
		}
	}
	rs := make([]compiled, len(rules))
	for i, r := range rules {
		rs[i] = compile(r)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for i := range rs {
				if rs[i].Match == nil || rs[i].Match(r) {
					if rs[i].Shadow {
						watch(&o, &rs[i], r)
						continue
					}
					var release func()
					ok := serve(&o, &rs[i], w, r, &release)
					if release != nil {
						defer release()
					}
					if !ok {
						return
					}
					break
				}
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// checkAlso checks a rule with Also: parts with a name, a key and limiters,
// every limiter a sliding window, every policy name once.
func checkAlso(r Rule) error {
	if len(r.Also) == 0 {
		return nil
	}
	switch {
	case r.InFlight != nil:
		return invalidRule(r.Name, "a rule with Also takes no InFlight limit")
	case r.Shadow:
		return invalidRule(r.Name, "a shadow rule takes no Also")
	case len(r.Limiters) == 0:
		return invalidRule(r.Name, "a rule with Also needs Limiters of its own key")
	}
	names := map[string]bool{r.Name: true}
	policies := map[string]bool{}
	all := append([]limit.Limiter(nil), r.Limiters...)
	for _, p := range r.Also {
		switch {
		case !keyspace.Token(p.Name):
			return invalidRule(r.Name, fmt.Sprintf("part name %q is not a token (%s)", p.Name, keyspace.TokenForm))
		case names[p.Name]:
			return invalidRule(r.Name, fmt.Sprintf("part name %q is the rule's or another part's", p.Name))
		case p.Key == nil:
			return invalidRule(r.Name, fmt.Sprintf("part %s: no key function", p.Name))
		case len(p.Limiters) == 0:
			return invalidRule(r.Name, fmt.Sprintf("part %s: no limiter", p.Name))
		}
		names[p.Name] = true
		all = append(all, p.Limiters...)
	}
	for _, l := range all {
		if l == nil {
			return invalidRule(r.Name, "nil limiter")
		}
		if _, err := limit.Combine(l); err != nil {
			return invalidRule(r.Name, fmt.Sprintf("policy %s: a rule with Also decides all or nothing, so its limiters are sliding windows (limit.NewSlidingWindow, limit.Combine)", l.Policy().Name))
		}
		for _, p := range limit.Policies(l) {
			if policies[p.Name] {
				return invalidRule(r.Name, fmt.Sprintf("policy name %q twice: the RateLimit fields name each policy once", p.Name))
			}
			policies[p.Name] = true
		}
	}
	return nil
}

// compiled is a rule ready to serve: its limiters combined into one atomic
// combination (limit.Combine) where they can be (sliding windows on one
// client), and its policies by name.
type compiled struct {
	Rule
	run      []limit.Limiter
	policies map[string]limit.Policy
	header   string
	// partOf is, for a rule with Also, the key each policy counts on: 0 for
	// the rule's Key, j for Also[j-1].
	partOf map[string]int
}

func compile(r Rule) compiled {
	all := append([]limit.Limiter(nil), r.Limiters...)
	for _, p := range r.Also {
		all = append(all, p.Limiters...)
	}
	c := compiled{Rule: r, run: r.Limiters, policies: map[string]limit.Policy{}, header: policyField(all), partOf: map[string]int{}}
	for _, l := range all {
		for _, p := range limit.Policies(l) {
			c.policies[p.Name] = p
		}
	}
	for j, pt := range r.Also {
		for _, l := range pt.Limiters {
			for _, p := range limit.Policies(l) {
				c.partOf[p.Name] = j + 1
			}
		}
	}
	if r.InFlight != nil {
		p := r.InFlight.Policy()
		c.policies[p.Name] = p
		// A concurrency limit has no window: its policy item has no w.
		c.header = strings.TrimPrefix(c.header+", "+fmt.Sprintf("%s;q=%d", p.Name, p.Limit), ", ")
	}
	if len(r.Limiters) > 1 {
		if m, err := limit.Combine(r.Limiters...); err == nil {
			c.run = []limit.Limiter{m}
		}
	}
	return c
}

// request is a request's key ("Name:" + Key(r)) and cost, or the error that
// answers it 400 (or 431: see Header): a key the store cannot name (over
// keyspace.MaxKeyLen bytes), or a negative cost.
func (c *compiled) request(r *http.Request) (string, int64, error) {
	key, err := named(c.Name, c.Key, r)
	if err != nil {
		return "", 0, err
	}
	cost := int64(1)
	if c.Cost != nil {
		cost = c.Cost(r)
	}
	if cost < 0 {
		return "", 0, BadRequest(fmt.Sprintf("the request's cost %d is negative", cost))
	}
	return key, cost, nil
}

// named is the key of a rule's or part's name and key function for r, or
// the error that answers r 400 (or 431).
func named(name string, fn KeyFunc, r *http.Request) (string, error) {
	key, err := fn(r)
	if err != nil {
		return "", err
	}
	key = name + ":" + key
	if len(key) > keyspace.MaxKeyLen {
		return "", BadRequest(fmt.Sprintf("the rate-limit key is %d bytes, more than %d", len(key), keyspace.MaxKeyLen))
	}
	return key, nil
}

// policy is the policy a decision names (a combination's deciding one).
func (c *compiled) policy(l limit.Limiter, d store.Decision) limit.Policy {
	if p, ok := c.policies[d.Policy]; ok {
		return p
	}
	return l.Policy()
}

// serve applies one rule; it reports whether the request may go on, and sets
// release to the release of the rule's InFlight lease, which the caller
// defers: when the handler returns, or at once for a request refused here.
func serve(o *options, rule *compiled, w http.ResponseWriter, r *http.Request, release *func()) bool {
	start := time.Now()
	observe := func(out Outcome) {
		if o.metrics != nil {
			o.metrics.Observe(rule.Name, out, time.Since(start))
		}
	}
	fail := func(err error) bool {
		if o.onError != nil {
			o.onError(r, rule.Name, err)
		}
		// A key or cost the limiter refuses is the client's input, not a
		// failure: 400, whatever FailOpen says, so that no input can pass
		// a fail-open limit by making its limiter fail.
		if errors.Is(err, store.ErrInvalid) {
			observe(BadKey)
			http.Error(w, "bad request: "+invalidReason(err), http.StatusBadRequest)
			return false
		}
		if rule.FailOpen {
			observe(FailedOpen)
			return true
		}
		observe(FailedClosed)
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		return false
	}
	bad := func(err error) bool { // a key or cost of the request refused: 400 or 431
		if o.onError != nil {
			o.onError(r, rule.Name, err)
		}
		observe(BadKey)
		http.Error(w, "bad request: "+reasonOf(err), statusOf(err))
		return false
	}
	key, cost, err := rule.request(r)
	if err != nil {
		return bad(err)
	}
	h := w.Header()
	h.Set("RateLimit-Policy", rule.header)
	if len(rule.Also) > 0 {
		return serveKeys(o, rule, w, r, key, cost, observe, fail, bad)
	}

	if shed(o, rule, w, cost, observe, key) {
		return false
	}

	var best store.Decision
	var bestPolicy limit.Policy
	chosen, shadowed, degraded := false, false, false
	// decide takes limiter l's decision d: false when it refuses the request
	// (answered here).
	var items []string // the RateLimit field: every enforced policy asked
	decide := func(l limit.Limiter, d store.Decision) bool {
		p := rule.policy(l, d)
		degraded = degraded || d.Degraded
		if d.WouldRefuse { // a shadow limiter: it lets the request through
			shadowed = true
			if o.onShadow != nil {
				o.onShadow(r, rule.Name, d)
			}
			return true
		}
		items = append(items, policyItems(d, l.Policy().Name)...)
		if !d.Allowed {
			// A degraded refusal was made in process: the local tier would
			// save no server call, and the server, once back, may admit sooner.
			if o.local != nil && d.RetryAfter > 0 && !d.Degraded {
				now := time.Now()
				o.local.remember(key, p.Name, cost, now, now.Add(d.RetryAfter))
			}
			setFields(o, h, p, 0, d.RetryAfter)
			h.Set("RateLimit", strings.Join(items, ", "))
			refuse(w, d.RetryAfter)
			if d.Degraded {
				observe(DegradedRefused)
			} else {
				observe(Refused)
			}
			return false
		}
		if !chosen || d.Remaining < best.Remaining {
			best, bestPolicy, chosen = d, p, true
		}
		return true
	}
	run := rule.run
	if in := rule.InFlight; in != nil {
		// The lease and the limiter in one script call, all or nothing,
		// when the one limiter is a sliding window or a combination of them
		// on the lease's client (limit.Concurrency.AcquireWith); else the
		// lease first, then the limiters.
		var l limit.Lease
		var ld store.Decision
		together := false
		if len(run) == 1 {
			lv, dv, ok, err := in.AcquireWith(r.Context(), key, run[0], cost)
			if ok {
				if err != nil {
					return fail(err)
				}
				l, ld, together = lv, dv, true
			}
		}
		if !together {
			var err error
			if l, err = in.Acquire(r.Context(), key); err != nil {
				return fail(err)
			}
		}
		p := in.Policy()
		if !l.Allowed {
			setFields(o, h, p, 0, l.RetryAfter)
			status := rule.InFlightStatus
			if status == 0 {
				status = http.StatusTooManyRequests
			}
			if l.RetryAfter > 0 {
				h.Set("Retry-After", strconv.FormatInt(seconds(l.RetryAfter), 10))
			}
			http.Error(w, http.StatusText(status)+": too many requests in flight", status)
			observe(InFlightRefused)
			return false
		}
		if l.ID != "" {
			*release = func() {
				if _, err := in.Release(context.WithoutCancel(r.Context()), key, l.ID); err != nil && o.onError != nil {
					o.onError(r, rule.Name, err)
				}
			}
		}
		best, bestPolicy, chosen = l.Decision, p, true
		items = append(items, policyItems(l.Decision, p.Name)...)
		if together {
			if !decide(run[0], ld) {
				return false
			}
			run = nil
		}
	}
	for _, l := range run {
		d, err := l.Allow(r.Context(), key, cost)
		if err != nil {
			return fail(err)
		}
		if !decide(l, d) {
			return false
		}
	}
	if chosen {
		setFields(o, h, bestPolicy, best.Remaining, best.ResetAfter)
		h.Set("RateLimit", strings.Join(items, ", "))
	}
	switch {
	case degraded:
		observe(DegradedAllowed)
	case shadowed:
		observe(ShadowRefused)
	default:
		observe(Allowed)
	}
	return true
}

// shed answers 429 from the local tier, without a server call, a request one
// of whose keys it remembers refused for its cost: true when it did.
func shed(o *options, rule *compiled, w http.ResponseWriter, cost int64, observe func(Outcome), keys ...string) bool {
	if o.local == nil {
		return false
	}
	for _, k := range keys {
		now := time.Now()
		if name, until, ok := o.local.refused(k, cost, now); ok {
			retry := until.Sub(now)
			setFields(o, w.Header(), rule.policies[name], 0, retry)
			refuse(w, retry)
			observe(LocalShed)
			return true
		}
	}
	return false
}

// policyItems are the RateLimit field's items of decision d, one per policy
// (a combination's every one, else d's own, named name): its remaining and
// reset, or 0 and its retry for a policy that refuses. The draft lets the
// field list every policy.
func policyItems(d store.Decision, name string) []string {
	ds := d.Policies
	if len(ds) == 0 {
		d.Policy = name
		ds = []store.Decision{d}
	}
	out := make([]string, len(ds))
	for i, pd := range ds {
		remaining, t := pd.Remaining, pd.ResetAfter
		if !pd.Allowed {
			remaining, t = 0, pd.RetryAfter
		}
		out[i] = fmt.Sprintf("%s;r=%d;t=%d", pd.Policy, remaining, seconds(t))
	}
	return out
}

// serveKeys applies a rule with Also: every key's limits in one decision,
// all or nothing (limit.AllowKeys). The local tier remembers a refusal under
// the refusing policy's key, and refuses a request any of whose keys it
// remembers.
func serveKeys(o *options, rule *compiled, w http.ResponseWriter, r *http.Request, key string, cost int64,
	observe func(Outcome), fail, bad func(error) bool) bool {
	h := w.Header()
	ks := make([]limit.Keyed, 0, len(rule.Limiters)+len(rule.Also))
	add := func(key string, ls []limit.Limiter) {
		for _, l := range ls {
			ks = append(ks, limit.Keyed{Limiter: l, Key: key})
		}
	}
	add(key, rule.Limiters)
	keys := []string{key}
	for _, p := range rule.Also {
		k, err := named(p.Name, p.Key, r)
		if err != nil {
			return bad(err)
		}
		add(k, p.Limiters)
		keys = append(keys, k)
	}
	if shed(o, rule, w, cost, observe, keys...) {
		return false
	}
	d, err := limit.AllowKeys(r.Context(), cost, ks...)
	if err != nil {
		return fail(err)
	}
	items := policyItems(d, d.Policy)
	p := rule.policies[d.Policy]
	if !d.Allowed {
		if o.local != nil && d.RetryAfter > 0 {
			now := time.Now()
			o.local.remember(keys[rule.partOf[d.Policy]], d.Policy, cost, now, now.Add(d.RetryAfter))
		}
		setFields(o, h, p, 0, d.RetryAfter)
		h.Set("RateLimit", strings.Join(items, ", "))
		refuse(w, d.RetryAfter)
		observe(Refused)
		return false
	}
	setFields(o, h, p, d.Remaining, d.ResetAfter)
	h.Set("RateLimit", strings.Join(items, ", "))
	observe(Allowed)
	return true
}

// watch applies a shadow rule: it asks the limiters as serve does, and tells
// the hooks and the recorder, but never answers the request nor sets a
// header field.
func watch(o *options, rule *compiled, r *http.Request) {
	start := time.Now()
	observe := func(out Outcome) {
		if o.metrics != nil {
			o.metrics.Observe(rule.Name, out, time.Since(start))
		}
	}
	key, cost, err := rule.request(r)
	if err != nil {
		if o.onError != nil {
			o.onError(r, rule.Name, err)
		}
		observe(BadKey)
		return
	}
	out, degraded := Allowed, false
	for _, l := range rule.run {
		d, err := l.Allow(r.Context(), key, cost)
		if err != nil {
			if o.onError != nil {
				o.onError(r, rule.Name, err)
			}
			if errors.Is(err, store.ErrInvalid) {
				observe(BadKey)
			} else {
				observe(FailedOpen)
			}
			return
		}
		degraded = degraded || d.Degraded
		if d.Allowed && !d.WouldRefuse {
			continue
		}
		out = ShadowRefused
		refused := !d.Allowed
		d.Allowed, d.WouldRefuse = true, true
		if o.onShadow != nil {
			o.onShadow(r, rule.Name, d)
		}
		if refused { // enforced, the refusal would stop here: so does its shadow
			break
		}
	}
	if degraded {
		out = DegradedAllowed
	}
	observe(out)
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
	var parts []string
	for _, l := range ls {
		for _, p := range limit.Policies(l) {
			parts = append(parts, fmt.Sprintf("%s;q=%d;w=%d", p.Name, p.Limit, seconds(p.Window)))
		}
	}
	return strings.Join(parts, ", ")
}

// invalidReason is what the client may see of a limiter's store.ErrInvalid:
// its detail (a key's or a cost's bound), never the key itself.
func invalidReason(err error) string {
	var se *store.Error
	if errors.As(err, &se) && se.Detail != "" {
		return "the rate limiter refuses the request: " + se.Detail
	}
	return "the rate limiter refuses the request's key or cost"
}

// invalidRule is New's error for a rule it refuses: rule is its name (its
// index when the name is the trouble).
func invalidRule(rule, detail string) error {
	return &store.Error{Package: "httplimit", Op: "rule " + rule, Kind: store.ErrInvalid, Detail: detail}
}

func setFields(o *options, h http.Header, p limit.Policy, remaining int64, reset time.Duration) {
	t := seconds(reset)
	h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", p.Name, remaining, t))
	if o.legacy {
		h.Set("X-RateLimit-Limit", strconv.FormatInt(p.Limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(t, 10))
	}
}
