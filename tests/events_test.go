package tests

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/engine"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// The event contract (docs/counters.md, "Events"): an event that fails writes
// nothing, on any key of any backend, across cluster slots too; one that
// succeeds counts what an exact model counts; a replayed event changes
// nothing. Checked by DUMP: every key under the test's prefix, its bytes and
// its expiry, before and after.

// snapshot is every key matching a prefix on the nodes, as DUMP and
// PEXPIRETIME read it, and, for a hash with field TTLs, its fields with
// their expiries (HPEXPIRETIME), so that a field that expired on its own
// between two snapshots is told from a write.
type snapshot struct {
	keys   map[string]string            // DUMP "|" PEXPIRETIME
	fields map[string]map[string]string // field -> value "|" expiry ms (-1: none)
}

func takeSnapshot(t *testing.T, ctx context.Context, nodes []rueidis.Client, prefix string) snapshot {
	t.Helper()
	out := snapshot{keys: map[string]string{}, fields: map[string]map[string]string{}}
	for _, c := range nodes {
		var keys []string
		for cursor := uint64(0); ; {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			require.NoError(t, err)
			keys = append(keys, e.Elements...)
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
		cmds := make(rueidis.Commands, 0, 4*len(keys))
		for _, k := range keys {
			cmds = append(cmds, c.B().Dump().Key(k).Build(), c.B().Arbitrary("PEXPIRETIME").Keys(k).Build(),
				c.B().Type().Key(k).Build(), c.B().Hgetall().Key(k).Build())
		}
		res := c.DoMulti(ctx, cmds...)
		for i, k := range keys {
			d, err := res[4*i].ToString()
			if rueidis.IsRedisNil(err) {
				continue // expired between SCAN and DUMP
			}
			require.NoError(t, err, "DUMP %s", k)
			e, err := res[4*i+1].AsInt64()
			require.NoError(t, err, "PEXPIRETIME %s", k)
			out.keys[k] = d + "|" + strconv.FormatInt(e, 10)
			if typ, _ := res[4*i+2].ToString(); typ != "hash" {
				continue
			}
			all, err := res[4*i+3].AsStrMap()
			if err != nil || len(all) == 0 {
				continue
			}
			names := slices.Sorted(maps.Keys(all))
			ttls, err := c.Do(ctx, c.B().Arbitrary("HPEXPIRETIME").Keys(k).Args(append([]string{"FIELDS", strconv.Itoa(len(names))}, names...)...).Build()).AsIntSlice()
			if err != nil {
				continue // no field TTLs on this server (or not a hash any more)
			}
			fs := map[string]string{}
			for j, f := range names {
				if j < len(ttls) {
					fs[f] = all[f] + "|" + strconv.FormatInt(ttls[j], 10)
				}
			}
			out.fields[k] = fs
		}
	}
	return out
}

// requireSame fails when two snapshots differ, naming the keys. A key that
// expired meanwhile did not change, nor did a hash whose only change is
// fields that expired on their own: its key expiry is the same, and its
// fields live now (a TTL not passed yet, or none) are the same before and
// after. A field whose HPEXPIRETIME answered -2 was gone when it was asked
// (it expired between HGETALL and HPEXPIRETIME).
func requireSame(t *testing.T, before, after snapshot, format string, args ...any) {
	t.Helper()
	var diff []string
	now := time.Now().UnixMilli()
	suffix := func(v string) int64 {
		at, _ := strconv.ParseInt(v[strings.LastIndex(v, "|")+1:], 10, 64)
		return at
	}
	live := func(fs map[string]string) map[string]string {
		out := map[string]string{}
		for f, v := range fs {
			if at := suffix(v); at == -1 || at > now {
				out[f] = v
			}
		}
		return out
	}
	expired := func(k string) bool { // the change is only fields that expired
		fs, ok := before.fields[k]
		if !ok || (after.keys[k] != "" && suffix(after.keys[k]) != suffix(before.keys[k])) {
			return false
		}
		return maps.Equal(live(fs), live(after.fields[k]))
	}
	for k, v := range before.keys {
		if w, ok := after.keys[k]; !ok {
			if at := suffix(v); at > 0 && at <= now {
				continue // expired meanwhile (a cluster's reservation id: 10 s)
			}
			if !expired(k) {
				diff = append(diff, k+" (gone)")
			}
		} else if w != v && !expired(k) {
			diff = append(diff, k+" (changed)")
		}
	}
	for k := range after.keys {
		if _, ok := before.keys[k]; !ok {
			diff = append(diff, k+" (new)")
		}
	}
	slices.Sort(diff)
	require.Empty(t, diff, append([]any{format}, args...)...)
}

var (
	evW1 = store.Window{Length: 10 * time.Second, Bucket: time.Second}
	evW2 = store.Window{Length: time.Minute, Bucket: 10 * time.Second}
)

// eventFeatures is the feature set of the event tests: two entities, counts
// over two windows (a late event may fit one and not the other), a sum of
// amounts (which can overflow), a limit, a distinct count, a maximum.
func eventFeatures(limit int64) []features.Feature {
	return []features.Feature{
		{Name: "user_logins", Entity: "user", Kind: features.Count, Windows: []store.Window{evW1, evW2}},
		{Name: "user_spend", Entity: "user", Kind: features.Sum, Windows: []store.Window{evW1}},
		{Name: "user_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{evW1}, Limits: []int64{limit}},
		{Name: "user_ips", Entity: "user", Kind: features.Distinct, Of: "ip", Windows: []store.Window{evW1}},
		{Name: "ip_logins", Entity: "ip", Kind: features.Count, Windows: []store.Window{evW1}},
		{Name: "ip_max", Entity: "ip", Kind: features.Max, Windows: []store.Window{evW1}},
	}
}

// evModel is an exact model of eventFeatures: every counter's buckets in
// big integers, the maximum's per bucket, and the ids each entity kept.
type evModel struct {
	limit  int64
	future time.Duration
	c1, c2 *codec.Codec
	counts map[string]*exactModel     // "feature/entity/window index"
	maxes  map[string]map[int64]int64 // entity -> bucket start -> max
	ids    map[string]string          // "entity/id" -> the record's decision: "1" or "0"
}

func newEvModel(t *testing.T, limit int64) *evModel {
	c1, err := codec.New(evW1.Bucket, nil)
	require.NoError(t, err)
	c2, err := codec.New(evW2.Bucket, nil)
	require.NoError(t, err)
	return &evModel{limit: limit, future: 5 * time.Second, c1: c1, c2: c2, counts: map[string]*exactModel{},
		maxes: map[string]map[int64]int64{}, ids: map[string]string{}}
}

func (m *evModel) counter(feature, entity string, w int) *exactModel {
	k := feature + "/" + entity + "/" + strconv.Itoa(w)
	c := m.counts[k]
	if c == nil {
		if w == 0 {
			c = newExactModel(m.c1, evW1)
		} else {
			c = newExactModel(m.c2, evW2)
		}
		m.counts[k] = c
	}
	return c
}

// covers reports whether a write at event time e, decided at now, counts in
// window w: its bucket (now's, for an event ahead within the tolerance) is
// live at now.
func (m *evModel) covers(c *exactModel, now, e time.Time) (int64, bool) {
	if e.After(now) {
		e = now
	}
	s := c.start(e)
	return s, s > now.Add(-c.w.Length).UnixMilli()
}

// anEvent is one event of the tests.
type anEvent struct {
	id       string
	now, at  time.Time // the clock's instant; the event's time (zero: now)
	user, ip string    // "" when the event has no such entity
	amount   int64
	sent     time.Time // the wall clock before its first call
}

func (e anEvent) String() string {
	return fmt.Sprintf("event %q at %v (time %v) user %q ip %q amount %d", e.id, e.now.Format("15:04:05.000"),
		e.at.Format("15:04:05.000"), e.user, e.ip, e.amount)
}

// outcome is what the model says an event does.
type outcome struct {
	err       bool // it fails (and writes nothing)
	allowed   bool
	duplicate bool            // every entity saw its id
	dups      map[string]bool // by entity ("user", "ip")
}

// predict says what e does, without changing the model.
func (m *evModel) predict(e anEvent, wrong map[string]bool) outcome {
	o := outcome{dups: map[string]bool{}}
	at := e.at
	if at.IsZero() {
		at = e.now
	}
	if at.After(e.now.Add(m.future)) || wrong[e.user] || wrong[e.ip] {
		o.err = true
		return o
	}
	o.allowed, o.duplicate = true, e.id != ""
	placed := false
	for _, ent := range []string{"ip", "user"} {
		v := map[string]string{"user": e.user, "ip": e.ip}[ent]
		if v == "" {
			continue
		}
		key := ent + ":" + v
		rec, dup := m.ids[key+"/"+e.id]
		dup = dup && e.id != ""
		o.dups[ent] = dup
		o.duplicate = o.duplicate && dup
		if dup {
			placed = true
			o.allowed = o.allowed && rec == "1"
			continue
		}
		if ent == "user" {
			placed = true // the limit decides now
			if m.counter("user_limit", key, 0).sum(e.now, evW1.Length).Int64()+1 > m.limit {
				o.allowed = false
			}
			sp := m.counter("user_spend", key, 0)
			if s, ok := m.covers(sp, e.now, at); ok {
				sum := new(big.Int).Add(sp.sum(e.now, evW1.Length), big.NewInt(e.amount))
				b := new(big.Int).Add(sp.value(s), big.NewInt(e.amount))
				if !fitsInt64(sum) || !fitsInt64(b) {
					o.err = true
				}
			}
		} else if _, ok := m.covers(m.counter("ip_logins", key, 0), e.now, at); ok {
			placed = true
		}
	}
	if !placed {
		o.err = true // too old for every window
	}
	return o
}

// apply counts e as predicted.
func (m *evModel) apply(e anEvent, o outcome) {
	at := e.at
	if at.IsZero() {
		at = e.now
	}
	add := func(c *exactModel, delta int64) bool {
		s, ok := m.covers(c, e.now, at)
		if ok {
			b := new(big.Int).Add(c.value(s), big.NewInt(delta))
			c.buckets[s] = b
		}
		return ok
	}
	rec := "0"
	if o.allowed {
		rec = "1"
	}
	if e.user != "" && !o.dups["user"] {
		u := "user:" + e.user
		wrote := add(m.counter("user_logins", u, 0), 1)
		wrote = add(m.counter("user_logins", u, 1), 1) || wrote
		wrote = add(m.counter("user_spend", u, 0), e.amount) || wrote
		if o.allowed {
			lc := m.counter("user_limit", u, 0)
			s := lc.start(e.now)
			lc.buckets[s] = new(big.Int).Add(lc.value(s), big.NewInt(1))
			wrote = true
		}
		if wrote && e.id != "" {
			m.ids["user:"+e.user+"/"+e.id] = rec
		}
	}
	if e.ip != "" && !o.dups["ip"] {
		ip := "ip:" + e.ip
		c := m.counter("ip_logins", ip, 0)
		if s, ok := m.covers(c, e.now, at); ok {
			add(c, 1)
			mx := m.maxes[ip]
			if mx == nil {
				mx = map[int64]int64{}
				m.maxes[ip] = mx
			}
			if v, seen := mx[s]; !seen || e.amount > v {
				mx[s] = e.amount
			}
			if e.id != "" {
				m.ids["ip:"+e.ip+"/"+e.id] = rec
			}
		}
	}
}

// recent are the events first sent at most 3 s ago (wall clock): their ids
// are kept still, whatever the virtual clock says.
func recent(past []anEvent) []anEvent {
	var out []anEvent
	for _, p := range past {
		if time.Since(p.sent) < 3*time.Second {
			out = append(out, p)
		}
	}
	return out
}

// max is ip_max over the window at now: its value and whether any event is live.
func (m *evModel) max(ip string, now time.Time) (int64, bool) {
	best, ok := int64(math.MinInt64), false
	thr := now.Add(-evW1.Length).UnixMilli()
	for s, v := range m.maxes[ip] {
		if s > thr && s <= now.UnixMilli() && (!ok || v > best) {
			best, ok = v, true
		}
	}
	return best, ok
}

// check compares a successful Record's values with the model after the
// event.
func (m *evModel) check(t *testing.T, e anEvent, o outcome, r features.Result) {
	t.Helper()
	require.Equal(t, o.allowed, r.Allowed, "%v: allowed", e)
	require.Equal(t, o.duplicate, r.Duplicate, "%v: duplicate", e)
	for _, v := range r.Values {
		switch v.Feature {
		case "user_logins":
			require.Equal(t, []int64{m.counter("user_logins", v.Entity, 0).sum(e.now, evW1.Length).Int64(),
				m.counter("user_logins", v.Entity, 1).sum(e.now, evW2.Length).Int64()}, v.Sums, "%v: %s", e, v.Feature)
		case "user_spend", "ip_logins":
			require.Equal(t, m.counter(v.Feature, v.Entity, 0).sum(e.now, evW1.Length).Int64(), v.Sum, "%v: %s", e, v.Feature)
		case "user_limit":
			require.Equal(t, m.counter("user_limit", v.Entity, 0).sum(e.now, evW1.Length).Int64(), v.Sum, "%v: %s", e, v.Feature)
		case "ip_max":
			want, ok := m.max(v.Entity, e.now)
			require.Equal(t, ok, v.Stats[0].OK, "%v: %s has an event", e, v.Feature)
			if ok {
				require.Equal(t, want, v.Sum, "%v: %s", e, v.Feature)
			}
		}
	}
}

// eventEnv is a feature set on a server or cluster, and how to read its keys.
type eventEnv struct {
	set    *features.Set
	nodes  []rueidis.Client
	client rueidis.Client
	prefix string
}

// breakEntity makes one of an entity's counters a key of another type (a
// list): the head of the plain hash, else the counter's hash. Every event
// with the entity then fails.
func (env eventEnv) breakEntity(t *testing.T, ctx context.Context, entity string) {
	t.Helper()
	_, err := env.set.Record(ctx, features.Event{Entities: map[string]string{strings.Split(entity, ":")[0]: strings.Split(entity, ":")[1]}, Amount: 1})
	require.NoError(t, err)
	var victim string
	for k := range takeSnapshot(t, ctx, env.nodes, env.prefix+"{"+entity+"}:").keys {
		if strings.Contains(k, "_logins:") && (victim == "" || strings.HasSuffix(k, ":h")) {
			victim = k
		}
	}
	require.NotEmpty(t, victim, "no key of %s", entity)
	c := env.client
	require.NoError(t, c.Do(ctx, c.B().Del().Key(victim).Build()).Error())
	require.NoError(t, c.Do(ctx, c.B().Rpush().Key(victim).Element("not a counter").Build()).Error())
}

// eventWalk records random events with bad parts (an amount that overflows
// the sum, a time too old or too far ahead, an entity whose key holds another
// type, a replayed id) one after the other on a virtual clock, and checks
// every outcome: an error leaves every key as it was (DUMP), a success
// counts what the model counts, a replay of every entity changes nothing.
func eventWalk(t *testing.T, env eventEnv, seed uint64, steps int) {
	ctx := ctxT(t)
	const limit = 5
	m := newEvModel(t, limit)
	rng := rand.New(rand.NewPCG(seed, 7))
	wrong := map[string]bool{"uw": true, "iw": true}
	env.breakEntity(t, ctx, "user:uw")
	env.breakEntity(t, ctx, "ip:iw")
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	var past []anEvent
	counts := map[string]int{}
	for step := 0; step < steps; step++ {
		now = now.Add(time.Duration(rng.Int64N(int64(1500 * time.Millisecond))))
		// Amounts of one sign per user (un's are never positive), so that a
		// window sum only nears 0 as its buckets leave: it never leaves
		// int64 but by a write, which must fail.
		e := anEvent{now: now, amount: rng.Int64N(2000)}
		if rng.IntN(6) > 0 {
			e.user = "u" + strconv.Itoa(rng.IntN(4))
		}
		if e.user == "u3" {
			e.user, e.amount = "un", -e.amount
		}
		if e.user == "" || rng.IntN(4) > 0 {
			e.ip = "i" + strconv.Itoa(rng.IntN(3))
		}
		if rng.IntN(3) > 0 {
			e.id = "e" + strconv.Itoa(step)
		}
		kind := "plain"
		switch r := rng.IntN(20); {
		case r < 2 && len(recent(past)) > 0: // a replay, as it was first sent
			rp := recent(past)
			p := rp[rng.IntN(len(rp))]
			e.id, e.user, e.ip, e.amount, e.sent = p.id, p.user, p.ip, p.amount, p.sent
			if !p.at.IsZero() {
				e.at = p.at
			}
			kind = "replay"
		case r < 4: // late: a few seconds to past every window
			e.at = now.Add(-time.Duration(rng.Int64N(int64(75 * time.Second))))
			kind = "late"
		case r < 5: // ahead, within the tolerance or past it
			e.at = now.Add(time.Duration(rng.Int64N(int64(12 * time.Second))))
			kind = "ahead"
		case r < 7: // an amount near the int64 limits
			e.amount = []int64{math.MaxInt64, math.MaxInt64 / 2, 1 << 62}[rng.IntN(3)]
			if e.user == "un" {
				e.amount = []int64{math.MinInt64, math.MinInt64/2 - 7}[rng.IntN(2)]
			}
			kind = "huge"
		case r < 8:
			if rng.IntN(2) == 0 {
				e.user = "uw"
			} else {
				e.ip = "iw"
			}
			kind = "wrong type"
		}
		if e.id == "" && kind == "replay" {
			e.id = "r" + strconv.Itoa(step)
		}
		o := m.predict(e, wrong)
		ents := map[string]string{}
		if e.user != "" {
			ents["user"] = e.user
			ents["ip"] = e.ip // the distinct count's member, when there is an ip
		}
		if e.ip != "" {
			ents["ip"] = e.ip
		}
		if ents["ip"] == "" {
			delete(ents, "ip")
		}
		before := takeSnapshot(t, ctx, env.nodes, env.prefix)
		if kind != "replay" {
			e.sent = time.Now()
		}
		r, err := env.set.At(now).Record(ctx, features.Event{ID: e.id, Time: e.at, Entities: ents, Amount: e.amount})
		if kind == "replay" {
			// The model keeps ids for ever; the server, for an entity's
			// longest window and bucket in real time (11 s for an ip).
			require.Less(t, time.Since(e.sent), evW1.Length+evW1.Bucket,
				"%v: the first call and its replay were too far apart to judge", e)
		}
		if o.err {
			require.Error(t, err, "%s %v: the model fails it", kind, e)
			requireSame(t, before, takeSnapshot(t, ctx, env.nodes, env.prefix), "%s %v failed (%v) but changed keys", kind, e, err)
			require.NotContains(t, err.Error(), "were written", "%v", e)
			counts["failed "+kind]++
			continue
		}
		require.NoError(t, err, "%s %v", kind, e)
		m.apply(e, o)
		m.check(t, e, o, r)
		if o.duplicate {
			requireSame(t, before, takeSnapshot(t, ctx, env.nodes, env.prefix), "%v: a replay changed keys", e)
			counts["replayed"]++
		}
		counts[kind]++
		if e.id != "" && kind != "replay" {
			past = append(past, e)
		}
	}
	t.Logf("events: %v", counts)
	for _, k := range []string{"failed huge", "failed wrong type", "failed ahead", "failed late", "late", "replayed", "huge"} {
		require.Positive(t, counts[k], "the walk never had a %q event: %v", k, counts)
	}
}

// TestEventsRejectedWriteNothing: the walk of eventWalk on every backend.
func TestEventsRejectedWriteNothing(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		srv := harness.Shared(t, tg.kind)
		c := srv.Client(t)
		prefix := harness.Prefix(t)
		set, err := features.New(ctxT(t), c, eventFeatures(5), store.WithPrefix(prefix), store.WithBackend(tg.backend))
		require.NoError(t, err)
		eventWalk(t, eventEnv{set: set, nodes: []rueidis.Client{c}, client: c, prefix: prefix}, 3, 400)
	})
}

