package tests

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/internal/figures"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// windowsServers are the servers the windows limiter's tests run on: its
// script uses only core commands.
var windowsServers = []harness.Kind{harness.Redis70, harness.Redis80, harness.Valkey}

// windowsModel is an exact model of limit.NewWindows: the log of every
// admitted cost, and sums, retries and resets computed from it by brute force.
// (Its figures stay within int64: limits and costs are at most 2^51, so a
// window's sum is at most 2^51 and a sum plus a cost at most 2^52.)
type windowsModel struct {
	rules  []limit.WindowLimit
	events []modelEvent // admitted costs over 0, in time order
}

type modelEvent struct{ at, n int64 }

// sum is rule k's window sum at ms now: the costs of the buckets still live.
func (m *windowsModel) sum(k int, now int64) int64 {
	b, nb := m.rules[k].Window.Bucket.Milliseconds(), int64(m.rules[k].Window.Length/m.rules[k].Window.Bucket)
	var s int64
	for _, e := range m.events {
		if e.at/b >= now/b-nb+1 {
			s += e.n
		}
	}
	return s
}

// leaves is when the bucket of an event at ms at leaves rule k's window.
func (m *windowsModel) leaves(k int, at int64) int64 {
	b, nb := m.rules[k].Window.Bucket.Milliseconds(), int64(m.rules[k].Window.Length/m.rules[k].Window.Bucket)
	return (at/b + nb) * b
}

// fits reports whether cost fits under rule k at ms now.
func (m *windowsModel) fits(k int, now, cost int64) bool {
	return cost <= m.rules[k].Limit && m.sum(k, now)+cost <= m.rules[k].Limit
}

// retry is the first ms from now at which cost fits under the rules ks (by
// trying every moment a bucket leaves), less now; -1 if it never does.
func (m *windowsModel) retry(ks []int, now, cost int64) int64 {
	var at []int64
	for k := range m.rules {
		for _, e := range m.events {
			if l := m.leaves(k, e.at); l > now {
				at = append(at, l)
			}
		}
	}
	slices.Sort(at)
	for _, t := range append([]int64{now}, at...) {
		ok := true
		for _, k := range ks {
			ok = ok && m.fits(k, t, cost)
		}
		if ok {
			return t - now
		}
	}
	return -1
}

// decide is the model's decision of cost at ms now, recorded when admitted.
func (m *windowsModel) decide(now, cost int64) store.Decision {
	if len(m.events) > 0 && now < m.events[len(m.events)-1].at {
		now = m.events[len(m.events)-1].at // a clock behind the newest count
	}
	ds := make([]store.Decision, len(m.rules))
	allowed := true
	for k := range m.rules {
		ds[k].Allowed = m.fits(k, now, cost)
		allowed = allowed && ds[k].Allowed
	}
	if allowed && cost > 0 {
		m.events = append(m.events, modelEvent{now, cost})
	}
	for k, r := range m.rules {
		d := &ds[k]
		d.Policy, d.Limit, d.Sum = r.Name, r.Limit, m.sum(k, now)
		d.Remaining = min(r.Limit, max(0, r.Limit-d.Sum))
		if !d.Allowed {
			d.RetryAfter = retryDuration(m.retry([]int{k}, now, cost))
		}
		var reset int64
		for _, e := range m.events {
			if l := m.leaves(k, e.at); l > now && e.at/r.Window.Bucket.Milliseconds() >= now/r.Window.Bucket.Milliseconds()-int64(r.Window.Length/r.Window.Bucket)+1 {
				reset = max(reset, l-now)
			}
		}
		d.ResetAfter = time.Duration(reset) * time.Millisecond
	}
	// The deciding rule: the refusing one with the latest retry (never
	// first), else the one with the least remaining; the first of equals.
	pick := -1
	for k, d := range ds {
		if !d.Allowed && (pick < 0 || d.RetryAfter < 0 && ds[pick].RetryAfter >= 0 || ds[pick].RetryAfter >= 0 && d.RetryAfter > ds[pick].RetryAfter) {
			pick = k
		}
	}
	if pick < 0 {
		pick = 0
		for k, d := range ds {
			if d.Remaining < ds[pick].Remaining {
				pick = k
			}
		}
	}
	out := ds[pick]
	out.Allowed, out.Policies = allowed, ds
	if !allowed {
		all := make([]int, len(m.rules))
		for k := range all {
			all[k] = k
		}
		// The group's retry, found on its own: the first moment every rule
		// admits the cost.
		if g := retryDuration(m.retry(all, now, cost)); g != out.RetryAfter {
			panic(fmt.Sprintf("model: the deciding retry %v is not the group's %v", out.RetryAfter, g))
		}
	}
	return out
}

