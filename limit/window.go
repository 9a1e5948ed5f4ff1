package limit

import (
	"context"
	"fmt"
	"time"

	"github.com/windowstore/windowstore/store"
)

// NewSlidingWindow returns a limiter on a store's bucketed sliding window: at
// most limit per st.Window().Length, at bucket precision (a bucket is live while
// it starts after now - Length, so the window never over-counts). Memory is one
// hash field per bucket whatever the rate. The counter of key is the store's
// counter name + ":" + key, so limiters of different names never share one.
func NewSlidingWindow(st *store.Store, name string, limit int64) (Limiter, error) {
	if st == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if err := check(name, limit, st.Window().Length); err != nil {
		return nil, err
	}
	return &slidingWindow{st: st, policy: Policy{Name: name, Limit: limit, Window: st.Window().Length, Algorithm: "sliding-window"}}, nil
}

type slidingWindow struct {
	st     *store.Store
	policy Policy
}

func (l *slidingWindow) Policy() Policy { return l.policy }

func (l *slidingWindow) Allow(ctx context.Context, key string, n int64) (Decision, error) {
	r, err := l.st.Allow(ctx, l.policy.Name+":"+key, l.policy.Limit, n)
	return l.decision(r, err)
}

func (l *slidingWindow) AllowAt(ctx context.Context, t time.Time, key string, n int64) (Decision, error) {
	r, err := l.st.AllowAt(ctx, t, l.policy.Name+":"+key, l.policy.Limit, n)
	return l.decision(r, err)
}

func (l *slidingWindow) decision(r store.Result, err error) (Decision, error) {
	if err != nil {
		return Decision{}, fmt.Errorf("limit: %s: %w", l.policy.Name, err)
	}
	return Decision{Allowed: r.Allowed, Limit: r.Limit, Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}, nil
}