// TestEventsRejectedWriteNothingCluster: the same walk on a Redis Cluster,
// whose entities live in different slots: an event is checked in every slot
// before any writes.
func TestEventsRejectedWriteNothingCluster(t *testing.T) {
	t.Parallel()
	eventWalk(t, clusterEventEnv(t, 5), 11, 250)
}

// clusterEventEnv is eventFeatures with the given limit on a new Redis
// Cluster, every master's keys snapshotted.
func clusterEventEnv(t *testing.T, limit int64) eventEnv {
	cl := harness.NewCluster(t)
	c := cl.Client(t)
	var nodes []rueidis.Client
	for _, n := range cl.Masters(t) {
		nodes = append(nodes, n.Client(t))
	}
	prefix := harness.Prefix(t)
	set, err := features.New(ctxT(t), c, eventFeatures(limit), store.WithPrefix(prefix))
	require.NoError(t, err)
	return eventEnv{set: set, nodes: nodes, client: c, prefix: prefix}
}

// TestEventsConcurrent: 40 callers record events at once, a share of them
// bad (an amount that overflows, an entity of another type) and a share
// replays of one another's ids: every successful event counts once, every
// failed one not at all, and exactly as many as the limit allows are
// admitted.
func TestEventsConcurrent(t *testing.T) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			srv := harness.Shared(t, tg.kind)
			c := srv.Client(t)
			prefix := harness.Prefix(t)
			set, err := features.New(ctxT(t), c, eventFeatures(25), store.WithPrefix(prefix), store.WithBackend(tg.backend))
			require.NoError(t, err)
			concurrentEvents(t, eventEnv{set: set, nodes: []rueidis.Client{c}, client: c, prefix: prefix})
		})
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		concurrentEvents(t, clusterEventEnv(t, 25))
	})
}