// retryDuration is a retry in ms as a Decision has it: -1 (never) stays -1.
func retryDuration(ms int64) time.Duration {
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// windowsRules is a random walk's rules: 1 to 4 windows of distinct shapes.
func windowsRules(rng *rand.Rand, big bool) []limit.WindowLimit {
	buckets := []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, time.Second, 3 * time.Second, 7 * time.Second}
	var rules []limit.WindowLimit
	seen := map[store.Window]bool{}
	for n := 1 + rng.IntN(4); len(rules) < n; {
		w := store.Window{Bucket: buckets[rng.IntN(len(buckets))]}
		w.Length = w.Bucket * time.Duration(1+rng.IntN(12))
		if seen[w] {
			continue
		}
		seen[w] = true
		lim := int64(1 + rng.IntN(20))
		if big {
			lim = 1<<51 - rng.Int64N(1<<20)
		}
		rules = append(rules, limit.WindowLimit{Name: fmt.Sprintf("r%d", len(rules)), Limit: lim, Window: w})
	}
	return rules
}

// TestWindowsModel walks random sequences of costs through random sets of
// windows, on the client's clock, and compares every decision with the exact
// model: allowed, the deciding rule, and each rule's sum, remaining, retry
// and reset. Steps go forward by 0 to a few buckets, past every window, and
// back (a clock behind the newest count); limits are small, or near 2^51
// with costs from 2^46 to 2^51, so that the running total is rebased many
// times. Every RetryAfter is the model's first moment at which the cost
// fits: a retry then succeeds and one a ms before fails.
func TestWindowsModel(t *testing.T) {
	t.Parallel()
	for _, kind := range windowsServers {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			c := harness.Shared(t, kind).Client(t)
			ctx := ctxT(t)
			for seed := uint64(1); seed <= 24; seed++ {
				big := seed%2 == 0
				rng := rand.New(rand.NewPCG(seed, 23))
				rules := windowsRules(rng, big)
				l, err := limit.NewWindows(c, "walk", rules, limit.WithPrefix(harness.Prefix(t)))
				require.NoError(t, err)
				m := &windowsModel{rules: rules}
				now := time.Date(2026, 12, 31, 23, 59, 50, 0, time.UTC).UnixMilli() + rng.Int64N(1000)
				for step := 0; step < 400; step++ {
					switch x := rng.IntN(100); {
					case x < 10: // the same ms
					case x < 70:
						now += rng.Int64N(400)
					case x < 90:
						now += rng.Int64N(6000)
					case x < 95:
						now += 90000 + rng.Int64N(10000) // every window left
					default:
						now -= rng.Int64N(500) // a clock behind
					}
					cost := rng.Int64N(4)
					if big { // mostly many to a window, sometimes one that fills it
						cost = 1<<46 + rng.Int64N(1<<49)
						if rng.IntN(8) == 0 {
							cost = 1<<51 - rng.Int64N(1<<20)
						}
					}
					if rng.IntN(10) == 0 {
						cost = 0
					}
					want := m.decide(now, cost)
					got, err := l.AllowAt(ctx, time.UnixMilli(now), "k", cost)
					require.NoError(t, err)
					require.Equal(t, want, got, "seed %d step %d at %d, cost %d, rules %+v", seed, step, now, cost, rules)
				}
			}
		})
	}
}

