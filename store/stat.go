package store

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/engine"
)

// Window statistics beyond the sum: the greatest and least amounts, the
// average, and the times of the first and last events. Each is kept apart
// from the key's counter, in the key's slot, with its own buckets:
//
//	prefix + "{" + key + "}:max:" + shape     a hash: bucket code -> the bucket's max,
//	                                           and x -> the window's max and its bucket
//	                                           (past 64 buckets)
//	                    ":min:", ":first:", ":last:"   the same for the others
//	                    ":recent:"                      x -> the window's 16 newest events
//	                    ":avg.sum:", ":avg.n:"         Avg: two counters, written together
//
// A bucket keeps its own extreme, so the window's is exact at bucket
// granularity, like a sum: the extreme of the live buckets. A window of more
// than 64 buckets caches it, so a write reads and writes two fields, and the
// next call after the cached extreme's bucket leaves the window reads the
// hash whole; a smaller one is read whole at every call (see
// internal/backend/lua/extreme.lua).

// Stat is a window statistic kept beside sums: see RecordStat.
type Stat int

const (
	// StatMax is the greatest amount of the window's events.
	StatMax Stat = iota + 1
	// StatMin is the least amount of the window's events.
	StatMin
	// StatFirst is the time of the window's oldest event ("first seen"), as Unix
	// ms: the least event time.
	StatFirst
	// StatLast is the time of the window's newest event ("last seen"), as Unix
	// ms: the greatest event time.
	StatLast
	// StatAvg is the average amount of the window's events: their sum and
	// their number, kept together.
	StatAvg
	// StatRecent is the window's most recent amounts with their times (the last
	// K, K at most 16), newest first: StatValue.Recent.
	StatRecent
	// StatDistinct is the number of distinct members (cards, accounts,
	// devices) of the window's events, StatEvent.Members: StatValue.Value.
	// It is kept apart from the others, as a HyperLogLog per bucket, so the
	// count is estimated, with a standard error of 0.81%, at most 12 KB per
	// bucket whatever the number of members. Unlike the others it follows
	// the store's tiers (RecordStat counts in every tier) and Over views
	// (ReadStat reads the view's span), and it is read on the primary, by a
	// script that writes (PFCOUNT caches its count). A window has at most
	// 7,900 buckets (7,897 with no future tolerance, 3,948 whatever the
	// tolerance); on a longer one every call fails with ErrInvalid.
	StatDistinct
)

// allStats lists every Stat, in order.
var allStats = []Stat{StatMax, StatMin, StatFirst, StatLast, StatAvg, StatRecent, StatDistinct}

func (st Stat) String() string {
	switch st {
	case StatMax:
		return "max"
	case StatMin:
		return "min"
	case StatFirst:
		return "first"
	case StatLast:
		return "last"
	case StatAvg:
		return "avg"
	case StatRecent:
		return "recent"
	case StatDistinct:
		return "distinct"
	}
	return fmt.Sprintf("Stat(%d)", int(st))
}

// UnmarshalText sets st to the Stat that String names: "max", "min",
// "first", "last", "avg", "recent" or "distinct" (so a Stat is a flag.TextVar
// or a JSON string).
func (st *Stat) UnmarshalText(name []byte) error {
	for _, v := range allStats {
		if v.String() == string(name) {
			*st = v
			return nil
		}
	}
	return fmt.Errorf("%w: %q is not a statistic (max, min, first, last, avg, recent, distinct)", ErrInvalid, name)
}

// MarshalText returns st's name, as String.
func (st Stat) MarshalText() ([]byte, error) { return []byte(st.String()), nil }

// dir is the direction of an extreme in the scripts, and the name in its key.
func (st Stat) dir() (dir, name string, ok bool) {
	switch st {
	case StatMax:
		return backend.XMax, "max", true
	case StatMin:
		return backend.XMin, "min", true
	case StatFirst:
		return backend.XMin, "first", true
	case StatLast:
		return backend.XMax, "last", true
	case StatRecent:
		return backend.XRecent, "recent", true
	}
	return "", "", false
}

