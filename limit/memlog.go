package limit

import (
	"sync"
	"time"

	"github.com/windowstore/windowstore/store"
)

// memLog is the in-process limiter of a Degraded limiter: an exact sliding
// log per key, in memory, for one or more policies decided together (all or
// nothing), as the Log limiter keeps on the server. An event at ms s is live
// while s > now - window, so it leaves at s + window. Events of one ms are
// kept as one entry, so a key holds at most min(limit, window in ms) entries
// per policy.
//
// It holds at most max keys; when full, it forgets keys whose events have
// all left, and if none have, it refuses to take a new key (allow reports
// false). It is safe for concurrent use.
type memLog struct {
	mu        sync.Mutex
	policies  []memPolicy
	max       int
	keys      map[string][][]memEvent // per key, per policy, oldest first
	nextSweep int64                   // ms: when full, no sweep before then
}

type memPolicy struct {
	name   string
	limit  int64 // this instance's share
	window int64 // ms
}

type memEvent struct {
	at int64 // ms
	n  int64
}

func newMemLog(policies []memPolicy, max int) *memLog {
	return &memLog{policies: policies, max: max, keys: make(map[string][][]memEvent)}
}

// allow decides n units of cost for key at now on every policy, and records
// them in every policy if every one admits them. ok is false when the log is
// full and key is new: nothing was decided.
func (m *memLog) allow(now time.Time, key string, n int64) (d store.Decision, ok bool) {
	t := now.UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	logs, found := m.keys[key]
	if !found {
		if len(m.keys) >= m.max {
			m.sweep(t)
			if len(m.keys) >= m.max {
				return store.Decision{}, false
			}
		}
		logs = make([][]memEvent, len(m.policies))
	}
	ds := make([]store.Decision, len(m.policies))
	admit := true
	for i, p := range m.policies {
		logs[i] = live(logs[i], t-p.window)
		ds[i] = p.decide(logs[i], t, n)
		admit = admit && ds[i].Allowed
	}
	if admit && n > 0 {
		for i, p := range m.policies {
			logs[i] = record(logs[i], t, n)
			count := sum(logs[i])
			ds[i].Remaining = max(0, p.limit-count)
			ds[i].ResetAfter = time.Duration(logs[i][len(logs[i])-1].at+p.window-t) * time.Millisecond
		}
	}
	if found || (admit && n > 0) {
		m.keys[key] = logs
	}
	// The deciding policy: on a refusal, the one that frees up last (-1, never,
	// first); else the one with the least remaining.
	pick := 0
	for i := 1; i < len(ds); i++ {
		if admit && ds[i].Remaining < ds[pick].Remaining {
			pick = i
		}
		if !admit && later(ds[i].RetryAfter, ds[pick].RetryAfter) {
			pick = i
		}
	}
	d = ds[pick]
	if len(ds) > 1 {
		d.Policies = ds
	}
	return d, true
}

// later reports whether retry a comes after b; -1 (never) comes after all.
func later(a, b time.Duration) bool {
	if b < 0 {
		return false
	}
	return a < 0 || a > b
}

// decide is the policy's decision for n more units on its live events.
func (p memPolicy) decide(evs []memEvent, t, n int64) store.Decision {
	count := sum(evs)
	d := store.Decision{Policy: p.name, Limit: p.limit, Remaining: max(0, p.limit-count), Allowed: true}
	if len(evs) > 0 {
		d.ResetAfter = time.Duration(evs[len(evs)-1].at+p.window-t) * time.Millisecond
	}
	switch {
	case count+n <= p.limit:
	case n > p.limit:
		d.Allowed, d.RetryAfter = false, -1
	default:
		// It fits once count + n - limit of the oldest units have left.
		need, freed := count+n-p.limit, int64(0)
		for _, e := range evs {
			if freed += e.n; freed >= need {
				d.Allowed, d.RetryAfter = false, time.Duration(e.at+p.window-t)*time.Millisecond
				break
			}
		}
	}
	return d
}

// live drops the events at or before edge.
func live(evs []memEvent, edge int64) []memEvent {
	i := 0
	for i < len(evs) && evs[i].at <= edge {
		i++
	}
	if i == len(evs) {
		return evs[:0]
	}
	return evs[i:]
}

// record adds n units at t, keeping the events in time order (a client clock,
// AllowAt, may go back).
func record(evs []memEvent, t, n int64) []memEvent {
	i := len(evs)
	for i > 0 && evs[i-1].at > t {
		i--
	}
	if i > 0 && evs[i-1].at == t {
		evs[i-1].n += n
		return evs
	}
	evs = append(evs, memEvent{})
	copy(evs[i+1:], evs[i:])
	evs[i] = memEvent{at: t, n: n}
	return evs
}

func sum(evs []memEvent) int64 {
	var s int64
	for _, e := range evs {
		s += e.n
	}
	return s
}

// sweep forgets the keys whose events have all left, at most once per 100 ms
// while the log stays full.
func (m *memLog) sweep(t int64) {
	if t < m.nextSweep {
		return
	}
	for k, logs := range m.keys {
		empty := true
		for i, p := range m.policies {
			if len(live(logs[i], t-p.window)) > 0 {
				empty = false
				break
			}
		}
		if empty {
			delete(m.keys, k)
		}
	}
	if len(m.keys) >= m.max {
		m.nextSweep = t + 100
	}
}

// len returns how many keys the log holds.
func (m *memLog) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys)
}
