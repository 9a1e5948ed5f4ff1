package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/windowstore/windowstore/store"
)

var allowCmd = &command{
	name:    "allow",
	args:    "--limit N KEY [COST] | --policy KEY=N/WINDOW... [COST]",
	summary: "count COST (default 1) only if the sum stays <= N",
	details: "Counts COST (a non-negative integer, default 1) against KEY only if the\n" +
		"window sum stays <= N, atomically, and prints the decision. A refusal\n" +
		"exits with status 3 (the decision is still printed on stdout); retry_after_ms\n" +
		"says when enough of the window will have slid out, -1 when COST > N.\n" +
		"--limit N/WINDOW (such as 3/10s) sets a policy of its own window (in buckets\n" +
		"of --bucket, which must divide it); repeat it for several policies, one per\n" +
		"window, decided together, atomically: COST counts in every one or in none.\n" +
		"The top-level figures are the deciding policy's (the refusing one, or else\n" +
		"the one with the least remaining); \"policies\" lists each one's.\n" +
		"--policy KEY=N/WINDOW (repeatable, instead of --limit and KEY) limits\n" +
		"several keys at once, in any cluster slots, all or nothing: COST counts on\n" +
		"every key or on none, and a refusal leaves no count anywhere (/WINDOW may\n" +
		"be left out for --window).\n" +
		"N and COST are at most 2^53.\n" +
		"Text: KEY<TAB>allowed|refused, retry after D<TAB>sum N<TAB>remaining N.",
	json: `{"key":K,"allowed":bool,"sum":N,"remaining":N,"retry_after_ms":N}; with N/WINDOW limits also ` +
		`"policies":[{"limit":N,"window_ms":N,"sum":N,"remaining":N,"retry_after_ms":N},...]; with --policy ` +
		`{"allowed":bool,"retry_after_ms":N,"policies":[{"key":K,"limit":N,"window_ms":N,"sum":N,"remaining":N,"retry_after_ms":N},...]}`,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		var limits, policies limitsFlag
		fs.Var(&limits, "limit", "the limit `N` (required, >= 0), or N/WINDOW; repeatable")
		policies.keyed = true
		fs.Var(&policies, "policy", "a limit on a key, `KEY=N/WINDOW`; repeatable, instead of --limit and KEY")
		return func(pos []string) (action, error) {
			nkeys, flags := 1, limits
			switch {
			case len(limits.l) > 0 && len(policies.l) > 0:
				return nil, cmdUsagef("allow", "allow: give --limit and KEY, or --policy, not both")
			case len(policies.l) > 0:
				nkeys, flags = 0, policies
			case len(limits.l) == 0:
				return nil, cmdUsagef("allow", "allow: --limit N is required, with N >= 0")
			}
			if flags.err != nil {
				return nil, cmdUsagef("allow", "allow: %v", flags.err)
			}
			if len(pos) < nkeys || len(pos) > nkeys+1 {
				return nil, synopsisError("allow")
			}
			keys := slices.Clone(pos[:nkeys])
			for _, l := range policies.l {
				keys = append(keys, l.key)
			}
			if err := checkKeys("allow", keys); err != nil {
				return nil, err
			}
			cost := int64(1)
			if len(pos) == nkeys+1 {
				n, err := strconv.ParseInt(pos[nkeys], 10, 64)
				if err != nil || n < 0 {
					return nil, cmdUsagef("allow", "allow: COST %q is not a non-negative integer", pos[nkeys])
				}
				if n > maxAmount {
					return nil, cmdUsagef("allow", "allow: COST %q is over the maximum 2^53 (%d)", pos[nkeys], int64(maxAmount))
				}
				cost = n
			}
			if nkeys == 1 && len(limits.l) == 1 && limits.l[0].window == 0 {
				return storeAction(func(ctx context.Context, c *cli) error { return c.allow(ctx, pos[0], limits.l[0].limit, cost) }), nil
			}
			return func(e *env) error {
				l := flags.l
				for i := range l {
					if l[i].window == 0 {
						l[i].window = e.g.window
					}
					if err := (store.Window{Length: l[i].window, Bucket: e.g.bucket}).Validate(); err != nil {
						return cmdUsagef("allow", "allow: %s: %s", l[i].flag(), err.(*store.Error).Detail)
					}
					for _, prev := range l[:i] {
						if prev.key == l[i].key && prev.window == l[i].window {
							return cmdUsagef("allow", "allow: %s and %s both limit the window %v: give each window one limit",
								prev.flag(), l[i].flag(), l[i].window)
						}
					}
				}
				return e.onStore(func(ctx context.Context, c *cli) error {
					if nkeys == 0 {
						return c.allowPolicies(ctx, cost, l, e.g.bucket)
					}
					return c.allowAll(ctx, pos[0], cost, l, e.g.bucket)
				})
			}, nil
		}
	},
}

