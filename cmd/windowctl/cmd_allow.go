package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/windowstore/windowstore/store"
)

var allowCmd = &command{
	name:    "allow",
	args:    "--limit N KEY [COST]",
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
		"N and COST are at most 2^53.\n" +
		"Text: KEY<TAB>allowed|refused, retry after D<TAB>sum N<TAB>remaining N.",
	json: `{"key":K,"allowed":bool,"sum":N,"remaining":N,"retry_after_ms":N}; with N/WINDOW limits also ` +
		`"policies":[{"limit":N,"window_ms":N,"sum":N,"remaining":N,"retry_after_ms":N},...]`,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		var limits limitsFlag
		fs.Var(&limits, "limit", "the limit `N` (required, >= 0), or N/WINDOW; repeatable")
		return func(pos []string) (action, error) {
			if len(limits.l) == 0 {
				return nil, cmdUsagef("allow", "allow: --limit N is required, with N >= 0")
			}
			if limits.err != nil {
				return nil, cmdUsagef("allow", "allow: %v", limits.err)
			}
			if len(pos) < 1 || len(pos) > 2 {
				return nil, synopsisError("allow")
			}
			if err := checkKeys("allow", pos[:1]); err != nil {
				return nil, err
			}
			cost := int64(1)
			if len(pos) == 2 {
				n, err := strconv.ParseInt(pos[1], 10, 64)
				if err != nil || n < 0 {
					return nil, cmdUsagef("allow", "allow: COST %q is not a non-negative integer", pos[1])
				}
				if n > maxAmount {
					return nil, cmdUsagef("allow", "allow: COST %q is over the maximum 2^53 (%d)", pos[1], int64(maxAmount))
				}
				cost = n
			}
			if len(limits.l) == 1 && limits.l[0].window == 0 {
				return storeAction(func(ctx context.Context, c *cli) error { return c.allow(ctx, pos[0], limits.l[0].limit, cost) }), nil
			}
			return func(e *env) error {
				for i := range limits.l {
					if limits.l[i].window == 0 {
						limits.l[i].window = e.g.window
					}
					if err := (store.Window{Length: limits.l[i].window, Bucket: e.g.bucket}).Validate(); err != nil {
						return cmdUsagef("allow", "allow: --limit %s: %s", limits.l[i].text, err.(*store.Error).Detail)
					}
					for _, prev := range limits.l[:i] {
						if prev.window == limits.l[i].window {
							return cmdUsagef("allow", "allow: --limit %s and --limit %s both limit the window %v: give each window one limit",
								prev.text, limits.l[i].text, limits.l[i].window)
						}
					}
				}
				return e.onStore(func(ctx context.Context, c *cli) error {
					return c.allowAll(ctx, pos[0], cost, limits.l, e.g.bucket)
				})
			}, nil
		}
	},
}

// limitFlag is one --limit of allow: N, or N/WINDOW (window 0: --window).
type limitFlag struct {
	limit  int64
	window time.Duration
	text   string
}

// limitsFlag collects the --limit flags; a bad one is reported by check.
type limitsFlag struct {
	l   []limitFlag
	err error
}

func (f *limitsFlag) String() string { return "" }

func (f *limitsFlag) Set(s string) error {
	n, w, slash := strings.Cut(s, "/")
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v < 0 {
		f.err = errors.New("--limit N is required, with N >= 0")
		f.l = append(f.l, limitFlag{text: s})
		return nil
	}
	l := limitFlag{limit: v, text: s}
	if v > maxAmount {
		f.err = fmt.Errorf("--limit %s: N is over the maximum 2^53 (%d)", s, int64(maxAmount))
	}
	if slash {
		d, err := time.ParseDuration(w)
		if err != nil || d <= 0 {
			f.err = fmt.Errorf("--limit %s: want N/WINDOW, such as 3/10s", s)
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
	var ps []store.Policy
	for _, l := range limits {
		st, err := store.New(ctx, c.client, store.Window{Length: l.window, Bucket: bucket},
			store.WithPrefix(c.prefix), store.WithBackend(c.backend))
		if err != nil {
			return err
		}
		ps = append(ps, store.Policy{Store: st, Key: key, Limit: l.limit})
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
