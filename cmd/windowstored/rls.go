package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/windowstore/windowstore/fieldcodec"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/internal/keyspace"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// maxCost is the largest hits_addend: 2^53, the largest cost a limit takes.
const maxCost = 1 << 53

// rls serves envoy.service.ratelimit.v3.RateLimitService.
type rls struct {
	rlspb.UnimplementedRateLimitServiceServer
	s *server
}

func (r rls) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return r.s.decide(ctx, req)
}

// limited is one descriptor's part in a decision.
type limited struct {
	rule  *rule
	st    *store.Store
	key   string
	cost  int64
	batch int // its batch in the ApplyAll call, -1 for none
	// refund is a descriptor with is_negative_hits: its cost is taken off
	// the counter, whatever the decision.
	refund bool
	// cum is, for a window limit, the cost of this descriptor and of the
	// same limit's and key's descriptors before it in the request: a
	// repeated descriptor counts as often as it appears, in one op.
	cum int64
}

// decide answers one request: every descriptor's limit decides, all or
// nothing. The GCRA limits decide first, one call each, as reservations
// given back when a later limit refuses; then the window limits decide in
// one store.ApplyAll call, one round trip per node.
func (s *server) decide(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	start := time.Now()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	rt := s.rt.Load()
	domain := req.GetDomain()
	outcome := httplimit.Allowed
	// The metrics' rule label: the domain, when it is configured (a
	// client's unknown domains must not grow the metrics without bound).
	label := "(unknown)"
	defer func() { s.rec.Observe(label, outcome, time.Since(start)) }()
	bad := func(c codes.Code, format string, a ...any) (*rlspb.RateLimitResponse, error) {
		outcome = httplimit.BadKey
		return nil, status.Errorf(c, "windowstored: "+format, a...)
	}
	if domain == "" {
		return bad(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	root := rt.cfg.domains[domain]
	if root == nil {
		return bad(codes.NotFound, "unknown domain %q", domain)
	}
	label = domain
	ds := req.GetDescriptors()
	if len(ds) == 0 {
		return bad(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	hits := int64(req.GetHitsAddend())
	if hits == 0 {
		hits = 1
	}
	parts := make([]limited, len(ds))
	unlimited := make([]bool, len(ds))
	replacing := map[string]bool{}
	for i, d := range ds {
		parts[i].batch = -1
		if len(d.GetEntries()) == 0 {
			return bad(codes.InvalidArgument, "descriptor %d has no entries", i)
		}
		for _, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return bad(codes.InvalidArgument, "descriptor %d has an entry with an empty key", i)
			}
		}
		cost := hits
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > maxCost {
				return bad(codes.InvalidArgument, "descriptor %d: hits_addend %d is above 2^53", i, h.GetValue())
			}
			cost = int64(h.GetValue())
		}
		r := root.match(d.GetEntries())
		if o := d.GetLimit(); o != nil {
			var err error
			if r, err = overrideRule(domain, o, r, rt.cfg.settings.fixedOverride); err != nil {
				return bad(codes.InvalidArgument, "descriptor %d: %v", i, err)
			}
		}
		if r == nil {
			continue
		}
		for _, name := range r.replaces {
			replacing[name] = true
		}
		if r.unlimited {
			unlimited[i] = true
			continue
		}
		var st *store.Store
		if !r.gcra {
			var err error
			if st, err = s.storeFor(ctx, r.window); err != nil {
				return s.failed(domain, &outcome, err)
			}
		}
		key := counterKey(domain, d.GetEntries())
		if len(key) > keyspace.MaxKeyLen {
			// The client's input, never a server failure that on_error
			// could turn into an admission.
			return bad(codes.InvalidArgument, "descriptor %d: its domain and entries make a counter key of %d bytes, more than %d", i, len(key), keyspace.MaxKeyLen)
		}
		parts[i] = limited{rule: r, st: st, key: key, cost: cost, batch: -1, refund: d.GetIsNegativeHits()}
	}
	for i := range parts {
		if p := &parts[i]; p.rule != nil && p.rule.name != "" && replacing[p.rule.name] {
			p.rule = nil
		}
	}
	// A request refused within its retry is answered from memory, without a
	// server call (docs/windowstored.md, "The refusal cache").
	sig, cacheable := s.refusalKey(rt, domain, parts, unlimited)
	if cacheable {
		if d, ok := s.refusals.Refused(sig, 0, time.Now()); ok {
			resp, _ := answer(rt, parts, recalled(d, parts, unlimited))
			outcome = httplimit.LocalShed
			return resp, nil
		}
	}
	// The GCRA limits first, one call each, in order: each admitted cost is
	// a reservation, given back when a later limit refuses.
	gcra := make([]store.Decision, len(ds))
	var taken []int // GCRA costs admitted, to give back on a refusal
	giveBack := func() {
		// Not the caller's context: a give-back must outlive a call that
		// was cancelled or timed out, or its cost stays reserved.
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, i := range taken {
			p := parts[i]
			if _, err := limit.Refund(gctx, rt.gcra[p.rule], p.key, p.cost); err != nil {
				s.log.Warn("a GCRA cost could not be given back: it stays counted", "domain", domain, "rule", p.rule.path, "err", err)
			}
		}
	}
	refused := false // a GCRA limit refused
	for i := range parts {
		p := &parts[i]
		if p.rule == nil || !p.rule.gcra {
			continue
		}
		l := rt.gcra[p.rule]
		cost := p.cost
		if refused {
			cost = 0 // after a refusal, only ask
		}
		var d store.Decision
		var err error
		if p.refund {
			// is_negative_hits gives the cost back, whatever the decision,
			// and answers the state after: one call.
			if d, err = limit.Refund(ctx, l, p.key, p.cost); err == nil {
				cost = 0
			}
		} else {
			d, err = l.Allow(ctx, p.key, cost)
		}
		if err != nil {
			go giveBack()
			return s.failed(domain, &outcome, err)
		}
		gcra[i] = d
		switch {
		case d.Allowed && cost > 0:
			taken = append(taken, i)
		case !d.Allowed && !p.rule.shadow && !rt.cfg.settings.shadow:
			refused = true
		}
	}
	var batches []store.Batch
	// A descriptor repeated (the same limit and counter) counts as many
	// times as it appears, as envoyproxy/ratelimit counts it: one op of the
	// costs' total, each descriptor's status at its own running total.
	// firstOf is the batch of the first descriptor before i of p's limit
	// and counter (requests have few descriptors: a scan).
	firstOf := func(i int, p *limited) (int, bool) {
		for j := range i {
			if q := &parts[j]; q.rule == p.rule && q.key == p.key && !q.refund && q.batch >= 0 {
				return q.batch, true
			}
		}
		return 0, false
	}
	for i := range parts {
		p := &parts[i]
		if p.rule == nil || p.rule.gcra {
			continue
		}
		if !p.refund {
			if b, ok := firstOf(i, p); ok {
				p.batch = b
				op := &batches[b].Ops[0]
				p.cum = p.cost + op.Delta
				if refused {
					p.cum = 0
				}
				if p.cum > maxCost {
					outcome = httplimit.BadKey
					giveBack()
					return nil, status.Errorf(codes.InvalidArgument, "windowstored: descriptor %d: the costs of its repeats add up to more than 2^53", i)
				}
				op.Delta = p.cum
				continue
			}
			p.cum = p.cost
		}
		op := store.Op{Store: p.st, Key: p.key, Kind: store.OpLimit, Delta: p.cost, Limit: p.rule.limit}
		switch {
		case p.refund:
			op = store.Op{Store: p.st, Key: p.key, Kind: store.OpCount, Delta: -p.cost}
		case refused:
			op.Delta, p.cum = 0, 0 // a GCRA limit refused: only ask
		case p.rule.shadow || rt.cfg.settings.shadow:
			// A limit that never refuses: it counts when the request is
			// admitted, and its status says whether it would have refused.
			op.Limit = maxCost
		}
		p.batch = len(batches)
		batches = append(batches, store.Batch{Ops: []store.Op{op}})
	}
	var res []store.BatchResult
	asked := time.Now()
	if len(batches) > 0 {
		// A give-back lowers a counter: no refusal decided before it may be
		// answered again (refusal.Cache.ForgetAll, before and after).
		refunds := s.refusals != nil && slices.ContainsFunc(parts, func(p limited) bool { return p.refund && p.rule != nil && !p.rule.gcra })
		if refunds {
			s.refusals.ForgetAll()
		}
		var err error
		res, err = store.ApplyAll(ctx, batches...)
		if refunds {
			s.refusals.ForgetAll()
		}
		if err != nil {
			// The answer does not wait for the give-back: a call past its
			// --timeout answers now, and its reservations go back after.
			go giveBack()
			return s.failed(domain, &outcome, err)
		}
		refused = refused || slices.ContainsFunc(res, func(r store.BatchResult) bool { return !r.Allowed })
	}
	if refused {
		giveBack()
	} else {
		taken = nil
	}
	vs := make([]verdict, len(ds))
	retry := time.Duration(0) // the earliest retry of the window limits that refuse
	for i := range ds {
		p := parts[i]
		vs[i] = verdict{unlimited: unlimited[i], limited: !unlimited[i] && p.rule != nil}
		if !vs[i].limited {
			continue
		}
		limit := p.rule.limit
		shadow := p.rule.shadow || rt.cfg.settings.shadow
		var over bool
		var remaining int64
		var reset time.Duration
		if p.rule.gcra {
			d := gcra[i]
			over = !d.Allowed
			remaining, reset = d.Remaining, d.ResetAfter
			if slices.Contains(taken, i) {
				remaining = min(remaining+p.cost, p.rule.burst) // given back
			}
			if over {
				remaining = 0
				if !shadow && d.RetryAfter >= 0 {
					reset = d.RetryAfter
				} else if reset <= 0 {
					reset = p.rule.window.Length
				}
			}
		} else {
			v := res[p.batch].Values[0]
			// seen is the sum this descriptor's decision is about: before
			// the request, plus its own cost and those of its repeats
			// before it (one op of their total). left is what the limit
			// has counted after it: seen when counted (a running total, as
			// envoyproxy/ratelimit's), else the sum before the request.
			seen, left := v.Sum, v.Sum
			if !p.refund {
				if v.Counted {
					seen -= batches[p.batch].Ops[0].Delta
				}
				seen += p.cum
				if v.Counted {
					left = seen
				}
			}
			over = v.Refused && seen > limit
			if shadow && !p.refund {
				// A shadow limit would refuse when its sum passes the limit.
				over = seen > limit
			}
			remaining = min(max(limit-left, 0), limit)
			reset = v.ResetAfter
			if reset <= 0 && p.rule.window.Bucket == p.rule.window.Length {
				// A fixed window that counts nothing of this descriptor:
				// as envoyproxy/ratelimit, the window's end.
				reset = fixedEnd(p.rule.window, time.Now())
			}
			if over {
				remaining = 0
				// A refusal that waiting settles: when the cost fits. A
				// shadow limit's, or a cost that never fits: as envoyproxy/
				// ratelimit, when what is counted now has left the window
				// (for a fixed window, the window's end).
				if !shadow && v.RetryAfter >= 0 {
					reset = v.RetryAfter
				} else if reset <= 0 {
					reset = p.rule.window.Length
				}
				if !p.rule.shadow && v.RetryAfter > 0 && (retry == 0 || v.RetryAfter < retry) {
					retry = v.RetryAfter
				}
			}
		}
		vs[i].over, vs[i].refusing, vs[i].remaining, vs[i].reset = over, over && !p.rule.shadow, remaining, reset
	}
	resp, out := answer(rt, parts, vs)
	outcome = out
	if cacheable && out == httplimit.Refused && retry > 0 {
		s.refusals.Remember(sig, 0, asked, time.Now(), remembered(vs, retry))
	}
	return resp, nil
}

// fixedEnd is the time from now to the end of the fixed window w (one bucket
// of its unit) that holds now, on windowstored's clock: buckets start at
// multiples of the bucket within each UTC year (fieldcodec), and a year's last
// bucket ends with the year.
func fixedEnd(w store.Window, now time.Time) time.Duration {
	c, err := fieldcodec.New(w.Bucket)
	if err != nil {
		return w.Length
	}
	start, err := c.Start(c.Code(now), now)
	if err != nil {
		return w.Length
	}
	end := start.Add(w.Bucket)
	if ny := time.Date(now.UTC().Year()+1, time.January, 1, 0, 0, 0, 0, time.UTC); end.After(ny) {
		end = ny
	}
	return end.Sub(now)
}

// verdict is one descriptor's part of a decision, as its status shows it.
type verdict struct {
	unlimited bool // its rule is unlimited
	limited   bool // it has a limit: a rule matched, not unlimited
	over      bool // its limit refuses, or (a shadow limit) would
	refusing  bool // over, and its rule enforces it
	remaining int64
	reset     time.Duration
}

// answer is the response of a request whose descriptors' parts decided vs,
// and its outcome.
func answer(rt *runtime, parts []limited, vs []verdict) (*rlspb.RateLimitResponse, httplimit.Outcome) {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK, Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(vs))}
	// The descriptor the headers describe: the refusing one with the latest
	// retry, else the one with the least remaining.
	pick, pickRefusing, pickRemaining, pickReset := -1, false, int64(0), time.Duration(0)
	wouldRefuse := false
	for i, v := range vs {
		switch {
		case v.unlimited:
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
			continue
		case !v.limited:
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
			continue
		}
		r := parts[i].rule
		st := &rlspb.RateLimitResponse_DescriptorStatus{
			Code:               rlspb.RateLimitResponse_OK,
			CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{Name: r.name, RequestsPerUnit: uint32(r.limit), Unit: r.unit},
			LimitRemaining:     uint32(min(v.remaining, math.MaxUint32)),
			DurationUntilReset: durationpb.New(v.reset.Truncate(time.Millisecond)),
		}
		switch {
		case v.refusing:
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		case v.over:
			wouldRefuse = true // a shadow limit's status stays OK, as envoyproxy/ratelimit's
		}
		resp.Statuses[i] = st
		better := pick < 0 || v.refusing != pickRefusing && v.refusing ||
			v.refusing == pickRefusing && (v.refusing && v.reset > pickReset || !v.refusing && v.remaining < pickRemaining)
		if better {
			pick, pickRefusing, pickRemaining, pickReset = i, v.refusing, v.remaining, v.reset
		}
	}
	outcome := httplimit.Allowed
	switch {
	case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && rt.cfg.settings.shadow:
		// Global shadow mode: the statuses say which limits would refuse,
		// and the request goes through.
		resp.OverallCode = rlspb.RateLimitResponse_OK
		outcome = httplimit.ShadowRefused
	case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
		outcome = httplimit.Refused
	case wouldRefuse:
		outcome = httplimit.ShadowRefused
	}
	if pick >= 0 {
		if rt.cfg.settings.headers == "envoy" {
			pick = envoyPick(resp.Statuses)
		}
		resp.ResponseHeadersToAdd = headers(rt.cfg.settings.headers, parts[pick].rule, resp.Statuses[pick])
	}
	return resp, outcome
}

