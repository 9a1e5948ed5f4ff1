package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/windowstore/windowstore/store"
)

var leaseCmd = &command{
	name:    "lease",
	args:    "acquire --max N --ttl DUR KEY | refresh --ttl DUR KEY ID | release KEY ID",
	summary: "take, refresh or end a lease: at most N holders of KEY at once",
	details: "lease acquire takes a lease on KEY if fewer than N (--max, >= 0) are held,\n" +
		"atomically, and prints its ID; a refusal exits with status 3, and\n" +
		"retry_after_ms is the time until the first held lease ends. A lease ends by\n" +
		"itself --ttl after it was taken or last refreshed (a holder that dies frees\n" +
		"it); lease refresh ends it --ttl from now instead, if it is still held;\n" +
		"lease release ends it now, and prints released false when it had already\n" +
		"ended. The leases of KEY are the sorted set PREFIX{KEY}:lease (the library's\n" +
		"limit.Concurrency named NAME keeps PREFIX{KEY}:NAME:lease). An ID never\n" +
		"begins with '-' (one taken by an earlier build may: put it after --, as in\n" +
		"lease release KEY -- ID).\n" +
		"Text: KEY<TAB>acquired ID|refused, retry after D<TAB>held N;\n" +
		"KEY<TAB>refreshed|released true|false.",
	json: `acquire: {"key":K,"acquired":bool,"lease":"ID","held":N,"retry_after_ms":N}; ` +
		`refresh: {"key":K,"refreshed":bool}; release: {"key":K,"released":bool}`,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		maxFlag := fs.String("max", "", "acquire: the most leases `N` held at once (>= 0)")
		ttlFlag := fs.String("ttl", "", "acquire, refresh: how long a lease lasts, `DURATION` in whole ms (such as 30s)")
		return func(pos []string) (action, error) {
			ttl := func() (time.Duration, error) {
				d, err := time.ParseDuration(*ttlFlag)
				if *ttlFlag == "" || err != nil || d < time.Millisecond || d%time.Millisecond != 0 {
					return 0, cmdUsagef("lease", "lease: --ttl %q is not a duration of whole ms, such as 30s", *ttlFlag)
				}
				return d, nil
			}
			var op store.Op
			switch {
			case len(pos) == 2 && pos[0] == "acquire":
				n, err := strconv.ParseInt(*maxFlag, 10, 64)
				if err != nil || n < 0 || n > maxAmount {
					return nil, cmdUsagef("lease", "lease: --max %q is not an integer from 0 to 2^53", *maxFlag)
				}
				op = store.Op{Kind: store.OpAcquire, Limit: n}
			case len(pos) == 3 && pos[0] == "refresh":
				op = store.Op{Kind: store.OpRefresh, Lease: pos[2]}
			case len(pos) == 3 && pos[0] == "release":
				op = store.Op{Kind: store.OpRelease, Lease: pos[2]}
			default:
				return nil, synopsisError("lease")
			}
			if op.Kind != store.OpRelease {
				d, err := ttl()
				if err != nil {
					return nil, err
				}
				op.TTL = d
			}
			if err := checkKeys("lease", pos[1:2]); err != nil {
				return nil, err
			}
			return storeAction(func(ctx context.Context, c *cli) error { return c.lease(ctx, pos[1], op) }), nil
		}
	},
}

// leaseOut is lease's answer.
type leaseOut struct {
	Key          string  `json:"key"`
	Acquired     *bool   `json:"acquired,omitempty"`
	Lease        *string `json:"lease,omitempty"`
	Held         *int64  `json:"held,omitempty"`
	RetryAfterMs *int64  `json:"retry_after_ms,omitempty"`
	Refreshed    *bool   `json:"refreshed,omitempty"`
	Released     *bool   `json:"released,omitempty"`
}

// lease runs one lease op on key; a refused acquire is errRefused (exit 3).
func (c *cli) lease(ctx context.Context, key string, op store.Op) error {
	op.Store, op.Key = c.st, key
	res, err := store.Apply(ctx, store.Batch{Ops: []store.Op{op}})
	if err != nil {
		var m *store.ManyError
		if errors.As(err, &m) && len(m.Errs) == 1 && m.Errs[0] != nil {
			err = m.Errs[0] // the batch's own error
		}
		return err
	}
	v := res[0].Values[0]
	ok := v.Counted
	switch op.Kind {
	case store.OpAcquire:
		retry := msOf(v.RetryAfter)
		text := fmt.Sprintf("%s\tacquired %s\theld %d", key, v.Lease, v.Sum)
		out := leaseOut{Key: key, Acquired: &ok, Held: &v.Sum, RetryAfterMs: &retry}
		id := ""
		if ok {
			id = v.Lease
		}
		out.Lease = &id
		if !ok {
			text = fmt.Sprintf("%s\trefused, retry after %v\theld %d", key, v.RetryAfter, v.Sum)
			if v.RetryAfter < 0 {
				text = fmt.Sprintf("%s\trefused: --max is 0, never admits\theld %d", key, v.Sum)
			}
		}
		if err := c.p.emit(out, text); err != nil {
			return err
		}
		if !ok {
			return errRefused
		}
		return nil
	case store.OpRefresh:
		return c.p.emit(leaseOut{Key: key, Refreshed: &ok}, fmt.Sprintf("%s\trefreshed %t", key, ok))
	}
	return c.p.emit(leaseOut{Key: key, Released: &ok}, fmt.Sprintf("%s\treleased %t", key, ok))
}
