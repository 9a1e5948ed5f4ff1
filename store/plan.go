package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/engine"
	"github.com/windowstore/windowstore/internal/keyspace"
)

// plan is a batch, checked and encoded as one group of an event (see package
// engine): the first stage, validation, done wholly before anything is sent.
type plan struct {
	st    *Store // the store whose client and backend run it
	first string // its first item's Redis key, which its event id's key begins with
	group engine.Group
	items []planItem // in the order of the group's answers
	ops   []Op
	names []string // the Redis key that names each item's data (a counter's, a lease's, a statistic's)
}

// planItem maps a group item back to its op and tier.
type planItem struct {
	op, tier int
	kind     string
	count    bool // Avg's count item (its sum item is the one before)
}

// isWrite reports whether a kind of group item writes (whatever the
// decision: not a limit's, whose cost counts only when admitted).
func isWrite(kind string) bool {
	switch kind {
	case backend.ItemCount, backend.ItemQuiet, backend.ItemExtreme, backend.ItemRefresh, backend.ItemRelease:
		return true
	}
	return false
}

// maxTiers bounds the windows of one counter: its Window and WithTiers's.
const maxTiers = 8

func makePlan(b Batch) (*plan, error) {
	bad := func(format string, a ...any) error {
		key := ""
		if len(b.Ops) > 0 {
			key = b.Ops[0].Key
		}
		return invalid("apply", key, fmt.Sprintf(format, a...))
	}
	if len(b.Ops) == 0 {
		return nil, bad("a batch needs at least one op")
	}
	p := &plan{st: b.Ops[0].Store, ops: make([]Op, len(b.Ops))}
	retry := b.ID != "" || b.resend
	if p.st == nil {
		return nil, bad("op 0 has no store")
	}
	copy(p.ops, b.Ops)
	// A batch of Acquires and Refreshes only is safe to send again after a
	// lost reply, as one with an event id: a lease id held is only refreshed.
	leasesOnly := true
	for i := range p.ops {
		o := &p.ops[i]
		if o.Kind == OpCount && o.NoSum {
			o.Kind = countQuiet
		}
		if o.Kind == OpAcquire && o.Lease == "" {
			o.Lease = newLeaseID()
		}
		if o.Kind != OpAcquire && o.Kind != OpRefresh {
			leasesOnly = false
		}
		if o.Store != nil && !isLease(o.Kind) {
			t, err := o.Store.overTier()
			if err != nil {
				return nil, bad("op %d: %s", i, err)
			}
			o.tier = t
		}
	}
	retry = retry || leasesOnly
	type counter struct{ limited, counted bool }
	counters := map[string]*counter{} // by the counter's primary Redis key
	limitedTiers := map[string]bool{}
	leases := map[string]bool{} // by the leases' Redis key
	stats := map[string]bool{}  // by the statistics' Redis keys
	var slot uint16
	var ttl int64
	var items [][]string // per item: kind, shape, args
	var keys []string
	for i, o := range p.ops {
		st := o.Store
		switch {
		case st == nil:
			return nil, bad("op %d has no store", i)
		case st.client != p.st.client:
			return nil, bad("op %d uses another client", i)
		case st.be != p.st.be:
			return nil, bad("op %d uses another backend", i)
		case !sameInstant(st.at, p.st.at):
			return nil, bad("op %d is at another instant than op 0 (see Store.At)", i)
		}
		rk, err := st.redisKey(o.Key, st.tiers[0].tag)
		if err != nil {
			return nil, rename(err, "apply")
		}
		if i == 0 {
			slot = keyspace.Slot(rk)
		} else if keyspace.Slot(rk) != slot {
			return nil, bad("op %d is in another cluster slot than op 0: a batch's counters must share one (one key, or one Entity)", i)
		}
		c := counters[rk]
		if c == nil {
			c = &counter{}
			counters[rk] = c
		}
		for _, t := range st.tiers {
			ttl = max(ttl, t.winMs+t.bucketMs)
		}
		if isStat(o) {
			its, ks, names, err := observeItems(o)
			if err != nil {
				return nil, bad("op %d: %s", i, err)
			}
			for j, it := range its {
				if stats[names[j]] {
					return nil, bad("op %d: statistic %v of %q is in the batch twice", i, o.Stat, o.Key)
				}
				stats[names[j]] = true
				p.names = append(p.names, names[j])
				if p.first == "" {
					p.first = names[j]
				}
				items, keys = append(items, it), append(keys, ks[j]...)
				p.items = append(p.items, planItem{op: i, kind: it[0], count: j == 1})
			}
			continue
		}
		if isLease(o.Kind) {
			if err := checkLease(o); err != nil {
				return nil, bad("op %d: %s", i, err)
			}
			lk, _ := st.redisKey(o.Key, leaseTag)
			if leases[lk] {
				return nil, bad("op %d: the leases of %q are in the batch twice", i, o.Key)
			}
			leases[lk] = true
			p.names = append(p.names, lk)
			if p.first == "" {
				p.first = lk
			}
			kind := leaseItem(o.Kind)
			items = append(items, []string{kind, strconv.FormatInt(o.Limit, 10), strconv.FormatInt(o.TTL.Milliseconds(), 10), o.Lease})
			keys = append(keys, lk)
			p.items = append(p.items, planItem{op: i, kind: kind})
			ttl = max(ttl, o.TTL.Milliseconds())
			continue
		}
		switch o.Kind {
		case OpCount, countQuiet, OpDistinct, OpRead:
			if c.counted || c.limited {
				return nil, bad("op %d: counter %q is in the batch twice", i, o.Key)
			}
			c.counted = true
		case OpLimit:
			if c.counted {
				return nil, bad("op %d: counter %q is counted and limited in one batch", i, o.Key)
			}
			c.limited = true
			if o.Limit < 0 || o.Limit > maxExact || o.Delta < 0 || o.Delta > maxExact {
				return nil, bad("op %d: limit %d and cost %d must be within [0, 2^53]", i, o.Limit, o.Delta)
			}
			tk := rk + "#" + strconv.Itoa(o.tier)
			if limitedTiers[tk] {
				return nil, bad("op %d: window %v of counter %q is limited twice", i, st.tiers[o.tier].win, o.Key)
			}
			limitedTiers[tk] = true
		default:
			return nil, bad("op %d: unknown kind %d", i, o.Kind)
		}
		d := strconv.FormatInt(o.Delta, 10)
		for ti, t := range st.tiers {
			trk, _ := st.redisKey(o.Key, t.tag)
			var it []string
			switch o.Kind {
			case OpCount:
				it = []string{backend.ItemCount, t.shape, d}
			case countQuiet:
				it = []string{backend.ItemQuiet, t.shape, d}
			case OpDistinct:
				it = append([]string{backend.ItemDistinct, t.shape, strconv.Itoa(len(o.Members))}, o.Members...)
			case OpRead:
				it = []string{backend.ItemRead, t.shape}
			case OpLimit:
				if ti != o.tier {
					continue // added below, once per counter
				}
				it = []string{backend.ItemLimit, t.shape, strconv.FormatInt(o.Limit, 10), d}
			}
			items = append(items, it)
			p.names = append(p.names, trk)
			if p.first == "" {
				p.first = trk
				if o.Kind == OpDistinct {
					p.first = trk + ":d" // its first key (distinctKeys)
				}
			}
			if o.Kind == OpDistinct {
				if err := checkDistinct("apply", o.Key, t, st.futureMs); err != nil {
					return nil, err
				}
				keys = append(keys, distinctKeys(trk, t, st.futureMs)...)
			} else {
				keys = append(keys, st.counterKeys(trk, t.tag)...)
			}
			p.items = append(p.items, planItem{op: i, tier: ti, kind: it[0]})
		}
	}
	// The tiers of a limited counter that no limit names count the cost when
	// the limits admit it.
	for i, o := range p.ops {
		if o.Kind != OpLimit {
			continue
		}
		rk, _ := o.Store.redisKey(o.Key, o.Store.tiers[0].tag)
		for ti, t := range o.Store.tiers {
			tk := rk + "#" + strconv.Itoa(ti)
			if limitedTiers[tk] {
				continue
			}
			limitedTiers[tk] = true
			trk, _ := o.Store.redisKey(o.Key, t.tag)
			items = append(items, []string{backend.ItemIfOK, t.shape, strconv.FormatInt(o.Delta, 10)})
			p.names = append(p.names, trk)
			keys = append(keys, o.Store.counterKeys(trk, t.tag)...)
			p.items = append(p.items, planItem{op: i, tier: ti, kind: backend.ItemIfOK})
		}
	}
	if len(items) > 1000 {
		return nil, bad("a batch of %d counters: at most 1000", len(items))
	}
	g := &p.group
	g.Args = []string{strconv.Itoa(len(items)), b.ID, strconv.FormatInt(ttl, 10), ""}
	g.Retry = retry
	first := p.first
	g.IDKey = func(id string) string { return idKey(first, id) }
	if b.ID != "" {
		g.Keys = append(g.Keys, idKey(p.first, b.ID))
	}
	if !b.Time.IsZero() {
		g.Args[3] = strconv.FormatInt(b.Time.UnixMilli(), 10)
	}
	g.Keys = append(g.Keys, keys...)
	for j, it := range items {
		g.Args = append(g.Args, it...)
		if isWrite(it[0]) || it[0] == backend.ItemDistinct && len(p.ops[p.items[j].op].Members) > 0 {
			g.Writes = true
		}
	}
	return p, nil
}

