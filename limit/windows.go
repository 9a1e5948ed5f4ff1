package limit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/batch"
	"github.com/windowstore/windowstore/internal/keyspace"
	"github.com/windowstore/windowstore/internal/limitlua"
	"github.com/windowstore/windowstore/store"
)

// maxRules bounds a windows limiter's rules.
const maxRules = 16

// maxWindowsValue (2^51) bounds a windows limiter's limits and costs: its
// script keeps a running total that stays below 2^53 in a double.
const maxWindowsValue = 1 << 51

// WindowLimit is one window of a limiter of NewWindows: at most Limit units
// of cost in any Window.Length, counted in buckets of Window.Bucket. A bucket is live
// while it starts after now - Length, as in a store.Window: the window never
// over-counts, and may miss at most its oldest bucket's share. Buckets start
// at whole multiples of Bucket since the Unix epoch (a store's start at
// multiples within each UTC year: the same for a bucket that divides a day).
type WindowLimit struct {
	// Name names the rule in decisions (Decision.Policy, Policies): a token
	// such as "perminute".
	Name string
	// Limit is the most cost admitted per window, within [0, 2^51].
	Limit int64
	// Window is the window's shape, valid as for a store (store.Window.Validate).
	Window store.Window
}

// windowSet is the Limiter NewWindows returns.
type windowSet struct {
	batch  *batch.Batcher // coalesces concurrent calls into few script calls
	space  keyspace.Space
	name   string
	rules  []WindowLimit
	suffix string   // ":" + name + ":" + shapes
	rest   []string // the script's header after the clock
	server []string // the header on the server's clock
	more   []string // the suffix of each window's hash after the first's: ":2"...
	obs    store.Observer

	refusals refusals
}

