// Package features keeps the counters a risk engine reads for one event:
// a declared set of features, each counting, summing, or counting distinct
// values of the events of one entity (a user, an IP, a card) over one or more
// windows, or limiting them. Record updates every feature of an event and
// returns every value and the limits' decision in one round trip per node.
//
//	set, err := features.New(ctx, client, []features.Feature{
//		{Name: "logins", Entity: "user", Kind: features.Count,
//			Windows: []store.Window{{time.Minute, time.Second}, {time.Hour, time.Minute}}},
//		{Name: "login_limit", Entity: "user", Kind: features.Limit, Limits: []int64{5},
//			Windows: []store.Window{{time.Minute, time.Second}}},
//		{Name: "cards_per_device", Entity: "device", Kind: features.Distinct, Of: "card",
//			Windows: []store.Window{{24 * time.Hour, time.Hour}}},
//	})
//	res, err := set.Record(ctx, features.Event{ID: "evt-9", Entities: map[string]string{
//		"user": "42", "device": "d-7", "card": "4242"}})
//	res.Allowed; res.Get("logins").Sums; res.Get("cards_per_device").Sum
//
// How it runs: the features of one entity live in one Redis Cluster slot
// (their keys share the entity's hash tag, prefix + "{user:42}:logins:1m/1s"),
// so each entity's features are updated by one script, atomically, and the
// entities' scripts go out together, in parallel per node. The limits of
// every entity are all or nothing (store.ApplyAll): a refusal by one counts
// the event in none of the limits, of any entity. On a server that is not a
// cluster that is one script call; on a cluster, the entities that admitted
// are taken back by one more round trip when another refuses. Counts, sums
// and distinct counts count every event, refused or not: they describe what
// was attempted.
//
// With an event ID, a replayed event counts once (per entity: an entity that
// saw it answers Duplicate and writes nothing, one that did not counts it), so
// a queue consumer may replay a batch. With an event Time, a late event counts
// in the buckets of its own time.
package features

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/store"
)

// Kind is what a feature computes.
type Kind int

const (
	// Count counts the entity's events.
	Count Kind = iota
	// Sum adds up the events' Amount.
	Sum
	// Distinct counts the distinct values of another entity of the events
	// (Of): distinct cards per device.
	Distinct
	// Limit refuses an event when the entity's events (cost 1, or the Amount
	// with SpendAmount) would pass a limit in any of its windows.
	Limit
	// Max is the greatest Amount of the entity's events in each window:
	// "the largest payment of this card in 24 hours".
	Max
	// Min is the least Amount: "the smallest amount in the last hour".
	Min
	// Avg is the average Amount (Value.Stats has the sum and the count).
	Avg
	// First is the time of the entity's oldest event in each window, as
	// Unix ms ("first seen": the window bounds how far back it looks).
	First
	// Last is the time of the entity's newest event, as Unix ms ("last
	// seen"; seconds since: now minus it).
	Last
	// Recent is the entity's most recent Amounts with their times, newest
	// first (the last K, K at most 16): Value.Stats[i].Recent.
	Recent
)

// stats maps the statistic kinds to the store's.
var stats = map[Kind]store.Stat{Max: store.StatMax, Min: store.StatMin, Avg: store.StatAvg, First: store.StatFirst, Last: store.StatLast,
	Recent: store.StatRecent}