// maxRefusalKey bounds a refusal cache key: a request of more descriptors
// than that holds always asks the server.
const maxRefusalKey = 4096

// refusalKey is the refusal cache's key of a request (--refusal-cache): its
// domain and, per descriptor, its limit, counter and cost. ok is false for a
// request the cache does not answer: with the cache off, in global shadow
// mode, with a GCRA limit (its limiter keeps refusals of its own) or a
// give-back (is_negative_hits writes whatever the decision), or a key over
// maxRefusalKey bytes.
func (s *server) refusalKey(rt *runtime, domain string, parts []limited, unlimited []bool) (string, bool) {
	if s.refusals == nil || rt.cfg.settings.shadow {
		return "", false
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, p := range parts {
		switch {
		case unlimited[i]:
			b.WriteString("\x00u")
			continue
		case p.rule == nil:
			b.WriteString("\x00-")
			continue
		case p.rule.gcra || p.refund:
			return "", false
		}
		r := p.rule
		fmt.Fprintf(&b, "\x00%s\x00%s\x00%d\x00%d\x00%s\x00%t\x00%d\x00%s", r.path, r.name, r.limit, r.unit, r.window, r.shadow, p.cost, p.key)
		if b.Len() > maxRefusalKey {
			return "", false
		}
	}
	return b.String(), true
}

// remembered is the refusal cache's entry of a refused request's verdicts,
// held for retry (the earliest of its refusing limits' retries): one Policy
// per descriptor.
func remembered(vs []verdict, retry time.Duration) store.Decision {
	d := store.Decision{RetryAfter: retry, Policies: make([]store.Decision, len(vs))}
	for i, v := range vs {
		d.Policies[i] = store.Decision{Allowed: !v.refusing, WouldRefuse: v.over && !v.refusing, Remaining: v.remaining, ResetAfter: v.reset}
	}
	return d
}

// recalled is the verdicts of a request answered from the refusal cache:
// the remembered ones (see remembered), their resets counted down.
func recalled(d store.Decision, parts []limited, unlimited []bool) []verdict {
	vs := make([]verdict, len(parts))
	for i, p := range d.Policies {
		vs[i] = verdict{unlimited: unlimited[i], limited: !unlimited[i] && parts[i].rule != nil,
			over: !p.Allowed || p.WouldRefuse, refusing: !p.Allowed, remaining: p.Remaining, reset: p.ResetAfter}
	}
	return vs
}

// failed answers a decision the server could not make, as the settings'
// on_error says: a gRPC UNAVAILABLE (Envoy's failure_mode_deny then decides),
// OK, or OVER_LIMIT.
func (s *server) failed(domain string, outcome *httplimit.Outcome, err error) (*rlspb.RateLimitResponse, error) {
	rt := s.rt.Load()
	if errors.Is(err, store.ErrInvalid) {
		// Input the store refuses is the client's: never on_error's.
		*outcome = httplimit.BadKey
		return nil, status.Error(codes.InvalidArgument, "windowstored: "+strings.TrimPrefix(err.Error(), "windowstored: "))
	}
	s.log.Warn("decision failed", "domain", domain, "on_error", rt.cfg.settings.onError, "err", err)
	switch rt.cfg.settings.onError {
	case "allow":
		*outcome = httplimit.FailedOpen
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}, nil
	case "deny":
		*outcome = httplimit.FailedClosed
		return &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OVER_LIMIT}, nil
	}
	*outcome = httplimit.FailedClosed
	// A deadline passed is --timeout's (the caller's own has already ended
	// the call for it): the server did not answer in time, UNAVAILABLE.
	code := codes.Unavailable
	if errors.Is(err, context.Canceled) {
		code = codes.Canceled
	}
	return nil, status.Error(code, "windowstored: "+strings.TrimPrefix(err.Error(), "windowstored: "))
}