// NewWindows returns a limiter of one or more windows of each key, kept
// through the caller's client under name: 1 to 16 rules, whose names differ
// and whose windows differ. Options: WithPrefix (the default is "rl:"),
// WithObserver (script "windows"). It fails with store.ErrInvalid for a bad
// name, rule or option.
//
// It decides several sliding windows of one key together, kept as one
// counter: for example 5 per minute, 100 per hour and 1,000 per day for
// user 42. A cost counts in every window or in none, in one script and one
// round trip; a refusal writes nothing. Of 40 concurrent callers, exactly as
// many are admitted as the tightest window allows. Decisions are exact:
// RetryAfter is the first ms at which the same cost fits in every window, and
// a retry one ms earlier fails.
//
// A key's windows share a running total g, the cost counted since the key
// started; each bucket that counted something keeps g as it was when the
// bucket started (S), and each window a mark, its oldest live bucket. A
// window's sum is g less its mark's S:
//
//	rule "perhour", 1h in 1m buckets; now 13:05:30
//	bucket     12:05  12:06  12:07  ...  13:05   <- 12:05 has left; 12:06 is the oldest live
//	counted        4      0      3  ...      2
//	S            100      -    104  ...    180   (12:06 counted nothing: no field)
//	g = 182; the mark is 12:07, whose S is 104: the sum is 182 - 104 = 78
//
// So an event reads and writes the key's state once whatever the number of
// windows, and writes a bucket's S only when it starts that bucket; a mark
// moves once per bucket. Each window keeps at most one field per bucket, in
// a hash of its own (so that a window of up to about 120 buckets stays in a
// listpack); the first window's hash also holds the state. All of a key's
// hashes share its Redis Cluster slot:
//
//	prefix + "{" + escape(key) + "}:" + name + ":" + shapes     the first window, and the state
//	prefix + "{" + escape(key) + "}:" + name + ":" + shapes + ":2" ...  the others
//
// where shapes lists the rules' windows ("1m/1s+1h/1m+1d/1h"). The rules'
// limits can change from one limiter to the next over the same keys; a change
// of their windows, or of their order, starts every key afresh (new keys; the
// old ones expire). The keys expire once every bucket counted has left its
// window, at most half the longest window later (their expiry moves at most
// once per quarter of it).
//
// Costs are within [0, 2^51]. A clock behind the key's newest count (AllowAt
// with an earlier t) is taken as that count's time.
//
// Combine decides sliding windows whose counters are a store's, for
// counters that are also read as sums, and AllowKeys policies across keys;
// for several windows of one key, NewWindows costs the server less than they
// do (docs/benchmarks.md, rows windows3 and allow3). The limiter is safe for
// concurrent use.
func NewWindows(client rueidis.Client, name string, rules []WindowLimit, opts ...Option) (Limiter, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, newError(name, store.ErrInvalid, "nil client")
	}
	if len(rules) == 0 || len(rules) > maxRules {
		return nil, newError(name, store.ErrInvalid, strconv.Itoa(len(rules))+" rules: not within [1, 16]")
	}
	o := options{prefix: defaultPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	if o.degrade {
		return nil, newError(name, store.ErrInvalid, "a Degrade option (WithInstances...) configures Degrade, not a limiter")
	}
	space, err := keyspace.New(o.prefix)
	if err != nil {
		return nil, newError(name, store.ErrInvalid, reason(err))
	}
	w := &windowSet{space: space, name: name, rules: append([]WindowLimit(nil), rules...), obs: o.observer, refusals: newRefusals(&o)}
	names, shapes := map[string]bool{}, map[store.Window]bool{}
	tags := make([]string, len(rules))
	var longest time.Duration
	for i, r := range rules {
		if err := checkName(r.Name); err != nil {
			return nil, err
		}
		if err := r.Window.Validate(); err != nil {
			var se *store.Error
			detail := err.Error()
			if errors.As(err, &se) {
				detail = se.Detail
			}
			return nil, newError(r.Name, store.ErrInvalid, "window "+r.Window.String()+": "+detail)
		}
		if r.Limit < 0 || r.Limit > maxWindowsValue {
			return nil, newError(r.Name, store.ErrInvalid, "limit "+strconv.FormatInt(r.Limit, 10)+" is not within [0, 2^51]")
		}
		if names[r.Name] {
			return nil, newError(r.Name, store.ErrInvalid, "two rules of one name")
		}
		if shapes[r.Window] {
			return nil, newError(r.Name, store.ErrInvalid, "two rules of one window ("+r.Window.String()+")")
		}
		names[r.Name], shapes[r.Window] = true, true
		tags[i] = keyspace.Shape(r.Window.Length, r.Window.Bucket)
		longest = max(longest, r.Window.Length)
	}
	w.suffix = ":" + name + ":" + strings.Join(tags, "+")
	w.rest = []string{strconv.FormatInt(max(1, longest.Milliseconds()/4), 10), strconv.Itoa(len(rules))}
	for i, r := range rules {
		b := r.Window.Bucket.Milliseconds()
		k := strconv.Itoa(i + 1)
		w.rest = append(w.rest, strconv.FormatInt(b, 10), strconv.FormatInt(r.Window.Length.Milliseconds()/b, 10),
			strconv.FormatInt(r.Limit, 10), "m"+k, "v"+k)
	}
	w.server = append([]string{backend.ServerClock.Arg()}, w.rest...)
	w.more = make([]string, len(rules))
	for i := 1; i < len(rules); i++ {
		w.more[i] = ":" + strconv.Itoa(i+1)
	}
	var obs batch.Observer
	if o.observer != nil {
		obs = o.observer
	}
	w.batch = batch.New(client, backend.NewRunner(client, true), limitlua.Windows, "windows", obs, batch.DefaultOps, batch.DefaultCalls)
	return w, nil
}

// Policy returns the rule with the smallest limit per unit of time, the one
// most likely to refuse.
func (w *windowSet) Policy() Policy {
	ps := w.policies()
	best := ps[0]
	for _, p := range ps[1:] {
		if float64(p.Limit)/float64(p.Window) < float64(best.Limit)/float64(best.Window) {
			best = p
		}
	}
	return best
}

// policies returns every rule's policy, in order (for Degrade and httplimit's
// RateLimit-Policy).
func (w *windowSet) policies() []Policy {
	ps := make([]Policy, len(w.rules))
	for i, r := range w.rules {
		ps[i] = Policy{Name: r.Name, Limit: r.Limit, Window: r.Window.Length, Algorithm: "sliding-window"}
	}
	return ps
}