func concurrentEvents(t *testing.T, env eventEnv) {
	ctx := ctxT(t)
	env.breakEntity(t, ctx, "ip:iw")
	now := time.Now()
	set := env.set.At(now)
	// A first event, so that the sum is positive: an amount of MaxInt64
	// then always overflows it.
	_, err := set.Record(ctx, features.Event{ID: "first", Entities: map[string]string{"user": "u1", "ip": "i1"}, Amount: 1})
	require.NoError(t, err)
	const callers, each = 40, 10
	// rec is one call: whether it failed, and, per entity, whether it
	// counted there (a duplicate entity does not; on a cluster, two calls of
	// one id at once may each count it in one entity: every entity counts it
	// once).
	type rec struct {
		id          string
		amount      int64
		failed, bad bool
		user, ip    bool // counted in the user's, the IP's features
		admit       bool // the user's limit counted it
	}
	var mu sync.Mutex
	var recs []rec
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 3))
			for range each {
				r := rec{id: fmt.Sprintf("c%d", rng.IntN(callers*each*3/4)), amount: rng.Int64N(100)}
				ip := "i1"
				switch rng.IntN(10) {
				case 0:
					r.amount, r.bad = math.MaxInt64, true // past the sum's int64 range, whatever the others
				case 1:
					ip, r.bad = "iw", true
				}
				res, err := set.Record(ctx, features.Event{ID: r.id, Entities: map[string]string{"user": "u1", "ip": ip}, Amount: r.amount})
				r.failed = err != nil
				if err == nil {
					v, _ := res.Get("user_logins")
					w, _ := res.Get("ip_logins")
					l, _ := res.Get("user_limit")
					r.user, r.ip, r.admit = v.Counted, w.Counted, l.Counted
				}
				mu.Lock()
				recs = append(recs, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Every id counts once per entity. The user's spend is the amount of the
	// call that counted it there (a replay carries its own amount, which a
	// duplicate never counts).
	logins, ipLogins, spend, admitted := int64(1), int64(1), int64(1), int64(1) // the first event's
	users, ips := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		if r.bad {
			require.True(t, r.failed || !(r.user || r.ip), "a bad event (id %s) counted", r.id)
		}
		if r.user {
			require.False(t, users[r.id], "id %s counted twice for the user", r.id)
			users[r.id] = true
			logins++
			spend += r.amount
		}
		if r.ip {
			require.False(t, ips[r.id], "id %s counted twice for the IP", r.id)
			ips[r.id] = true
			ipLogins++
		}
		if r.admit {
			require.True(t, r.user, "id %s: admitted by the user's limit but not counted there", r.id)
			admitted++
		}
	}
	got, err := set.Read(ctx, map[string]string{"user": "u1", "ip": "i1"})
	require.NoError(t, err)
	v, _ := got.Get("user_logins")
	require.Equal(t, logins, v.Sums[0], "user_logins: every success once")
	v, _ = got.Get("user_spend")
	require.Equal(t, spend, v.Sum, "user_spend: every success's amount once")
	v, _ = got.Get("user_limit")
	require.Equal(t, admitted, v.Sum, "user_limit: exactly the admitted")
	require.EqualValues(t, 25, admitted, "the limit admits exactly 25 of %d events", logins)
	v, _ = got.Get("ip_logins")
	require.Equal(t, ipLogins, v.Sum, "ip_logins: every success once")
}

