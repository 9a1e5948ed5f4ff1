package limit

import (
	"context"
	"time"

	"github.com/windowstore/windowstore/store"
)

// multi is the Limiter Combine returns: sliding windows decided together.
type multi struct {
	parts    []*slidingWindow
	refusals refusals
}

// Combine returns one Limiter of several sliding-window policies decided
// together, atomically, in one script and one round trip (store.AllowAll):
// for example 5 per minute, 100 per hour and 1,000 per day for one key. A
// request's cost is counted in every policy only if every policy admits it;
// a refusal by any one writes nothing anywhere. Of 40 concurrent callers,
// exactly as many are admitted as the tightest policy allows. Its Policy is
// the policy with the smallest limit per unit of time; its Decision is the
// deciding policy's, and lists every policy's own in Policies (Policies(l)
// lists the policies).
//
// The limiters are sliding windows (NewSlidingWindow) or limiters Combine
// returned, whose policies join in order; their names must differ. Other
// algorithms cannot be combined atomically: Combine refuses them with
// store.ErrInvalid. For several windows of one key that no store reads as
// sums, NewWindows is the limiter to use: one counter, and less server time.
//
// The policies' counters of one key share the key's Redis Cluster slot (each
// is prefix + "{" + key + "}:" + name + ":" + shape), so the combination
// decides on a cluster in one script too. Policies on stores of different
// clients are decided as store.AllowAll decides across servers: all or
// nothing still, in more round trips. A combination whose parts share one
// client remembers its refusals in a RefusalCache of its own; one across
// clients asks the servers every time. It is safe for concurrent use.
func Combine(limiters ...Limiter) (Limiter, error) {
	if len(limiters) == 0 {
		return nil, newError("combine", store.ErrInvalid, "no limiter")
	}
	m := &multi{}
	names := map[string]bool{}
	for _, l := range limiters {
		parts, ok := slidingParts(l)
		if !ok {
			name := "?"
			if l != nil {
				name = l.Policy().Name
			}
			return nil, newError(name, store.ErrInvalid, "only sliding-window limiters combine atomically")
		}
		for _, sw := range parts {
			if names[sw.policy.Name] {
				return nil, newError(sw.policy.Name, store.ErrInvalid, "two policies of one name")
			}
			names[sw.policy.Name] = true
			m.parts = append(m.parts, sw)
		}
	}
	// A refusal is remembered only where one script call decides: across
	// clients, a refusal can come from another call's reservation that is
	// taken back, and a fresh call could then admit.
	if ps := m.storePolicies(nil, "k"); store.OneCall(store.Op{Store: ps[0].Store, Key: "k"}, ps...) {
		m.refusals = newRefusals(&options{})
	}
	return m, nil
}

// slidingParts returns the sliding windows l decides: l itself, or a
// combination's parts; ok is false for any other limiter.
func slidingParts(l Limiter) (_ []*slidingWindow, ok bool) {
	switch v := l.(type) {
	case *slidingWindow:
		return []*slidingWindow{v}, true
	case *multi:
		return v.parts, true
	}
	return nil, false
}

// policies returns every policy, in order.
func (m *multi) policies() []Policy {
	out := make([]Policy, len(m.parts))
	for i, p := range m.parts {
		out[i] = p.policy
	}
	return out
}

// Policy returns the policy with the smallest limit per unit of time, the one
// most likely to refuse.
func (m *multi) Policy() Policy {
	best := m.parts[0].policy
	for _, p := range m.parts[1:] {
		if float64(p.policy.Limit)/float64(p.policy.Window) < float64(best.Limit)/float64(best.Window) {
			best = p.policy
		}
	}
	return best
}

// Allow admits n units of cost for key in every policy, or in none, on the
// server's clock. The store.Decision is the deciding policy's (see AllowAll), and
// lists every policy's own in Policies.
func (m *multi) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	return m.allow(ctx, nil, key, n)
}

// AllowAt is Allow at instant t on the client's clock.
func (m *multi) AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error) {
	return m.allow(ctx, &t, key, n)
}

func (m *multi) allow(ctx context.Context, at *time.Time, key string, n int64) (store.Decision, error) {
	cached, asked, ok := m.refusals.refused(ctx, at == nil, key, n)
	if ok {
		return cached, nil
	}
	d, err := store.AllowAll(ctx, n, m.storePolicies(at, key)...)
	if err != nil {
		return store.Decision{}, err
	}
	d = m.named(d)
	m.refusals.remember(at == nil, key, n, asked, d)
	return d, nil
}

// storePolicies are the store's policies of key: one per part, at instant at
// (nil: the server's clock).
func (m *multi) storePolicies(at *time.Time, key string) []store.Quota {
	ps := make([]store.Quota, len(m.parts))
	for i, p := range m.parts {
		st := p.st
		if at != nil {
			st = st.At(*at)
		}
		ps[i] = store.Quota{Store: st, Key: key, Limit: p.policy.Limit}
	}
	return ps
}

// named labels a decision of store.AllowAll over storePolicies with the
// parts' policy names.
func (m *multi) named(d store.Decision) store.Decision {
	names := make([]string, len(m.parts))
	for i, p := range m.parts {
		names[i] = p.policy.Name
	}
	return relabel(d, names)
}

// relabel names a decision of store.AllowAll, and each of its Policies, by
// the limiters' policy names (names[i] for policy i): the store names the
// deciding policy by its counter (the key and each limiter's own Sub name).
func relabel(d store.Decision, names []string) store.Decision {
	if len(d.Policies) == 0 { // one policy
		d.Policy = names[0]
		d.Policies = []store.Decision{d}
		return d
	}
	decides := d.Policy
	for i := range d.Policies {
		if d.Policies[i].Policy == decides {
			d.Policy = names[i]
		}
		d.Policies[i].Policy = names[i]
	}
	return d
}

// Keyed is a limiter asked for one key, in AllowKeys.
type Keyed struct {
	// Limiter is a sliding window (NewSlidingWindow) or a combination of
	// them (Combine).
	Limiter Limiter
	// Key is the key the Limiter counts the cost for.
	Key string
}

// AllowKeys admits n units of cost under every limiter for its own key, or
// under none: per IP and per user, say, decided all or nothing, so that a
// request one key's limit refuses counts in no other key's. It is
// store.AllowAll over every policy: one script call on a server that is not
// a cluster; on a cluster, one per slot, the admitted taken back when another
// slot refuses. The Decision is the deciding policy's, named by its
// limiter's policy name, and Policies lists every policy's own, in order
// (a combination's policies in its order). It fails with store.ErrInvalid for a
// limiter that is neither a sliding window nor a combination of them, or for no Keyed.
func AllowKeys(ctx context.Context, n int64, ks ...Keyed) (store.Decision, error) {
	if len(ks) == 0 {
		return store.Decision{}, newError("allowkeys", store.ErrInvalid, "no limiter")
	}
	var ps []store.Quota
	var names []string
	for _, k := range ks {
		parts, ok := slidingParts(k.Limiter)
		if !ok {
			name := "?"
			if k.Limiter != nil {
				name = k.Limiter.Policy().Name
			}
			return store.Decision{}, newError(name, store.ErrInvalid, "only sliding-window limiters decide across keys atomically")
		}
		for _, p := range parts {
			ps = append(ps, store.Quota{Store: p.st, Key: k.Key, Limit: p.policy.Limit})
			names = append(names, p.policy.Name)
		}
	}
	d, err := store.AllowAll(ctx, n, ps...)
	if err != nil {
		return store.Decision{}, err
	}
	return relabel(d, names), nil
}
