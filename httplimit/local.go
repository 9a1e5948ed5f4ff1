package httplimit

import (
	"sync"
	"time"
)

// LocalTier remembers, in process memory, keys that a limiter refused, until
// their retry-after has passed, and refuses them again without a server call.
// It sheds attack traffic cheaply. It never admits anything on its own, so it
// can never make the middleware admit more than the limits: at worst it
// refuses a smaller request that the server would have let through early.
//
// It holds at most the number of keys given to NewLocalTier (default
// 100,000); when full it forgets expired
// entries, and if none have expired it stops remembering new ones. The zero
// value is not usable; create one with NewLocalTier. It is safe for concurrent
// use.
type LocalTier struct {
	mu   sync.Mutex
	size int
	m    map[string]localEntry
}

type localEntry struct {
	until  time.Time
	policy string
	cost   int64
}

// NewLocalTier returns a local tier that holds at most size keys (0 means 100,000).
func NewLocalTier(size int) *LocalTier {
	if size <= 0 {
		size = 100000
	}
	return &LocalTier{size: size, m: make(map[string]localEntry)}
}

// refused reports whether key is known to be refused for this cost at now, and by
// which policy until when.
func (t *LocalTier) refused(key string, cost int64, now time.Time) (string, time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.m[key]
	if !ok {
		return "", time.Time{}, false
	}
	if !now.Before(e.until) {
		delete(t.m, key)
		return "", time.Time{}, false
	}
	// A refusal for cost c says nothing about a smaller cost.
	if cost < e.cost {
		return "", time.Time{}, false
	}
	return e.policy, e.until, true
}

func (t *LocalTier) remember(key string, policy string, cost int64, now, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.m[key]; !ok && len(t.m) >= t.size {
		for k, e := range t.m {
			if !now.Before(e.until) {
				delete(t.m, k)
			}
		}
		if len(t.m) >= t.size {
			return
		}
	}
	t.m[key] = localEntry{until: until, policy: policy, cost: cost}
}

// Len returns how many keys the tier remembers now.
func (t *LocalTier) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