// A StatEvent is one event for a window statistic, for RecordStat.
type StatEvent struct {
	// Key is the statistic's key.
	Key string
	// Stat is the statistic the event updates.
	Stat Stat
	// Value is the event's amount (any int64) for StatMax, StatMin, StatAvg
	// and StatRecent. StatFirst and StatLast take the event's time instead,
	// and StatDistinct its Members; they ignore it.
	Value int64
	// Members are StatDistinct's: the members the event adds to the distinct
	// count, at least one.
	Members []string
	// Time, when not zero, is when the event happened: a late event counts in
	// the bucket of its own time, as with Event.Time (too old: ErrTooOld;
	// too far ahead: ErrFuture; nothing written). For First and Last it is the
	// time kept; zero means now, on the store's clock.
	Time time.Time
	// ID, when not empty, makes the event count once (see Event.ID): StatAvg
	// and StatRecent need it for a replayed event. The extremes and
	// StatDistinct need none (an event applied twice leaves the same value,
	// as long as StatFirst and StatLast are given its Time), but take it too.
	ID string
}

// StatValue is a window statistic's value.
//
// For example, with a window of 10m and the events 7, -3 and 12 in it,
// StatMax answers {OK: true, Value: 12}; StatAvg answers {OK: true, Value: 5,
// Sum: 16, Count: 3} (Value truncated from 5.33...). A window with no event
// answers OK false and zeros.
type StatValue struct {
	// OK reports whether the window has an event: without one there is no
	// max, min, first, last or average.
	OK bool
	// Value is the greatest or least amount (StatMax, StatMin), the Unix ms
	// of the first or last event (StatFirst, StatLast), Sum / Count truncated
	// toward zero (StatAvg), the newest amount (StatRecent) or the number of
	// distinct members (StatDistinct).
	Value int64
	// Sum and Count are StatAvg's: the window's sum of amounts and number
	// of events (0 for the others).
	Sum, Count int64
	// Recent is StatRecent's: the window's most recent events (at most
	// 16), newest first; Value is the newest's amount. Of two events of the
	// same millisecond, the later recorded is the more recent.
	Recent []Sample
}

// A Sample is one event of StatRecent: its time (Unix ms) and amount.
type Sample struct {
	At    int64
	Value int64
}

// Mean returns StatAvg's Sum / Count as a decimal string, computed exactly and
// rounded to digits places after the point, trailing zeros trimmed ("5.333",
// "-2", "7.5"); "" when the window has no event. It is for display; Value is
// the quotient truncated toward zero.
func (v StatValue) Mean(digits int) string {
	if !v.OK || v.Count == 0 {
		return ""
	}
	s := new(big.Rat).SetFrac(big.NewInt(v.Sum), big.NewInt(v.Count)).FloatString(digits)
	for digits > 0 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	s = trimDot(s)
	if s == "-0" {
		return "0"
	}
	return s
}

func trimDot(s string) string {
	if s != "" && s[len(s)-1] == '.' {
		return s[:len(s)-1]
	}
	return s
}

// statView returns the store's view for a statistic's counters: its Sub, after
// any of the caller's.
func (s *Store) statView(name string) *Store {
	v := *s
	v.sub = s.sub + ":" + name
	return &v
}

// RecordStat records one event in a window statistic of its key (see Stat) and
// returns the statistic's value over the window after it, in one script call.
// It takes the Store's Window (tiers and Over views do not apply to
// statistics, save StatDistinct). Its errors are those of Record: ErrInvalid,
// ErrTooOld, ErrFuture, ErrOverflow (a StatAvg whose window sum would leave
// int64), ErrWrongType (the key holds something else).
//
// For example, the cards device d7 used in the last day, with a store of a
// 24h window:
//
//	v, err := s.RecordStat(ctx, store.StatEvent{Key: "device:d7", Stat: store.StatDistinct, Members: []string{card}})
//	// v.Value: about how many distinct cards, this one included
func (s *Store) RecordStat(ctx context.Context, o StatEvent) (_ StatValue, err error) {
	ctx, end := s.start(ctx, "record stat")
	defer func() { end(err) }()
	if o.Stat == StatDistinct {
		return s.addDistinct(ctx, o)
	}
	return s.observeBatch(ctx, o)
}

// observeBatch is RecordStat of a statistic other than StatDistinct: an
// extreme of one window, now and without an id, as an operation of its own;
// else as a batch of one op.
func (s *Store) observeBatch(ctx context.Context, o StatEvent) (StatValue, error) {
	if o.Stat < StatMax || o.Stat > StatRecent {
		return StatValue{}, invalid("record stat", o.Key, "no such statistic: "+o.Stat.String())
	}
	if _, _, ok := o.Stat.dir(); ok && len(s.tiers) == 1 && o.ID == "" && o.Time.IsZero() {
		// One window, now, no id: an operation of its own, the group's
		// extreme item (shape, dir, value) without the group's machinery.
		items, keys, _, err := observeItems(Op{Store: s, Key: o.Key, Kind: OpStat, Stat: o.Stat, Delta: o.Value})
		if err != nil {
			return StatValue{}, rename(err, "record stat")
		}
		vals, err := s.run(ctx, keys[0], s.header(), resendable(o), append([]string{backend.OpXAdd}, items[0][1:]...)...)
		if err != nil {
			return StatValue{}, fail("record stat", o.Key, s.be.Write, err)
		}
		v, err := extremeFrom(o.Stat, vals)
		return v, fail("record stat", o.Key, nil, err)
	}
	res, err := apply(ctx, []Batch{{ID: o.ID, Time: o.Time, resend: resendable(o),
		Ops: []Op{{Store: s, Key: o.Key, Kind: OpStat, Stat: o.Stat, Delta: o.Value}}}})
	if err != nil {
		return StatValue{}, rename(first(err), "record stat")
	}
	return res[0].Values[0].Stat, nil
}

