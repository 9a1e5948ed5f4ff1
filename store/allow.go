package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
)

// maxExact is 2^53: the largest limit and cost Allow takes.
const maxExact = 1 << 53

// Decision is the answer to "may this cost be spent now?": what Allow, Record
// with a Limit, and AllowAll decide, and what every limiter of package limit,
// the limits of package features and package httplimit report. One type, so
// that a decision reads the same wherever it was made.
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
type Decision struct {
	// Allowed reports whether the cost was counted. In the example: true, then
	// false. A write without a limit (Record with no Limit) is always allowed.
	Allowed bool
	// Limit is the limit the decision was made against: 10.
	Limit int64
	// Sum is the window sum after the decision: it includes the cost when
	// allowed. In the example 10, then still 10. It can be negative when
	// negative amounts were added (Add with a negative delta): they are
	// credits, and let more cost in. Limiters whose state is not a sum (a
	// GCRA) leave it 0.
	Sum int64
	// Remaining is how much more cost fits now: Limit - Sum, kept within
	// [0, Limit] (a negative Sum does not make it exceed the limit, since no
	// single cost above the limit is ever allowed). 0, then 0.
	Remaining int64
	// RetryAfter is 0 when allowed. When refused, it is the time until enough
	// buckets have left the window for the same cost to fit, if nothing else is
	// counted meanwhile: 30s in the example. A retry at that moment succeeds
	// and one a millisecond earlier fails. It is never more than the window.
	// It is -1 when the cost can never fit, because it is larger than the limit.
	RetryAfter time.Duration
	// ResetAfter is the time until every bucket counted now has left the window,
	// when the sum returns to 0 if nothing else is counted: 10m in the example.
	ResetAfter time.Duration
	// Duplicate reports that the event's id (Event.ID) was seen before:
	// nothing was counted now, and Allowed is the first call's decision.
	Duplicate bool
	// Policy names the policy the decision is about: a limiter's name (package
	// limit), a feature's (package features), a rule's (package httplimit),
	// or, for AllowAll's policies, the counter's key (and Sub name) and
	// window ("login:42 10m0s/1m0s"). Of a decision of several policies, the one that decides:
	// the refusing one with the latest retry, or else the one with the least
	// remaining. Empty for Allow and Record.
	Policy string
	// Policies has, for a decision of several policies (AllowAll,
	// limit.Combine), each one's own decision, in order; its Allowed says
	// whether that policy admitted the cost. Nil otherwise.
	Policies []Decision
	// WouldRefuse reports a refusal that was not enforced: the decision of a
	// shadow limiter (limit.Shadow) or of an httplimit shadow rule, which
	// refused the cost and counted nothing, but lets the request through.
	// Allowed is then true, and Remaining, RetryAfter and ResetAfter are the
	// refusal's.
	WouldRefuse bool
	// Degraded reports a decision made in process while the server failed (a
	// limiter of limit.Degrade): enforced, on this instance's share of the
	// limit, and not counted on the server.
	Degraded bool
}

// Allow counts cost into key only if the window sum stays at or under limit,
// atomically: of many concurrent calls, exactly as many are allowed as fit. A
// refused call writes nothing. A cost of 0 only asks whether sum <= limit.
// Limit and cost must be between 0 and 2^53. A cost above the limit is never
// allowed, whatever the sum (RetryAfter -1). The decision is exact for every
// sum the counter can hold, beyond 2^53 included.
//
// On an Over view, Allow limits the tier whose window is the view's span
// (ErrInvalid if no tier has that window); the cost counts in every tier.
func (s *Store) Allow(ctx context.Context, key string, limit, cost int64) (_ Decision, err error) {
	ctx, end := s.start(ctx, "allow")
	defer func() { end(err) }()
	if len(s.tiers) > 1 || s.over != 0 {
		r, err := allowAll(ctx, "", cost, []Quota{{Store: s, Key: key, Limit: limit}})
		return r, rename(err, "allow")
	}
	if limit < 0 || limit > maxExact || cost < 0 || cost > maxExact {
		return Decision{}, invalid("allow", key, "limit "+strconv.FormatInt(limit, 10)+" and cost "+
			strconv.FormatInt(cost, 10)+" must be within [0, 2^53]")
	}
	rk, err := s.redisKey(key, s.tag)
	if err != nil {
		return Decision{}, rename(err, "allow")
	}
	msg, err := s.run(ctx, s.counterKeys(rk, s.tag), s.header(), false, backend.OpAllow, s.shape,
		strconv.FormatInt(limit, 10), strconv.FormatInt(cost, 10))
	if err != nil {
		return Decision{}, fail("allow", key, s.be.Write, err)
	}
	r, err := decision(msg, limit)
	return r, fail("allow", key, nil, err)
}

// decision reads Allow's reply: allowed, sum, retry ms, reset ms.
func decision(v []rueidis.RedisMessage, limit int64) (Decision, error) {
	if len(v) != 4 {
		return Decision{}, errors.New("unexpected allow reply")
	}
	allowed, err1 := v[0].AsInt64()
	sum, err2 := sumOf(v[1])
	retry, err3 := v[2].AsInt64()
	reset, err4 := v[3].AsInt64()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Decision{}, errors.New("unexpected allow reply")
	}
	r := Decision{
		Allowed:    allowed == 1,
		Limit:      limit,
		Sum:        sum,
		Remaining:  remaining(limit, sum),
		RetryAfter: time.Duration(retry) * time.Millisecond,
		ResetAfter: time.Duration(reset) * time.Millisecond,
	}
	if retry < 0 {
		r.RetryAfter = -1
	}
	return r, nil
}

// remaining is limit - sum within [0, limit], without overflow for any sum.
func remaining(limit, sum int64) int64 {
	switch {
	case sum <= 0:
		return limit
	case sum >= limit:
		return 0
	}
	return limit - sum
}