// TestWindowsExact: 48 concurrent callers of three windows (6 per 10 s, 4
// per minute, 50 per hour) on the server's clock admit exactly the tightest
// limit, 4; the refusals name the rule that refuses, and the sums after say 4
// in every window. On every server and on a Redis Cluster (a key's hashes
// share a slot).
func TestWindowsExact(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, c rueidis.Client) {
		l, err := limit.NewWindows(c, "exact", []limit.WindowLimit{
			{Name: "per10s", Limit: 6, Window: store.Window{Length: 10 * time.Second, Bucket: time.Second}},
			{Name: "permin", Limit: 4, Window: store.Window{Length: time.Minute, Bucket: 5 * time.Second}},
			{Name: "perhour", Limit: 50, Window: store.Window{Length: time.Hour, Bucket: time.Minute}},
		}, limit.WithPrefix(harness.Prefix(t)))
		require.NoError(t, err)
		ctx := ctxT(t)
		require.EqualValues(t, 4, raceAllow(t, l, 48, func(d store.Decision) {
			assert.Equal(t, "permin", d.Policy)
			assert.Len(t, d.Policies, 3)
			assert.Positive(t, d.RetryAfter)
		}))
		d, err := l.Allow(ctx, "u", 0)
		require.NoError(t, err)
		for _, p := range d.Policies {
			require.EqualValues(t, 4, p.Sum, p.Policy)
		}
	}
	for _, kind := range windowsServers {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			run(t, harness.Shared(t, kind).Client(t))
		})
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		run(t, harness.NewCluster(t).Client(t))
	})
}

// TestWindowsKeys: every hash of a key expires, including a window's hash
// made again after everything in it left while the key's state lived on;
// the keys are gone once every bucket has left; a key whose state was lost
// starts afresh; a key that holds something else is an error.
func TestWindowsKeys(t *testing.T) {
	t.Parallel()
	c := harness.Shared(t, harness.Redis70).Client(t)
	ctx := ctxT(t)
	prefix := harness.Prefix(t)
	l, err := limit.NewWindows(c, "keys", []limit.WindowLimit{
		{Name: "slow", Limit: 100, Window: store.Window{Length: 2 * time.Second, Bucket: 500 * time.Millisecond}},
		{Name: "fast", Limit: 100, Window: store.Window{Length: 300 * time.Millisecond, Bucket: 100 * time.Millisecond}},
	}, limit.WithPrefix(prefix))
	require.NoError(t, err)
	first := prefix + "{k}:keys:2s/500ms+300ms/100ms"
	keys := []string{first, first + ":2"}
	pttl := func(k string) int64 {
		v, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		return v
	}
	t0 := time.Now()
	for _, at := range []time.Duration{0, 50 * time.Millisecond, 600 * time.Millisecond} {
		// At 600 ms the fast window's buckets have all left: its hash is
		// emptied, and made again by this count.
		d, err := l.AllowAt(ctx, t0.Add(at), "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		for _, k := range keys {
			ttl := pttl(k)
			require.Positive(t, ttl, "%s after the count at %v", k, at)
			require.LessOrEqual(t, ttl, int64(3500), k) // 2.5 s past the newest bucket's start, and at most half of 2 s
		}
	}
	require.Eventually(t, func() bool {
		n, err := c.Do(ctx, c.B().Exists().Key(keys...).Build()).AsInt64()
		return err == nil && n == 0
	}, 10*time.Second, 100*time.Millisecond, "the keys outlive their windows")

	// A key whose state is lost (deleted, evicted) while a window's hash
	// lives on starts afresh: the hash's fields are not read as its own.
	t1 := t0.Add(time.Minute).Truncate(time.Second)
	for _, c := range []struct {
		at   time.Duration
		cost int64
	}{{0, 5}, {100 * time.Millisecond, 5}} {
		_, err := l.AllowAt(ctx, t1.Add(c.at), "d", c.cost)
		require.NoError(t, err)
	}
	lost := prefix + "{d}:keys:2s/500ms+300ms/100ms"
	require.NoError(t, c.Do(ctx, c.B().Del().Key(lost).Build()).Error())
	for _, at := range []time.Duration{0, 250 * time.Millisecond} {
		_, err := l.AllowAt(ctx, t1.Add(at), "d", 1)
		require.NoError(t, err)
	}
	d, err := l.AllowAt(ctx, t1.Add(320*time.Millisecond), "d", 0)
	require.NoError(t, err)
	require.EqualValues(t, 2, d.Policies[0].Sum, "slow")
	require.EqualValues(t, 1, d.Policies[1].Sum, "fast")

	require.NoError(t, c.Do(ctx, c.B().Set().Key(prefix+"{s}:keys:2s/500ms+300ms/100ms").Value("x").Build()).Error())
	_, err = l.Allow(ctx, "s", 1)
	require.ErrorContains(t, err, "WRONGTYPE")
}