// overrideRule is the rule of a descriptor that carries its own limit, a
// window of its unit, in place of the configured rule it matched (nil: none).
// It keeps that rule's algorithm when it is a fixed or sliding window, and of
// the same unit its window too, so that both count in one counter, as
// envoyproxy/ratelimit's limits of one descriptor and unit share theirs;
// otherwise (no rule, GCRA, unlimited) it is a sliding window of its unit,
// or with fixed (override_algorithm: fixed) a fixed one, as envoyproxy/ratelimit's.
// envoy.type.v3.RateLimitUnit numbers its units as the response's
// RateLimit.Unit does.
func overrideRule(domain string, o *ratelimitpb.RateLimitDescriptor_RateLimitOverride, matched *rule, fixed bool) (*rule, error) {
	u := rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	length := unitLength(u)
	if length == 0 {
		return nil, fmt.Errorf("limit override: unit %v: want SECOND, MINUTE, HOUR, DAY, WEEK or MONTH", o.GetUnit())
	}
	w := store.Window{Length: length, Bucket: defaultBucket(length)}
	if fixed {
		w.Bucket = length
	}
	if matched != nil && !matched.gcra && !matched.unlimited {
		switch {
		case matched.window.Length == length:
			w = matched.window
		case matched.window.Bucket == matched.window.Length:
			w.Bucket = length // fixed, as the rule it replaces
		default:
			w.Bucket = defaultBucket(length) // sliding, as the rule it replaces
		}
	}
	r := &rule{path: domain + " (override)", limit: int64(o.GetRequestsPerUnit()), unit: u, window: w}
	if err := r.window.Validate(); err != nil {
		return nil, fmt.Errorf("limit override: unit %v: a window is at most 180 days (%w)", o.GetUnit(), err)
	}
	return r, nil
}

