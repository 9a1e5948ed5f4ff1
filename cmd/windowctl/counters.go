package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/windowstore/windowstore/store"
)

// The commands that read and write counters: each runs on a store built from
// the global flags.

type cli struct {
	st      *store.Store
	p       *printer
	prefix  string
	backend string
}

func (c *cli) detect(ctx context.Context) error {
	d := c.st.Detection()
	o := detectOut{d.Backend, d.FieldTTL, d.Server, d.Version, d.Modules, d.Reason}
	if o.Modules == nil {
		o.Modules = []string{}
	}
	mods := "none"
	if len(o.Modules) > 0 {
		mods = strings.Join(o.Modules, ", ")
	}
	return c.p.emit(o, fmt.Sprintf("backend:   %s\nfield TTL: %v\nserver:    %s %s\nmodules:   %s\nwhy:       %s",
		o.Backend, o.FieldTTL, o.Server, o.Version, mods, o.Reason))
}

func (c *cli) add(ctx context.Context, key string, delta int64) error {
	n, err := c.st.Add(ctx, key, delta)
	if err != nil {
		return err
	}
	return c.p.emit(sumOut{Key: key, Sum: &n}, fmt.Sprintf("%s\t%d", key, n))
}

// addEvent is add with an event id or an event time.
func (c *cli) addEvent(ctx context.Context, e store.Event) error {
	a, err := c.st.AddEvent(ctx, e)
	if err != nil {
		return err
	}
	text := fmt.Sprintf("%s\t%d", e.Key, a.Sum)
	if a.Duplicate {
		text += "\tduplicate: not counted again"
	}
	return c.p.emit(sumOut{Key: e.Key, Sum: &a.Sum, Duplicate: &a.Duplicate}, text)
}

// keysFailed is a many-key read's error when some keys failed (what: "sum",
// "distinct count"): their lines are printed, so the message only counts them.
type keysFailed struct {
	failed, total int
	first, what   string
}

func (e keysFailed) Error() string {
	return fmt.Sprintf("%s: %d of %d keys failed (first: %s)", e.what, e.failed, e.total, e.first)
}

// sum prints one line per key, in order: its sum, or why it failed. A failed
// key does not stop the others; the command then fails (exit 1).
func (c *cli) sum(ctx context.Context, keys []string) error {
	sums, err := c.st.SumMany(ctx, keys)
	return c.perKey(keys, sums, err, "sum", func(k string, v *int64, e string) any { return sumOut{Key: k, Sum: v, Error: e} })
}

// perKey prints one line per key of a many-key read: its value, or, where the
// read's ManyError has one, its error; it fails with keysFailed (exit 1) when
// any key failed. An error that is not a ManyError is returned as it is.
func (c *cli) perKey(keys []string, vals []int64, err error, what string, out func(key string, v *int64, err string) any) error {
	var many *store.ManyError
	if err != nil && !errors.As(err, &many) {
		return err
	}
	failed := keysFailed{total: len(keys), what: what}
	for i, k := range keys {
		o, text := out(k, &vals[i], ""), fmt.Sprintf("%s\t%d", k, vals[i])
		if many != nil && many.Errs[i] != nil {
			e := keyError(k, many.Errs[i])
			o, text = out(k, nil, e), fmt.Sprintf("%s\terror: %s", k, e)
			if failed.failed++; failed.failed == 1 {
				failed.first = fmt.Sprintf("%q: %s", k, e)
			}
		}
		if err := c.p.emit(o, text); err != nil {
			return err
		}
	}
	if failed.failed > 0 {
		return failed
	}
	return nil
}

// keyError says why one key of SumMany failed, without the store's prefix
// that repeats the key.
func keyError(key string, err error) string {
	if errors.Is(err, store.ErrWrongType) {
		return strings.TrimPrefix(store.ErrWrongType.Error(), "store: ")
	}
	msg := strings.TrimPrefix(err.Error(), "store: ")
	for _, op := range []string{"sum", "count distinct"} {
		msg = strings.TrimPrefix(msg, fmt.Sprintf("%s %q: ", op, key))
	}
	return msg
}

// errRefused is allow's answer when it refuses: exit status 3, with the
// decision already printed.
var errRefused = errors.New("refused")

func (c *cli) allow(ctx context.Context, key string, limit, cost int64) error {
	r, err := c.st.Allow(ctx, key, limit, cost)
	if err != nil {
		return err
	}
	return c.decision(key, r, nil)
}