// lateModel is the exact model of a counter fed late and early events: an
// event counts when its bucket is still in the window at the clock's now (or
// in the current bucket, when it is ahead of now within the tolerance).
type lateModel struct {
	*exactModel
	future time.Duration
}

// TestLateEvents plays shuffled event streams (events delivered late, out of
// order, some too old, some ahead of the clock) against the exact model on
// every backend, the plain hash's running total included: every answer, and
// no newer bucket is ever lost.
func TestLateEvents(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: time.Minute, Bucket: 5 * time.Second}
		s, _ := newStore(t, tg, w, store.WithFutureTolerance(2*time.Second))
		ctx := ctxT(t)
		m := &lateModel{exactModel: newExactModel(hook.Codec(s), w), future: 2 * time.Second}
		rng := rand.New(rand.NewPCG(11, 13))
		now := utc("2025-12-31T23:58:00Z") // across a year end
		seen := map[string]int{}
		for step := 0; step < 300; step++ {
			now = now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
			var e time.Time
			switch r := rng.IntN(10); {
			case r < 6: // late, inside the window
				e = now.Add(-time.Duration(rng.Int64N(int64(w.Length))))
			case r < 8: // too old
				e = now.Add(-w.Length - time.Duration(rng.Int64N(int64(w.Length))))
			default: // ahead: within the tolerance or beyond
				e = now.Add(time.Duration(rng.Int64N(int64(4 * time.Second))))
			}
			e = e.Truncate(time.Millisecond)
			d := rng.Int64N(20) - 4
			want := m.add(now, e, d)
			seen[want]++
			a, err := s.At(now).Record(ctx, store.Event{Key: "late", Delta: d, Time: e})
			switch want {
			case "old":
				require.ErrorIs(t, err, store.ErrTooOld, "step %d: event %v at %v", step, e, now)
			case "future":
				require.ErrorIs(t, err, store.ErrFuture, "step %d: event %v at %v", step, e, now)
			default:
				require.NoError(t, err, "step %d: event %v at %v", step, e, now)
				require.Equal(t, m.sum(now, w.Length).Int64(), a.Sum, "step %d: event %v at %v", step, e, now)
			}
			n, err := s.At(now).Sum(ctx, "late")
			require.NoError(t, err)
			require.Equal(t, m.sum(now, w.Length).Int64(), n, "step %d", step)
			n, err = s.At(now).Over(20*time.Second).Sum(ctx, "late")
			require.NoError(t, err)
			require.Equal(t, m.sum(now, 20*time.Second).Int64(), n, "step %d", step)
		}
		t.Logf("events: %v", seen)
		require.Greater(t, seen["old"], 20)
		require.Greater(t, seen["ok"], 100)
	})
}