// limitFlag is one --limit of allow, N or N/WINDOW (window 0: --window), or
// one --policy, KEY=N/WINDOW.
type limitFlag struct {
	key    string // --policy's
	limit  int64
	window time.Duration
	text   string
}

// flag is the flag as given.
func (l limitFlag) flag() string {
	if l.key != "" {
		return "--policy " + l.text
	}
	return "--limit " + l.text
}

// limitsFlag collects the --limit (or, keyed, the --policy) flags; a bad one
// is reported by the command.
type limitsFlag struct {
	l     []limitFlag
	err   error
	keyed bool
}

func (f *limitsFlag) String() string { return "" }

func (f *limitsFlag) Set(s string) error {
	spec, key := s, ""
	if f.keyed {
		i := strings.LastIndex(s, "=")
		if i < 0 {
			f.err = fmt.Errorf("--policy %s: want KEY=N/WINDOW, such as user:42=3/10s", s)
			f.l = append(f.l, limitFlag{text: s})
			return nil
		}
		key, spec = s[:i], s[i+1:]
	}
	name := "--limit " + s
	if f.keyed {
		name = "--policy " + s
	}
	n, w, slash := strings.Cut(spec, "/")
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v < 0 {
		f.err = fmt.Errorf("%s: N must be an integer >= 0", name)
		f.l = append(f.l, limitFlag{key: key, text: s})
		return nil
	}
	l := limitFlag{key: key, limit: v, text: s}
	if v > maxAmount {
		f.err = fmt.Errorf("%s: N is over the maximum 2^53 (%d)", name, int64(maxAmount))
	}
	if slash {
		d, err := time.ParseDuration(w)
		if err != nil || d <= 0 {
			f.err = fmt.Errorf("%s: want N/WINDOW, such as 3/10s", name)
		}
		l.window = d
	}
	f.l = append(f.l, l)
	return nil
}

// maxAmount is the largest limit and cost the store takes: 2^53.
const maxAmount = 1 << 53

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
	var ps []store.Quota
	for _, l := range limits {
		st, err := store.New(ctx, c.client, store.Window{Length: l.window, Bucket: bucket},
			store.WithPrefix(c.prefix), store.WithBackend(c.backend))
		if err != nil {
			return err
		}
		ps = append(ps, store.Quota{Store: st, Key: key, Limit: l.limit})
	}
	r, err := store.AllowAll(ctx, cost, ps...)
	if err != nil {
		return err
	}
	policies := r.Policies
	if len(policies) == 0 { // one policy: the decision is its own
		policies = []store.Decision{r}
	}
	var out []policyOut
	for i, p := range policies {
		out = append(out, policyOut{Limit: p.Limit, WindowMs: limits[i].window.Milliseconds(), Sum: p.Sum, Remaining: p.Remaining,
			RetryAfterMs: msOf(p.RetryAfter)})
	}
	return c.decision(key, r, out)
}

// allowPolicies is allow with --policy: every key's policy admits COST, or
// none counts it, across cluster slots.
func (c *cli) allowPolicies(ctx context.Context, cost int64, policies []limitFlag, bucket time.Duration) error {
	var ps []store.Quota
	stores := map[time.Duration]*store.Store{}
	for _, l := range policies {
		st := stores[l.window]
		if st == nil {
			var err error
			st, err = store.New(ctx, c.client, store.Window{Length: l.window, Bucket: bucket},
				store.WithPrefix(c.prefix), store.WithBackend(c.backend))
			if err != nil {
				return err
			}
			stores[l.window] = st
		}
		ps = append(ps, store.Quota{Store: st, Key: l.key, Limit: l.limit})
	}
	r, err := store.AllowAll(ctx, cost, ps...)
	if err != nil {
		return err
	}
	decisions := r.Policies
	if len(decisions) == 0 { // one policy: the decision is its own
		decisions = []store.Decision{r}
	}
	out := policiesOut{Allowed: r.Allowed, RetryAfterMs: msOf(r.RetryAfter)}
	verdict := "allowed"
	if !r.Allowed {
		verdict = "refused, retry after " + r.RetryAfter.String()
		if r.RetryAfter < 0 {
			verdict = "refused: a cost is over its limit, it never fits"
		}
	}
	text := verdict
	for i, d := range decisions {
		l := policies[i]
		out.Policies = append(out.Policies, policyOut{Key: l.key, Limit: d.Limit, WindowMs: l.window.Milliseconds(), Sum: d.Sum,
			Remaining: d.Remaining, RetryAfterMs: msOf(d.RetryAfter)})
		text += fmt.Sprintf("\n  %s\tlimit %d per %v: sum %d, remaining %d, retry after %v", l.key, d.Limit, l.window,
			d.Sum, d.Remaining, d.RetryAfter)
	}
	if err := c.p.emit(out, text); err != nil {
		return err
	}
	if !r.Allowed {
		return errRefused
	}
	return nil
}

func msOf(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

// decision prints an allow's answer; a refusal is errRefused (exit 3).
func (c *cli) decision(key string, r store.Decision, policies []policyOut) error {
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