// idKey is the key of event id id of a batch whose first counter's Redis key
// (redisKey) is first.
func idKey(first, id string) string {
	var k strings.Builder
	k.WriteString(first)
	k.WriteString(":id:")
	keyspace.Escape(&k, id)
	return k.String()
}

// distinctKeys are the keys of the distinct count of tier t of the counter
// whose Redis key is rk, in the order the scripts take them (ws_dk in
// internal/backend/lua/distinct.lua): rk + ":d", a hash of which bucket each
// ring key holds; rk + ":d:u", the union of the live buckets; and the ring,
// rk + ":d:r0", ":d:r1", ..., one HyperLogLog per bucket (distinctRing keys).
// Every key a script touches is declared: during a slot migration a key the
// script named itself may already be on the other node. The ring's
// keys that hold nothing never exist, so while the slot migrates the cluster
// refuses the call before it runs (TRYAGAIN, resent by the store), and never
// runs it on a node that does not hold every key.
func distinctKeys(rk string, t tier, futureMs int64) []string {
	d := rk + ":d"
	n := distinctRing(t, futureMs)
	keys := make([]string, 0, n+2)
	keys = append(keys, d, d+":u")
	for j := range n {
		keys = append(keys, d+":r"+strconv.Itoa(j))
	}
	return keys
}