// envoyPick is the status envoyproxy/ratelimit's header fields describe: the
// last one over its limit, else the first with the least remaining, of those
// with a limit.
func envoyPick(sts []*rlspb.RateLimitResponse_DescriptorStatus) int {
	pick, least := -1, uint32(math.MaxUint32)
	for i, st := range sts {
		switch {
		case st.CurrentLimit == nil:
		case st.Code == rlspb.RateLimitResponse_OVER_LIMIT:
			pick, least = i, 0
		case st.LimitRemaining < least || pick < 0:
			pick, least = i, st.LimitRemaining
		}
	}
	return pick
}

// headers are the response header fields Envoy adds to the client's response,
// about one descriptor: the IETF RateLimit-Policy and RateLimit fields, and
// or instead the common X-RateLimit-Limit, -Remaining and -Reset; or
// envoyproxy/ratelimit's RateLimit-Limit, -Remaining and -Reset (its
// LIMIT_RESPONSE_HEADERS_ENABLED).
func headers(kind string, r *rule, st *rlspb.RateLimitResponse_DescriptorStatus) []*corepb.HeaderValue {
	if kind == "none" {
		return nil
	}
	name := r.name
	if name == "" {
		name = "default"
	}
	reset := strconv.FormatInt(int64(math.Ceil(st.GetDurationUntilReset().AsDuration().Seconds())), 10)
	limit := strconv.FormatInt(r.limit, 10)
	remaining := strconv.FormatUint(uint64(st.GetLimitRemaining()), 10)
	var hs []*corepb.HeaderValue
	if kind == "ietf" || kind == "both" {
		q := strconv.Quote(name)
		hs = append(hs,
			&corepb.HeaderValue{Key: "RateLimit-Policy", Value: q + ";q=" + limit + ";w=" + strconv.FormatInt(int64(r.window.Length/time.Second), 10)},
			&corepb.HeaderValue{Key: "RateLimit", Value: q + ";r=" + remaining + ";t=" + reset})
	}
	if kind == "legacy" || kind == "both" {
		hs = append(hs,
			&corepb.HeaderValue{Key: "X-RateLimit-Limit", Value: limit},
			&corepb.HeaderValue{Key: "X-RateLimit-Remaining", Value: remaining},
			&corepb.HeaderValue{Key: "X-RateLimit-Reset", Value: reset})
	}
	if kind == "envoy" {
		hs = append(hs,
			&corepb.HeaderValue{Key: "RateLimit-Limit", Value: limit},
			&corepb.HeaderValue{Key: "RateLimit-Remaining", Value: remaining},
			&corepb.HeaderValue{Key: "RateLimit-Reset", Value: reset})
	}
	return hs
}