// TestEventEdges pins the exact edges of an event's time, on every backend,
// at a clock on a bucket's edge (where "the window starts at now - length"
// is itself a bucket's start):
//   - a bucket is live when it starts after now - window: an event in the
//     bucket that starts exactly at now - window is too old, one a
//     millisecond later (the next bucket) counts;
//   - an event up to the future tolerance ahead of now counts (in the
//     current bucket), one a millisecond further fails;
//   - an event refused for either reason writes nothing (DUMP of every key
//     of the prefix, before and after).
func TestEventEdges(t *testing.T) {
	w := store.Window{Length: time.Minute, Bucket: time.Second}
	const tol = 2 * time.Second
	forEach(t, func(t *testing.T, tg target) {
		s, srv := newStore(t, tg, w, store.WithFutureTolerance(tol))
		c := srv.Client(t)
		ctx := ctxT(t)
		now := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Minute) // on a bucket's edge
		_, err := s.At(now).Add(ctx, "e", 1)
		require.NoError(t, err)
		prefix := prefixOf(t, s)
		keys := scanKeys(t, c, prefix)
		require.NotEmpty(t, keys)
		before := dump(t, c, keys...)
		start := now.Add(-w.Length) // a bucket starts here, and has left the window
		for _, at := range []time.Time{start.Add(-time.Millisecond), start, start.Add(time.Second - time.Millisecond)} {
			_, err := s.At(now).Record(ctx, store.Event{Key: "e", Delta: 1, Time: at})
			require.ErrorIs(t, err, store.ErrTooOld, "event at now-window%+v", at.Sub(start))
		}
		_, err = s.At(now).Record(ctx, store.Event{Key: "e", Delta: 1, Time: now.Add(tol + time.Millisecond)})
		require.ErrorIs(t, err, store.ErrFuture, "an event a millisecond beyond the tolerance")
		require.Equal(t, keys, scanKeys(t, c, prefix), "a refused event made a key")
		require.Equal(t, before, dump(t, c, keys...), "a refused event wrote")

		a, err := s.At(now).Record(ctx, store.Event{Key: "e", Delta: 10, Time: start.Add(time.Second)})
		require.NoError(t, err, "the oldest live bucket's first millisecond")
		require.EqualValues(t, 11, a.Sum)
		a, err = s.At(now).Record(ctx, store.Event{Key: "e", Delta: 100, Time: now.Add(tol)})
		require.NoError(t, err, "an event at the tolerance")
		require.EqualValues(t, 111, a.Sum)
		// The late event's bucket leaves the window exactly a window after it
		// started: a millisecond before, it still counts.
		n, err := s.At(start.Add(time.Second+w.Length-time.Millisecond)).Sum(ctx, "e")
		require.NoError(t, err)
		require.EqualValues(t, 111, n)
		n, err = s.At(start.Add(time.Second+w.Length)).Sum(ctx, "e")
		require.NoError(t, err)
		require.EqualValues(t, 101, n)
	})
}