// allowAll is allow with several --limit N/WINDOW: every policy admits COST,
// or none counts it.
func (c *cli) allowAll(ctx context.Context, key string, cost int64, limits []limitFlag, bucket time.Duration) error {
	var ps []store.Policy
	for _, l := range limits {
		st, err := store.New(ctx, c.st.Client(), store.Window{Length: l.window, Bucket: bucket},
			store.WithPrefix(c.prefix), store.WithBackend(store.Backend(c.backend)))
		if err != nil {
			return err
		}
		ps = append(ps, store.Policy{Store: st, Key: key, Limit: l.limit})
	}
	r, err := store.AllowAll(ctx, cost, ps...)
	if err != nil {
		return err
	}
	var out []policyOut
	if len(r.Policies) == 0 { // one policy
		r.Policies = []store.PolicyResult{{Window: ps[0].Store.Window(), Limit: r.Limit, Sum: r.Sum, Remaining: r.Remaining,
			RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}}
	}
	for _, p := range r.Policies {
		out = append(out, policyOut{Limit: p.Limit, WindowMs: p.Window.Length.Milliseconds(), Sum: p.Sum, Remaining: p.Remaining,
			RetryAfterMs: msOf(p.RetryAfter)})
	}
	return c.decision(key, r, out)
}

func msOf(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// decision prints an allow's answer; a refusal is errRefused (exit 3).
func (c *cli) decision(key string, r store.Result, policies []policyOut) error {
	retry := msOf(r.RetryAfter)
	verdict := "allowed"
	if !r.Allowed {
		verdict = "refused, retry after " + r.RetryAfter.String()
		if r.RetryAfter < 0 {
			verdict = "refused: the cost is over the limit, it never fits"
		}
	}
	text := fmt.Sprintf("%s\t%s\tsum %d\tremaining %d", key, verdict, r.Sum, r.Remaining)
	for _, p := range policies {
		text += fmt.Sprintf("\n  limit %d per %v: sum %d, remaining %d, retry after %v", p.Limit,
			time.Duration(p.WindowMs)*time.Millisecond, p.Sum, p.Remaining, time.Duration(p.RetryAfterMs)*time.Millisecond)
	}
	if err := c.p.emit(allowOut{key, r.Allowed, r.Sum, r.Remaining, retry, policies}, text); err != nil {
		return err
	}
	if !r.Allowed {
		return errRefused
	}
	return nil
}

func (c *cli) inspect(ctx context.Context, key string) error {
	s, err := c.st.Inspect(ctx, key)
	if err != nil {
		return err
	}
	o := inspectOut{Key: s.Key, RedisKey: s.RedisKey, Backend: s.Backend, Buckets: []bucketOut{}, Meta: s.Meta}
	var b strings.Builder
	fmt.Fprintf(&b, "key %s (redis key %s, backend %s, key TTL %s)\n", s.Key, s.RedisKey, s.Backend, ttlText(s.KeyTTL))
	for _, k := range slices.Sorted(maps.Keys(s.Meta)) {
		fmt.Fprintf(&b, "backend field %s = %s\n", k, s.Meta[k])
	}
	fmt.Fprintf(&b, "%-12s  %-24s  %12s  %10s  %s", "field", "start", "value", "ttl", "live")
	for _, bk := range s.Buckets {
		start := ""
		if !bk.Start.IsZero() {
			start = bk.Start.UTC().Format(time.RFC3339Nano)
		}
		t := bk.TTL.Milliseconds()
		if bk.TTL < 0 {
			t = int64(bk.TTL)
		}
		o.Buckets = append(o.Buckets, bucketOut{bk.Field, start, bk.Value, t})
		fmt.Fprintf(&b, "\n%-12s  %-24s  %12d  %10s  %v", bk.Field, start, bk.Value, ttlText(bk.TTL), bk.Live)
	}
	if len(s.Buckets) == 0 {
		b.WriteString("\n(no buckets: the counter is empty)")
	}
	return c.p.emit(o, b.String())
}

func ttlText(d time.Duration) string {
	switch {
	case d == -1:
		return "none"
	case d == -2:
		return "no key"
	}
	return d.String()
}

func (c *cli) distinctAdd(ctx context.Context, key string, members []string) error {
	n, err := c.st.AddDistinct(ctx, key, members...)
	if err != nil {
		return err
	}
	return c.p.emit(distinctOut{Key: key, Distinct: &n}, fmt.Sprintf("%s\t%d", key, n))
}

// distinctCount prints one line per key, as sum does.
func (c *cli) distinctCount(ctx context.Context, keys []string) error {
	counts, err := c.st.CountDistinctMany(ctx, keys)
	return c.perKey(keys, counts, err, "distinct count", func(k string, v *int64, e string) any {
		return distinctOut{Key: k, Distinct: v, Error: e}
	})
}