// maxDistinctRing bounds the ring keys of a distinct count: a count over the
// ring is PFCOUNT of its live keys, which Lua's unpack cannot pass past some
// 8,000 (and every call declares the whole ring). A window of up to 3,948
// buckets fits whatever the future tolerance (the ring is at most 2n + 3).
const maxDistinctRing = 7900

// checkDistinct refuses a distinct count on a tier whose ring would be
// longer than maxDistinctRing.
func checkDistinct(op, key string, t tier, futureMs int64) error {
	if n := distinctRing(t, futureMs); n > maxDistinctRing {
		return invalid(op, key, fmt.Sprintf("a distinct count keeps a HyperLogLog per bucket: window %v needs %d keys, "+
			"at most %d: use longer buckets (or tiers)", t.win, n, maxDistinctRing))
	}
	return nil
}

// distinctRing is the number of ring keys of a distinct count of tier t
// with a future tolerance of futureMs (ws_dring in distinct.lua): the
// window's n buckets rounded up, one more for a year's short last bucket, one
// for the next bucket and one ahead, and one per bucket of the tolerance (at
// most n), for clients whose clocks are ahead.
func distinctRing(t tier, futureMs int64) int {
	ceil := func(a, b int64) int64 { return (a + b - 1) / b }
	n := ceil(t.winMs, t.bucketMs)
	return int(n + 3 + min(ceil(futureMs, t.bucketMs), n))
}