// Decisions across keys: what a refusal, a replay and an undo leave.

type slowUndoKey struct{}

func init() {
	engine.BeforeUndo = func(ctx context.Context) {
		if d, ok := ctx.Value(slowUndoKey{}).(time.Duration); ok {
			time.Sleep(d)
		}
	}
}

// TestUndoTakesFromTheReservedBucket: a decision of stores on two clients
// (one script call each: a check, a reservation, an undo, as on a cluster)
// that one refuses takes the other's reservation back from the bucket it
// went to, though the undo comes in a later bucket: every bucket holds 0
// after it, on every backend.
func TestUndoTakesFromTheReservedBucket(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		srv := harness.Shared(t, tg.kind)
		w := store.Window{Length: 5 * time.Second, Bucket: 200 * time.Millisecond}
		opts := []store.Option{store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend)}
		a, err := store.New(ctxT(t), srv.Client(t), w, opts...)
		require.NoError(t, err)
		b, err := store.New(ctxT(t), srv.Client(t), w, opts...) // another client: not one script
		require.NoError(t, err)
		ctx := context.WithValue(ctxT(t), slowUndoKey{}, 450*time.Millisecond) // two buckets and more
		for i := range 3 {
			d, err := store.AllowAll(ctx, 2, store.Quota{Store: a, Key: "user", Limit: 100}, store.Quota{Store: b, Key: "ip", Limit: 1})
			require.NoError(t, err)
			require.False(t, d.Allowed, "round %d", i)
			snap, err := a.Inspect(ctxT(t), "user")
			require.NoError(t, err)
			for _, bk := range snap.Buckets {
				require.Zero(t, bk.Value, "round %d: bucket %s (%v) after the undo: %+v", i, bk.Field, bk.Start, snap.Buckets)
			}
			if tg.wantBackend == "nativehash-plain" {
				require.Equal(t, "0", snap.Meta["t"], "round %d: the running total", i)
			}
		}
	})
}