func avgOf(sum, count int64) StatValue {
	if count <= 0 {
		return StatValue{}
	}
	return StatValue{OK: true, Value: sum / count, Sum: sum, Count: count}
}

// ReadStat returns a window statistic of key (see RecordStat). Like Sum, it
// is a read-only script: a replica can serve it, and rueidis retries it on
// connection errors until ctx ends; save StatDistinct, read on the primary
// over the span of the store's Over view.
func (s *Store) ReadStat(ctx context.Context, key string, st Stat) (StatValue, error) {
	vs, err := s.ReadStatMany(ctx, []string{key}, st)
	if err != nil {
		return StatValue{}, first(err)
	}
	return vs[0], nil
}

// ReadStatMany returns a window statistic of many keys, in order, in one
// round trip (as SumMany, whose *ManyError it shares).
func (s *Store) ReadStatMany(ctx context.Context, keys []string, st Stat) (_ []StatValue, err error) {
	ctx, end := s.start(ctx, "read stat")
	defer func() { end(err) }()
	out := make([]StatValue, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	if st == StatDistinct {
		return s.readDistinct(ctx, keys)
	}
	dir, name, ok := st.dir()
	if !ok && st != StatAvg {
		return nil, invalid("read stat", keys[0], "no such statistic: "+st.String())
	}
	// The Redis keys to read, per key: one, or Avg's two (sum, then count).
	per := 1
	views := []*Store{s.statView(name)}
	arg := dir
	if st == StatAvg {
		per, views, arg = 2, []*Store{s.statView("avg.sum"), s.statView("avg.n")}, strconv.FormatInt(s.winMs, 10)
	}
	errs := make([]error, len(keys))
	failed := false
	rks := make([][]string, 0, per*len(keys))
	idx := make([]int, 0, len(keys))
	for i, k := range keys {
		var mine [][]string
		for _, v := range views {
			rk, err := v.redisKey(k, s.tag)
			if err != nil {
				errs[i], failed = rename(err, "read stat"), true
				break
			}
			if st == StatAvg {
				mine = append(mine, s.counterKeys(rk, s.tag)) // a counter: its keys
			} else {
				mine = append(mine, []string{rk})
			}
		}
		if errs[i] == nil {
			rks = append(rks, mine...)
			idx = append(idx, i)
		}
	}
	if len(rks) > 0 {
		res := s.readMany(ctx, rks, s.header(), s.shape, arg)
		for j, i := range idx {
			var v StatValue
			var err error
			if st == StatAvg {
				var sum, n int64
				if err = res[2*j].Err; err == nil {
					sum, err = sumOf(res[2*j].Res)
				}
				if err == nil {
					if err = res[2*j+1].Err; err == nil {
						n, err = sumOf(res[2*j+1].Res)
					}
				}
				v = avgOf(sum, n)
			} else if err = res[j].Err; err == nil {
				v, err = extremeOf(st, res[j].Res)
			}
			if err != nil {
				errs[i], failed = fail("read stat", keys[i], s.be.Sum, err), true
				continue
			}
			out[i] = v
		}
	}
	if failed {
		return out, &ManyError{Errs: errs}
	}
	return out, nil
}

// extremeOf reads a window extreme's reply: {value}, or {} for none; for
// Recent, {ms, value, ...}.
func extremeOf(st Stat, msg rueidis.RedisMessage) (StatValue, error) {
	arr, err := msg.ToArray()
	if err != nil {
		return StatValue{}, fmt.Errorf("unexpected reply %s", msg.String())
	}
	return extremeFrom(st, arr)
}

func extremeFrom(st Stat, arr []rueidis.RedisMessage) (StatValue, error) {
	if len(arr) == 0 {
		return StatValue{}, nil
	}
	if st != StatRecent {
		if len(arr) != 1 {
			return StatValue{}, errors.New("unexpected statistic reply")
		}
		n, err := sumOf(arr[0])
		if err != nil {
			return StatValue{}, err
		}
		return StatValue{OK: true, Value: n}, nil
	}
	if len(arr)%2 != 0 || len(arr) > 2*backend.MaxRecent {
		return StatValue{}, errors.New("unexpected recent values reply")
	}
	v := StatValue{OK: true, Recent: make([]Sample, len(arr)/2)}
	for i := range v.Recent {
		at, err1 := sumOf(arr[2*i])
		n, err2 := sumOf(arr[2*i+1])
		if err := errors.Join(err1, err2); err != nil {
			return StatValue{}, err
		}
		v.Recent[i] = Sample{At: at, Value: n}
	}
	v.Value = v.Recent[0].Value
	return v, nil
}

// resendable reports whether an observation without an id may be sent again
// after a connection error (the first may have been written): when writing it
// twice changes nothing. Max and Min are so; First and Last when they carry
// their event's time (a resent "now" is later); Recent never, since a second
// write adds a second entry (give it an ID: that runs as a batch, counted
// once).
func resendable(o StatEvent) bool {
	switch o.Stat {
	case StatMax, StatMin:
		return true
	case StatFirst, StatLast:
		return !o.Time.IsZero()
	}
	return false
}

// isStat reports whether op o is a statistic's: an OpStat, or a Read of a
// Stat.
func isStat(o Op) bool { return o.Kind == OpStat || (o.Kind == OpRead && o.Stat != 0) }

// observeItems are an OpStat op's group items, their keys and the Redis key
// that names each (redisKey), or a Read's of a statistic: one extreme, or
// Avg's sum and count (counters: their keys are counterKeys).
func observeItems(o Op) ([][]string, [][]string, []string, error) {
	s := o.Store
	t := s.tiers[0]
	read := o.Kind == OpRead
	if o.Stat == StatAvg {
		sk, err := s.statView("avg.sum").redisKey(o.Key, t.tag)
		if err != nil {
			return nil, nil, nil, err
		}
		nk, _ := s.statView("avg.n").redisKey(o.Key, t.tag)
		ks, names := [][]string{s.counterKeys(sk, t.tag), s.counterKeys(nk, t.tag)}, []string{sk, nk}
		if read {
			return [][]string{{backend.ItemRead, t.shape}, {backend.ItemRead, t.shape}}, ks, names, nil
		}
		return [][]string{{backend.ItemCount, t.shape, strconv.FormatInt(o.Delta, 10)}, {backend.ItemCount, t.shape, "1"}},
			ks, names, nil
	}
	dir, name, ok := o.Stat.dir()
	if o.Stat == StatDistinct {
		return nil, nil, nil, errors.New("StatDistinct is not an OpStat or OpRead statistic: in a batch, a distinct count is an OpDistinct op")
	}
	if !ok {
		return nil, nil, nil, fmt.Errorf("no such statistic: %v", o.Stat)
	}
	rk, err := s.statView(name).redisKey(o.Key, t.tag)
	if err != nil {
		return nil, nil, nil, err
	}
	if read {
		return [][]string{{backend.ItemXRead, t.shape, dir}}, [][]string{{rk}}, []string{rk}, nil
	}
	val := strconv.FormatInt(o.Delta, 10)
	if o.Stat == StatFirst || o.Stat == StatLast {
		val = ""
	}
	return [][]string{{backend.ItemExtreme, t.shape, dir, val}}, [][]string{{rk}}, []string{rk}, nil
}

// statAnswer reads an OpStat's item answer into v.Stat: an extreme's
// {counted, value} ({counted}: none), or Avg's sum and count (a sum, or
// {sum} when not counted: a late event).
func (v *Value) statAnswer(a engine.Answer, it planItem, st Stat) error {
	if it.kind == backend.ItemExtreme || it.kind == backend.ItemXRead {
		f := a.Vals
		if len(f) < 1 {
			return errors.New("unexpected statistic answer")
		}
		if c, err := f[0].AsInt64(); err != nil || c == 0 {
			v.Counted = false
		}
		var err error
		v.Stat, err = extremeFrom(st, f[1:])
		return err
	}
	if len(a.Vals) != 1 {
		return errors.New("unexpected statistic answer")
	}
	if a.Late {
		v.Counted = false
	}
	n, err := sumOf(a.Vals[0])
	if err != nil {
		return err
	}
	if it.count {
		v.Stat = avgOf(v.Stat.Sum, n)
	} else {
		v.Stat.Sum = n
	}
	return nil
}
