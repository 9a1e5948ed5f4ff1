package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/windowstore/windowstore/store"
)

var addCmd = &command{
	name:    "add",
	args:    "KEY [DELTA]",
	summary: "add DELTA (default 1) and print the window sum",
	details: "Adds DELTA (an integer, default 1; it may be negative) to the current bucket\n" +
		"of KEY and prints the window sum, in one round trip.\n" +
		"With --id, an event of that id seen within the window counts nothing: it\n" +
		"prints the sum now and \"duplicate\":true. With --at, the event counts in the\n" +
		"bucket of its own time: late events (inside the window) never delete newer\n" +
		"buckets; one older than the window, or more than 5s ahead of the clock, is\n" +
		"refused (exit 1) and nothing is written.\n" +
		"Text: KEY<TAB>SUM.",
	json: `{"key":K,"sum":N}; with --id or --at {"key":K,"sum":N,"duplicate":bool}`,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		id := fs.String("id", "", "the event's `ID`: a repeated ID within the window counts nothing")
		at := fs.String("at", "", "the event's `TIME` (RFC 3339), for a late or out-of-order event")
		return func(pos []string) (action, error) {
			if len(pos) < 1 || len(pos) > 2 {
				return nil, synopsisError("add")
			}
			if err := checkKeys("add", pos[:1]); err != nil {
				return nil, err
			}
			delta := int64(1)
			if len(pos) == 2 {
				d, err := strconv.ParseInt(pos[1], 10, 64)
				if err != nil {
					return nil, cmdUsagef("add", "add: DELTA %q is not an integer", pos[1])
				}
				delta = d
			}
			if *id == "" && *at == "" {
				return storeAction(func(ctx context.Context, c *cli) error { return c.add(ctx, pos[0], delta) }), nil
			}
			e := store.Event{Key: pos[0], Delta: delta, ID: *id}
			t, err := eventTime("add", *at)
			if err != nil {
				return nil, err
			}
			e.Time = t
			return storeAction(func(ctx context.Context, c *cli) error { return c.addEvent(ctx, e) }), nil
		}
	},
}

// eventTime parses cmd's --at flag: an RFC 3339 time, or "" for none (the
// zero time).
func eventTime(cmd, at string) (time.Time, error) {
	if at == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return time.Time{}, cmdUsagef(cmd, "%s: --at %q is not an RFC 3339 time (like 2026-11-23T10:04:05Z)", cmd, at)
	}
	return t, nil
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
	a, err := c.st.Record(ctx, e)
	if err != nil {
		return err
	}
	text := fmt.Sprintf("%s\t%d", e.Key, a.Sum)
	if a.Duplicate {
		text += "\tduplicate: not counted again"
	}
	return c.p.emit(sumOut{Key: e.Key, Sum: &a.Sum, Duplicate: &a.Duplicate}, text)
}