// TestReplayInRefusedDecision: an event recorded and admitted, replayed with
// an entity whose limit is full, is refused and changes no count of the
// entity that saw it: the user's limit keeps the first recording's cost, a
// limit of 8 never admits a 9th, and a replay of the first recording still
// answers its decision. On one server and on a cluster.
func TestReplayInRefusedDecision(t *testing.T) {
	run := func(t *testing.T, set *features.Set) {
		ctx := ctxT(t)
		rec := func(id, user, ip string) features.Result {
			t.Helper()
			r, err := set.Record(ctx, features.Event{ID: id, Entities: map[string]string{"user": user, "ip": ip}})
			require.NoError(t, err)
			return r
		}
		limitOf := func(entity string, kv ...string) int64 {
			t.Helper()
			r, err := set.Read(ctx, map[string]string{entity: kv[0]})
			require.NoError(t, err)
			v, ok := r.Get(entity + "_limit")
			require.True(t, ok)
			return v.Sum
		}
		for i := range 8 { // fill ip i
			require.True(t, rec("fill"+strconv.Itoa(i), "other"+strconv.Itoa(i), "i").Allowed)
		}
		require.True(t, rec("e1", "u", "j").Allowed)
		require.EqualValues(t, 1, limitOf("user", "u"))
		r := rec("e1", "u", "i") // a replay, with a full ip
		require.False(t, r.Allowed)
		require.False(t, r.Duplicate, "ip i never saw e1")
		require.EqualValues(t, 1, limitOf("user", "u"), "the replay took the first recording's cost off the user")
		require.EqualValues(t, 8, limitOf("ip", "i"))
		r = rec("e1", "u", "j") // the first recording's entities: a duplicate
		require.True(t, r.Allowed, "a replay of the first recording answers its decision")
		require.True(t, r.Duplicate)
		admitted := int64(1)
		for i := range 20 {
			if rec("n"+strconv.Itoa(i), "u", "k"+strconv.Itoa(i)).Allowed {
				admitted++
			}
		}
		require.EqualValues(t, 8, admitted, "a limit of 8 admitted %d", admitted)
		require.EqualValues(t, 8, limitOf("user", "u"))
	}
	fs := []features.Feature{
		{Name: "user_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{{Length: 70 * time.Second, Bucket: time.Second}}, Limits: []int64{8}},
		{Name: "ip_limit", Entity: "ip", Kind: features.Limit, Windows: []store.Window{{Length: 70 * time.Second, Bucket: time.Second}}, Limits: []int64{8}},
	}
	t.Run("one server", func(t *testing.T) {
		forEach(t, func(t *testing.T, tg target) {
			srv := harness.Shared(t, tg.kind)
			set, err := features.New(ctxT(t), srv.Client(t), fs, store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend))
			require.NoError(t, err)
			run(t, set)
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := harness.NewCluster(t)
		set, err := features.New(ctxT(t), cl.Client(t), fs, store.WithPrefix(harness.Prefix(t)))
		require.NoError(t, err)
		run(t, set)
	})
}