// Allow admits n units of cost for key in every window, or in none, on the
// server's clock. The Decision is the deciding rule's: the refusing one with
// the latest retry, or else the one with the least remaining; Policies has
// every rule's own decision, in order (its Allowed says whether that rule
// admitted the cost, so a rule of a refused decision may say true). A cost
// of 0 only asks: it writes nothing, and reports every window's sum.
func (w *windowSet) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	return w.run(ctx, backend.ServerClock, key, n)
}

// AllowAt is Allow at instant t on the client's clock.
func (w *windowSet) AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error) {
	return w.run(ctx, backend.ClientClock(t.UnixMilli()), key, n)
}

func (w *windowSet) run(ctx context.Context, clock backend.Clock, key string, n int64) (_ store.Decision, err error) {
	if w.obs != nil {
		var end func(error)
		ctx, end = w.obs.Start(ctx, "allow")
		defer func() { end(err) }()
	}
	if err := checkCost(w.name, key, n, maxWindowsValue); err != nil {
		return store.Decision{}, err
	}
	keys, err := w.keys(key)
	if err != nil {
		return store.Decision{}, err
	}
	server := clock == backend.ServerClock
	cached, asked, ok := w.refusals.refused(ctx, server, key, n)
	if ok {
		return cached, nil
	}
	hdr := w.server
	if clock != backend.ServerClock {
		hdr = append([]string{clock.Arg()}, w.rest...)
	}
	msg, err := w.batch.Do(ctx, keys, hdr, strconv.FormatInt(n, 10))
	var v []int64
	if err == nil {
		v, err = msg.AsIntSlice()
	}
	if err == nil && len(v) != 3+len(w.rules) && len(v) != 3+2*len(w.rules) {
		err = errors.New("unexpected reply")
	}
	if err != nil {
		return store.Decision{}, scriptError(w.name, key, limitlua.Windows, err)
	}
	d := w.decision(v)
	w.refusals.remember(server, key, n, asked, d)
	return d, nil
}

// keys are key's Redis keys: one hash per rule.
func (w *windowSet) keys(key string) ([]string, error) {
	first, err := w.space.Name(key, w.suffix)
	if err != nil {
		return nil, callError(w.name, key, store.ErrInvalid, reason(err), err)
	}
	keys := make([]string, len(w.rules))
	keys[0] = first
	for i := 1; i < len(keys); i++ {
		keys[i] = first + w.more[i]
	}
	return keys, nil
}

// decision is the script's reply {allowed, now, t, then per rule its sum;
// then, when refused, per rule its retry ms} as a Decision.
func (w *windowSet) decision(v []int64) store.Decision {
	allowed, now, t := v[0] == 1, v[1], v[2]
	k := len(w.rules)
	ds := make([]store.Decision, k)
	decides, retry := -1, time.Duration(0)
	for i, r := range w.rules {
		sum := v[3+i]
		d := store.Decision{Allowed: true, Limit: r.Limit, Sum: sum, Remaining: min(r.Limit, max(0, r.Limit-sum)), Policy: r.Name}
		if sum > 0 { // t's bucket leaves the window
			b := r.Window.Bucket.Milliseconds()
			d.ResetAfter = time.Duration((floorDiv(t, b)+r.Window.Length.Milliseconds()/b)*b-now) * time.Millisecond
		}
		if !allowed {
			rt := ms(v[3+k+i])
			d.Allowed, d.RetryAfter = rt == 0, rt
			if rt != 0 && (decides < 0 || retry >= 0 && (rt < 0 || rt > retry)) { // the first of equals
				decides, retry = i, rt
			}
		}
		ds[i] = d
	}
	if decides < 0 {
		decides = 0
		for i := range ds {
			if ds[i].Remaining < ds[decides].Remaining {
				decides = i
			}
		}
	}
	d := ds[decides]
	d.Allowed = allowed
	d.Policies = ds
	return d
}

// floorDiv is a / b rounded down (b > 0), as the script's math.floor: a
// bucket's index also before 1970.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
