package limit

import (
	"context"
	"time"

	"github.com/windowstore/windowstore/store"
)

// NewSlidingWindow returns a limiter on a store's bucketed sliding window: at
// most limit per st.Window().Length, at bucket precision (a bucket is live while
// it starts after now - Length, so the window never over-counts). Memory is one
// hash field per bucket whatever the rate. The counter of key is the store's
// counter of key in the view st.Sub(name), so limiters of different names
// never share one. It takes no options: the store has them.
func NewSlidingWindow(st *store.Store, name string, limit int64, opts ...Option) (Limiter, error) {
	if st == nil {
		return nil, newError(name, store.ErrInvalid, "nil store")
	}
	if err := check(name, limit, st.Window().Length); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.prefix != "" || o.observer != nil || o.degrade {
		return nil, newError(name, store.ErrInvalid, "a sliding window takes its options from its store, but WithRefusalCache")
	}
	return &slidingWindow{st: st.Sub(name), policy: Policy{Name: name, Limit: limit, Window: st.Window().Length, Algorithm: "sliding-window"},
		refusals: newRefusals(&o)}, nil
}

type slidingWindow struct {
	st       *store.Store
	policy   Policy
	refusals refusals
}

func (l *slidingWindow) Policy() Policy { return l.policy }

func (l *slidingWindow) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	cached, asked, ok := l.refusals.refused(ctx, true, key, n)
	if ok {
		return cached, nil
	}
	d, err := l.decision(l.st.Allow(ctx, key, l.policy.Limit, n))
	if err == nil {
		l.refusals.remember(true, key, n, asked, d)
	}
	return d, err
}

func (l *slidingWindow) AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error) {
	return l.decision(l.st.At(t).Allow(ctx, key, l.policy.Limit, n))
}

// decision labels the store's decision with the policy's name.
func (l *slidingWindow) decision(r store.Decision, err error) (store.Decision, error) {
	if err != nil {
		return store.Decision{}, err
	}
	r.Policy = l.policy.Name
	return r, nil
}