func (k Kind) String() string {
	switch k {
	case Count:
		return "count"
	case Sum:
		return "sum"
	case Distinct:
		return "distinct"
	case Limit:
		return "limit"
	}
	if st, ok := stats[k]; ok {
		return st.String()
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Feature declares one feature.
type Feature struct {
	// Name names the feature in results and keys: letters, digits, '_', '-'
	// and '.'; unique in the set.
	Name string
	// Entity is the entity of the event the feature keys on: "user", "ip",
	// "card". An event without it leaves the feature out.
	Entity string
	// Kind is what the feature computes.
	Kind Kind
	// Windows are the feature's windows, at least one: the first is its main
	// window; the others make it a multi-resolution counter (store.WithTiers).
	Windows []store.Window
	// Of is, for Distinct, the entity whose distinct values are counted. An
	// event without it leaves the feature out.
	Of string
	// Limits are, for Limit, the limit of each window, in order (one per
	// window; a negative limit means none for that window).
	Limits []int64
	// SpendAmount makes a Limit spend the event's Amount instead of 1.
	SpendAmount bool
}

// Event is one event to record.
type Event struct {
	// ID, when not empty, makes the event count once however often it is
	// recorded (within the feature windows).
	ID string
	// Time, when not zero, is when the event happened: a late event counts in
	// the buckets of its own time (store.Event.Time).
	Time time.Time
	// Entities are the event's entities: "user" -> "42", "ip" -> "1.2.3.4".
	// An entity whose value is empty is the same as one the event does not
	// have: the features keyed on it, or counting its distinct values, are
	// left out (nothing is counted under an empty value).
	Entities map[string]string
	// Amount is what Sum features add, and what SpendAmount limits spend.
	Amount int64
}

// Value is one feature's value for one event.
type Value struct {
	Feature string // the feature's name
	Entity  string // the entity it keyed on, as "user:42"
	Kind    Kind
	// Sum is the value over the main window: the count, the sum, or the
	// number of distinct values; for a Limit, the sum in the window that
	// decides; for a statistic (Max, Min, Avg, First, Last, Recent), its
	// Value (0 when the window has no event: see Stats).
	Sum int64
	// Sums has the value over each window, in the feature's order.
	Sums []int64
	// Stats has a statistic's value over each window, in the feature's
	// order: whether the window has an event (OK), Avg's sum and count,
	// Recent's values. Nil for the other kinds.
	Stats []store.StatValue `json:",omitempty"`
	// Counted reports whether this event counted in the feature (false for
	// a duplicate, a refused limit, or a late event that left every window).
	Counted bool
	// Decision is a Limit's, nil for the other kinds: whether it admits the
	// event (Allowed), what it has left in its tightest window (Remaining,
	// Limit, Sum), and when it would admit it again (RetryAfter). A duplicate
	// answers the first recording's decision: Allowed false where this limit
	// refused it then, with RetryAfter from now (0 when a new event would be
	// admitted now). Policy is the feature's name.
	Decision *store.Decision `json:",omitempty"`
}

// Result is what Record or Read found.
type Result struct {
	// Allowed reports whether every limit admitted the event.
	Allowed bool
	// RefusedBy names the limit features that refused it (for a duplicate,
	// those that refused its first recording), in the set's order.
	RefusedBy []string
	// RetryAfter is the longest of the refusing entities' waits until their
	// limits admit the event (-1 when one never will); 0 when allowed.
	RetryAfter time.Duration
	// Duplicate reports that every entity had seen the event's ID: nothing
	// was counted.
	Duplicate bool
	// Values has every feature that applied to the event, in the set's order.
	Values []Value
}

// Get returns the value of the named feature, and false when the event left
// it out.
func (r Result) Get(name string) (Value, bool) {
	for _, v := range r.Values {
		if v.Feature == name {
			return v, true
		}
	}
	return Value{}, false
}

// Set is a declared set of features. Most callers need Record, once per
// event; Read scores without counting, and At moves the clock (for replays
// and tests). A Set is safe for concurrent use; its zero value is not usable:
// create one with New.
type Set struct {
	feats  []feature
	client rueidis.Client
	at     *time.Time
}

type feature struct {
	Feature
	st    *store.Store   // its counter's store: the Sub view of its name
	tiers []*store.Store // per window: the Over view a Limit limits; a statistic's own store
}

// New declares a feature set on the client's server (one backend detection
// per distinct set of windows). The options are those of every feature's
// store, such as store.WithPrefix (the default here is "fx:"),
// store.WithBackend or store.WithClientClock. Its errors wrap store.ErrInvalid
// for a set that is not valid.
func New(ctx context.Context, client rueidis.Client, fs []Feature, opts ...store.Option) (*Set, error) {
	if len(fs) == 0 {
		return nil, invalidf("no feature")
	}
	opts = append([]store.Option{store.WithPrefix("fx:")}, opts...)
	s := &Set{client: client}
	stores := map[string]*store.Store{}
	names := map[string]bool{}
	for _, f := range fs {
		if err := check(f); err != nil {
			return nil, err
		}
		if names[f.Name] {
			return nil, invalidf("feature %q is declared twice", f.Name)
		}
		names[f.Name] = true
	}
	if client == nil {
		return nil, invalidf("nil client")
	}
	for _, f := range fs {
		var tags []string
		for _, w := range f.Windows {
			tags = append(tags, w.String())
		}
		id := strings.Join(tags, "+")
		st := stores[id]
		if st == nil {
			var err error
			st, err = store.New(ctx, client, f.Windows[0], append(opts, store.WithTiers(f.Windows[1:]...))...)
			if err != nil {
				return nil, err
			}
			stores[id] = st
		}
		ft := feature{Feature: f, st: st.Sub(f.Name)}
		for _, w := range f.Windows {
			if _, ok := stats[f.Kind]; !ok {
				ft.tiers = append(ft.tiers, ft.st.Over(w.Length))
				continue
			}
			// A statistic keeps each window apart: one store per window.
			ws := stores[w.String()]
			if ws == nil {
				var err error
				if ws, err = store.New(ctx, client, w, opts...); err != nil {
					return nil, err
				}
				stores[w.String()] = ws
			}
			ft.tiers = append(ft.tiers, ws.Sub(f.Name))
		}
		s.feats = append(s.feats, ft)
	}
	return s, nil
}

func invalidf(format string, a ...any) error {
	return &store.Error{Package: "features", Op: "new", Kind: store.ErrInvalid, Detail: fmt.Sprintf(format, a...)}
}

// callError words a store error in the caller's terms: the event and the
// entity whose batch failed.
func callError(e Event, read bool, entity string, err error) error {
	subject := "record"
	switch {
	case read:
		subject = "read"
	case e.ID != "":
		subject = "record event " + strconv.Quote(e.ID)
	}
	if entity != "" {
		subject += ": entity " + entity
	}
	var se *store.Error
	if errors.As(err, &se) {
		return &store.Error{Package: "features", Op: subject, Kind: se.Kind, Detail: se.Detail, Err: err}
	}
	return &store.Error{Package: "features", Op: subject, Detail: err.Error(), Err: err}
}

func check(f Feature) error {
	if f.Name == "" || strings.IndexFunc(f.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) >= 0 {
		return invalidf("feature name %q: want letters, digits, '_', '-' or '.'", f.Name)
	}
	switch {
	case f.Entity == "":
		return invalidf("feature %s: no entity", f.Name)
	case len(f.Windows) == 0:
		return invalidf("feature %s: no window", f.Name)
	case f.Kind == Distinct && f.Of == "":
		return invalidf("feature %s: a Distinct feature counts the values of another entity (Of)", f.Name)
	case f.Kind == Limit && len(f.Limits) != len(f.Windows):
		return invalidf("feature %s: %d limits for %d windows", f.Name, len(f.Limits), len(f.Windows))
	case f.Kind < Count || f.Kind > Recent:
		return invalidf("feature %s: unknown kind %d", f.Name, f.Kind)
	}
	return nil
}

// Features returns the set's features.
func (s *Set) Features() []Feature {
	out := make([]Feature, len(s.feats))
	for i, f := range s.feats {
		out[i] = f.Feature
	}
	return out
}

// Record counts the event in every feature whose entities it has, decides
// its limits, and returns every value, in one round trip per node.
func (s *Set) Record(ctx context.Context, e Event) (Result, error) {
	return s.run(ctx, e, false)
}

// Read returns the values Record would return for an event with these
// entities, without counting anything: for scoring. Limits report their sums
// and what they have left.
func (s *Set) Read(ctx context.Context, entities map[string]string) (Result, error) {
	return s.run(ctx, Event{Entities: entities}, true)
}

// At returns a view of the set whose Record and Read happen at instant t on
// the client's clock (see store.Store.At).
func (s *Set) At(t time.Time) *Set {
	v := *s
	v.at = &t
	return &v
}

// part is one feature's ops within an entity's batch.
type part struct {
	feat    int
	entity  string
	first   int // index of its first op in the batch
	nops    int
	batchAt int
}

func (s *Set) run(ctx context.Context, e Event, read bool) (Result, error) {
	// One batch per entity: its features' ops, in the set's order.
	var entities []string
	for _, f := range s.feats {
		if e.Entities[f.Entity] != "" && !slices.Contains(entities, f.Entity) {
			entities = append(entities, f.Entity)
		}
	}
	sort.Strings(entities)
	batches := make([]store.Batch, 0, len(entities))
	var parts []part
	view := func(st *store.Store) *store.Store {
		if s.at != nil {
			return st.At(*s.at)
		}
		return st
	}
	var batchEntity []string
	for _, ent := range entities {
		bi := len(batches)
		key := ent + ":" + e.Entities[ent]
		b := store.Batch{ID: e.ID, Time: e.Time}
		if read {
			b.ID, b.Time = "", time.Time{}
		}
		for fi, f := range s.feats {
			if f.Entity != ent {
				continue
			}
			p := part{feat: fi, entity: key, first: len(b.Ops), batchAt: bi}
			switch f.Kind {
			case Count, Sum:
				op := store.Op{Store: view(f.st), Key: key, Kind: store.OpCount, Delta: 1}
				if f.Kind == Sum {
					op.Delta = e.Amount
				}
				if read {
					op.Kind, op.Delta = store.OpRead, 0
				}
				b.Ops = append(b.Ops, op)
			case Distinct:
				of := e.Entities[f.Of]
				if of == "" && !read {
					continue
				}
				op := store.Op{Store: view(f.st), Key: key, Kind: store.OpDistinct}
				if !read {
					op.Members = []string{of}
				}
				b.Ops = append(b.Ops, op)
			case Limit:
				cost := int64(1)
				if f.SpendAmount {
					cost = e.Amount
				}
				for ti, lim := range f.Limits {
					if lim < 0 {
						continue
					}
					if read {
						cost = 0
					}
					b.Ops = append(b.Ops, store.Op{Store: view(f.tiers[ti]), Key: key, Kind: store.OpLimit, Limit: lim, Delta: cost})
				}
			default: // a statistic, per window
				for _, st := range f.tiers {
					op := store.Op{Store: view(st), Key: key, Kind: store.OpStat, Stat: stats[f.Kind], Delta: e.Amount}
					if read {
						op.Kind, op.Delta = store.OpRead, 0
					}
					b.Ops = append(b.Ops, op)
				}
			}
			p.nops = len(b.Ops) - p.first
			if p.nops > 0 {
				parts = append(parts, p)
			}
		}
		if len(b.Ops) > 0 {
			batches = append(batches, b)
			batchEntity = append(batchEntity, key)
		}
	}
	if len(batches) == 0 {
		return Result{}, invalidf("the event has none of the entities the set's features need")
	}
	apply := store.ApplyAll // the limits of every entity decide as one
	if read {
		apply = store.Apply
	}
	res, err := apply(ctx, batches...)
	if err != nil {
		var m *store.ManyError
		if errors.As(err, &m) && len(m.Errs) == len(batches) {
			for i, be := range m.Errs {
				if be != nil {
					return Result{}, callError(e, read, batchEntity[i], be)
				}
			}
		}
		return Result{}, callError(e, read, "", err)
	}
	out := Result{Allowed: true, Duplicate: e.ID != ""}
	for _, br := range res {
		if !br.Allowed {
			out.Allowed = false
			if br.RetryAfter < 0 || out.RetryAfter >= 0 && br.RetryAfter > out.RetryAfter {
				out.RetryAfter = br.RetryAfter
			}
		}
		out.Duplicate = out.Duplicate && br.Duplicate
	}
	// The parts were made entity by entity; the values go in the set's order.
	sort.SliceStable(parts, func(i, j int) bool { return parts[i].feat < parts[j].feat })
	for _, p := range parts {
		f := s.feats[p.feat]
		br := res[p.batchAt]
		ops := br.Values[p.first : p.first+p.nops]
		v := Value{Feature: f.Name, Entity: p.entity, Kind: f.Kind}
		switch f.Kind {
		case Limit:
			d := &store.Decision{Allowed: true, Duplicate: br.Duplicate, Policy: f.Name}
			v.Decision, v.Counted = d, br.Allowed && !br.Duplicate && !read
			v.Sums = make([]int64, len(f.Windows))
			j := 0
			for ti, lim := range f.Limits {
				if lim < 0 {
					continue
				}
				o := ops[j]
				j++
				v.Sums[ti] = o.Sum
				if o.Refused {
					d.Allowed = false
					if o.RetryAfter < 0 || d.RetryAfter >= 0 && o.RetryAfter > d.RetryAfter {
						d.RetryAfter = o.RetryAfter
					}
				}
				if j == 1 || o.Remaining < d.Remaining {
					d.Remaining, d.Sum, d.Limit, d.ResetAfter = o.Remaining, o.Sum, o.Limit, o.ResetAfter
					v.Sum = o.Sum
				}
			}
			if !d.Allowed && !read {
				out.RefusedBy = append(out.RefusedBy, f.Name)
			}
		case Count, Sum, Distinct:
			o := ops[0]
			v.Sum, v.Sums, v.Counted = o.Sum, o.Sums, o.Counted
		default:
			v.Counted = ops[0].Counted
			for _, o := range ops {
				v.Sums, v.Stats = append(v.Sums, o.Stat.Value), append(v.Stats, o.Stat)
			}
			v.Sum = v.Sums[0]
		}
		out.Values = append(out.Values, v)
	}
	if read {
		out.Allowed, out.RefusedBy, out.RetryAfter, out.Duplicate = true, nil, 0, false
	}
	return out, nil
}
