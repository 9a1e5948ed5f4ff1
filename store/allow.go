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
	// allowed. In the example 10, then still 10. It can be negative when
	// negative amounts were added (Add with a negative delta): they are
	// credits, and let more cost in.
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
	// Duplicate reports, for AllowEvent, that the event's id was seen before:
	// nothing was counted now, and Allowed is the first call's decision.
	Duplicate bool
	// Policies has, for AllowAll with several policies, each one's figures;
	// the fields above are those of the policy that decides. Nil otherwise.
	Policies []PolicyResult
	// RefusedBy is, for AllowAll, the index in Policies of the policy whose
	// refusal decides (the latest to admit); -1 when allowed.
	RefusedBy int
}

// Allow counts cost into key only if the window sum stays at or under limit,
// atomically: of many concurrent calls, exactly as many are allowed as fit. A
// refused call writes nothing. A cost of 0 only asks whether sum <= limit.
// Limit and cost must be between 0 and 2^53. A cost above the limit is never
// allowed, whatever the sum (RetryAfter -1). The decision is exact for every
// sum the counter can hold, beyond 2^53 included.
func (s *Store) Allow(ctx context.Context, key string, limit, cost int64) (Result, error) {
	return s.allow(ctx, nil, key, limit, cost)
}

// AllowAt is Allow at instant t on the client's clock.
func (s *Store) AllowAt(ctx context.Context, t time.Time, key string, limit, cost int64) (Result, error) {
	return s.allow(ctx, &t, key, limit, cost)
}

func (s *Store) allow(ctx context.Context, at *time.Time, key string, limit, cost int64) (_ Result, err error) {
	ctx, end := s.start(ctx, "allow")
	defer func() { end(err) }()
	if len(s.tiers) > 1 {
		r, err := allowAll(ctx, at, "", cost, []Policy{{Store: s, Key: key, Limit: limit}})
		return r, rename(err, "allow")
	}
	if limit < 0 || limit > maxExact || cost < 0 || cost > maxExact {
		return Result{}, invalid("allow", key, "limit "+strconv.FormatInt(limit, 10)+" and cost "+
			strconv.FormatInt(cost, 10)+" must be within [0, 2^53]")
	}
	rk, err := s.redisKey(key, s.tag)
	if err != nil {
		return Result{}, rename(err, "allow")
	}
	msg, err := s.run(ctx, []string{rk}, s.header(at), false, backend.OpAllow, s.shape,
		strconv.FormatInt(limit, 10), strconv.FormatInt(cost, 10))
	if err != nil {
		return Result{}, fail("allow", key, s.be.Write, err)
	}
	r, err := decision(msg, limit)
	return r, fail("allow", key, nil, err)
}

// decision reads Allow's reply {allowed, sum, retry ms, reset ms}.
func decision(msg rueidis.RedisMessage, limit int64) (Result, error) {
	v, err := msg.ToArray()
	if err != nil || len(v) != 4 {
		return Result{}, errors.New("unexpected allow reply " + msg.String())
	}
	allowed, err1 := v[0].AsInt64()
	sum, err2 := sumOf(v[1])
	retry, err3 := v[2].AsInt64()
	reset, err4 := v[3].AsInt64()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Result{}, errors.New("unexpected allow reply " + msg.String())
	}
	r := Result{
		Allowed:    allowed == 1,
		Limit:      limit,
		Sum:        sum,
		Remaining:  remaining(limit, sum),
		RetryAfter: time.Duration(retry) * time.Millisecond,
		ResetAfter: time.Duration(reset) * time.Millisecond,
		RefusedBy:  -1,
	}
	if allowed != 1 {
		r.RefusedBy = 0
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