// TestWindowsMemory: the README's three limits of one key (per minute in
// seconds, per hour in minutes, per day in hours), with every bucket of every
// window holding a count, as a hammered key's do: the windows limiter's keys
// against Combine's three store counters (limit.NewSlidingWindow), and
// against three stores of one prefix decided together (store.AllowAll of
// three policies on the key: on the plain hash, one head for the three), by
// MEMORY USAGE. Each of the limiter's hashes stays a listpack, and the whole
// costs at most 1.2x Combine's.
func TestWindowsMemory(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxT(t)
	prefix := harness.Prefix(t)
	shapes := []store.Window{{Length: time.Minute, Bucket: time.Second}, {Length: time.Hour, Bucket: time.Minute},
		{Length: 24 * time.Hour, Bucket: time.Hour}}
	var rules []limit.WindowLimit
	var parts []limit.Limiter
	var policies []store.Quota
	for i, w := range shapes {
		name := []string{"persec", "permin", "perday"}[i]
		rules = append(rules, limit.WindowLimit{Name: name, Limit: 1 << 40, Window: w})
		st, err := store.New(ctx, c, w, store.WithPrefix(prefix+"sw:"))
		require.NoError(t, err)
		l, err := limit.NewSlidingWindow(st, name, 1<<40)
		require.NoError(t, err)
		parts = append(parts, l)
		ps, err := store.New(ctx, c, w, store.WithPrefix(prefix+"all:"))
		require.NoError(t, err)
		policies = append(policies, store.Quota{Store: ps, Key: "k", Limit: 1 << 40})
	}
	win, err := limit.NewWindows(c, "three", rules, limit.WithPrefix(prefix+"win:"))
	require.NoError(t, err)
	multi, err := limit.Combine(parts...)
	require.NoError(t, err)
	at := threeWindowsFull()
	for _, ts := range at {
		for _, l := range []limit.Limiter{win, multi} {
			d, err := l.AllowAt(ctx, ts, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		pol := make([]store.Quota, len(policies))
		for i, p := range policies {
			pol[i] = store.Quota{Store: p.Store.At(ts), Key: p.Key, Limit: p.Limit}
		}
		d, err := store.AllowAll(ctx, 1, pol...)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	usage := func(pattern string) (total int64) {
		keys, err := c.Do(ctx, c.B().Keys().Pattern(pattern).Build()).AsStrSlice()
		require.NoError(t, err)
		require.NotEmpty(t, keys, pattern)
		for _, k := range keys {
			n, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys(k).Args("SAMPLES", "0").Build()).AsInt64()
			require.NoError(t, err)
			enc, err := c.Do(ctx, c.B().ObjectEncoding().Key(k).Build()).ToString()
			require.NoError(t, err)
			if !strings.HasSuffix(k, ":h") { // (the plain hash's head is a string)
				require.Equal(t, "listpack", enc, k)
			}
			total += n
		}
		return total
	}
	w, m, a := usage(prefix+"win:*"), usage(prefix+"sw:*"), usage(prefix+"all:*")
	t.Logf("three windows of one key, every bucket counted: windows limiter %d B, Combine %d B (%.2fx), AllowAll of three stores %d B",
		w, m, float64(w)/float64(m), a)
	require.LessOrEqual(t, float64(w), 1.2*float64(m))
	server := srv.Version(t)
	how := "MEMORY USAGE SAMPLES 0 of every key of one key's three limits (1m/1s, 1h/1m, 1d/1h), every bucket counted"
	figures.Check(t, "limiters/three/windows", figures.Figure{Value: float64(w), Unit: "B", How: how, Server: server}, 0.03)
	figures.Check(t, "limiters/three/combine", figures.Figure{Value: float64(m), Unit: "B", How: how, Server: server}, 0.03)
	figures.Check(t, "limiters/three/allowall", figures.Figure{Value: float64(a), Unit: "B", How: how, Server: server}, 0.03)
}

// TestWindowsMiddleware: a rule whose limiter is a windows limiter answers
// 429 past its tightest window, names every window in RateLimit-Policy, and
// the refusing one in RateLimit.
func TestWindowsMiddleware(t *testing.T) {
	t.Parallel()
	c := harness.Shared(t, harness.Redis70).Client(t)
	l, err := limit.NewWindows(c, "api", []limit.WindowLimit{
		{Name: "persec", Limit: 3, Window: store.Window{Length: 10 * time.Second, Bucket: time.Second}},
		{Name: "perhour", Limit: 100, Window: store.Window{Length: time.Hour, Bucket: time.Minute}},
	}, limit.WithPrefix(harness.Prefix(t)))
	require.NoError(t, err)
	mw, err := httplimit.New([]httplimit.Rule{{Name: "api", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{l}}})
	require.NoError(t, err)
	ts := httptest.NewServer(mw(okHandler()))
	defer ts.Close()
	codes := map[int]int{}
	var last *http.Response
	for i := 0; i < 5; i++ {
		last = get(t, ts.URL, map[string]string{"X-User": "u"})
		codes[last.StatusCode]++
	}
	require.Equal(t, map[int]int{200: 3, http.StatusTooManyRequests: 2}, codes)
	require.Equal(t, "persec;q=3;w=10, perhour;q=100;w=3600", last.Header.Get("RateLimit-Policy"))
	require.Contains(t, last.Header.Get("RateLimit"), "persec;r=0;t=")
}

// TestWindowsLongWindow: a window of 10,000 buckets (1,000 s in 100 ms)
// beside one of 10 s. 9,000 buckets each count, then a jump moves the long
// window's mark past 8,000 of them at once (deleted a thousand at a
// time); then sparse counts, a long way apart, make each move cross
// thousands of empty buckets; costs near 2^51 / 9,000 keep the long window
// near its limit of 2^51, so its running total is rebased over 10,000
// fields. Every decision is compared with the exact model.
func TestWindowsLongWindow(t *testing.T) {
	t.Parallel()
	c := harness.Shared(t, harness.Redis70).Client(t)
	ctx := ctxLong(t)
	rules := []limit.WindowLimit{
		{Name: "long", Limit: 1 << 51, Window: store.Window{Length: 1000 * time.Second, Bucket: 100 * time.Millisecond}},
		{Name: "short", Limit: 1 << 51, Window: store.Window{Length: 10 * time.Second, Bucket: time.Second}},
	}
	prefix := harness.Prefix(t)
	l, err := limit.NewWindows(c, "long", rules, limit.WithPrefix(prefix))
	require.NoError(t, err)
	m := &windowsModel{rules: rules}
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC).UnixMilli()
	cost := int64(1<<51) / 9000
	var counted big.Int
	check := func(step int) {
		want := m.decide(now, cost)
		got, err := l.AllowAt(ctx, time.UnixMilli(now), "k", cost)
		require.NoError(t, err)
		require.Equal(t, want, got, "step %d at %d", step, now)
		if got.Allowed {
			counted.Add(&counted, big.NewInt(cost))
		}
		m.forget(now)
	}
	step := 0
	for ; step < 9000; step++ { // every bucket of 900 s counts
		check(step)
		now += 100
	}
	now += 900 * 1000 // the first 8,000 buckets leave at once
	for ; step < 9030; step++ {
		check(step)
		now += 10 * 100
	}
	for ; step < 9060; step++ { // sparse: 3,001 buckets apart
		check(step)
		now += 300100
	}
	for ; step < 21000; step++ { // dense again, past 2^52 counted
		check(step)
		now += 100
	}
	// The running total was rebased: it holds less than what was counted.
	g, err := c.Do(ctx, c.B().Hget().Key(prefix+"{k}:long:1000s/100ms+10s/1s").Field("g").Build()).AsFloat64()
	require.NoError(t, err)
	require.Positive(t, counted.Cmp(big.NewInt(1<<52)), "counted %v: the walk never passed 2^52", &counted)
	require.Less(t, g, float64(1<<52))
}

// forget drops the events that have left every window at ms now: they
// count nowhere again (it keeps the model's brute force quick).
func (m *windowsModel) forget(now int64) {
	i := 0
	for i < len(m.events) {
		live := false
		for k := range m.rules {
			live = live || m.leaves(k, m.events[i].at) > now
		}
		if live {
			break
		}
		i++
	}
	m.events = m.events[i:]
}

// TestWindowsMarkFarBehind: a state whose mark lies far behind its window (a
// state written by hand, say) costs the script a window's worth of work, not
// a walk from the mark to now (a mark at the epoch would be some 1.8 billion
// field names): the call deletes the window's fields in one HDEL, counts,
// and leaves the window's hash small. On a server of its own, whose command
// counts are the call's alone.
func TestWindowsMarkFarBehind(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxT(t)
	prefix := harness.Prefix(t)
	l, err := limit.NewWindows(c, "far", []limit.WindowLimit{
		{Name: "persec", Limit: 100, Window: store.Window{Length: 10 * time.Second, Bucket: time.Second}},
	}, limit.WithPrefix(prefix))
	require.NoError(t, err)
	t0 := time.Now()
	_, err = l.AllowAt(ctx, t0, "k", 3)
	require.NoError(t, err)
	// The mark 500,000 buckets (seconds) behind the newest count's.
	state := prefix + "{k}:far:10s/1s"
	far := strconv.FormatInt(t0.Unix()-500_000, 10)
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(state).FieldValue().FieldValue("m1", far).Build()).Error())
	require.NoError(t, c.Do(ctx, c.B().ConfigResetstat().Build()).Error())
	call, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := l.AllowAt(call, t0.Add(20*time.Second), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.EqualValues(t, 1, d.Sum, "the count at t0 has left the window")
	stats, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	hdels := regexp.MustCompile(`cmdstat_hdel:calls=(\d+)`).FindStringSubmatch(stats)
	require.NotNil(t, hdels, "no HDEL: the passed fields were not deleted")
	require.Equal(t, "1", hdels[1], "HDEL calls: the script walked from the mark, a thousand names a call")
	n, err := c.Do(ctx, c.B().Hlen().Key(state).Build()).AsInt64()
	require.NoError(t, err)
	require.LessOrEqual(t, n, int64(8), "the state and the new bucket")
}

// threeWindowsFull lists the instants of one count in each bucket of the
// README's three windows (1d/1h, 1h/1m, 1m/1s) as they end half a minute
// into the last hour: each of the day's last 23 hours, the last hour's 59
// minutes before its last, the last minute's 60 seconds, oldest first.
func threeWindowsFull() []time.Time {
	end := time.Now().Truncate(time.Hour).Add(-time.Hour + 30*time.Second)
	var at []time.Time
	for h := 23; h >= 1; h-- {
		at = append(at, end.Add(-time.Duration(h)*time.Hour))
	}
	for m := 59; m >= 1; m-- {
		at = append(at, end.Add(-time.Duration(m)*time.Minute))
	}
	for s := 59; s >= 0; s-- {
		at = append(at, end.Add(-time.Duration(s)*time.Second))
	}
	return at
}
