package main

import (
	"context"
	"encoding/json"
	"flag"
	"strconv"
	"strings"
	"time"

	"github.com/windowstore/windowstore/store"
)

var aggCmd = &command{
	name:    "agg",
	args:    "add --kind KIND KEY [VALUE] | read --kind KIND KEY...",
	summary: "record or read a window's max, min, average, first or last seen, recent values",
	details: "agg add records one event in KEY's statistic of that KIND and prints the\n" +
		"statistic over the window after it; agg read prints each KEY's, in order, in\n" +
		"one round trip (a key that fails gets an error line, as with sum).\n" +
		"KIND is max or min (of the VALUEs), avg (their average: the window's sum\n" +
		"over its number of events), first or last (the time of the window's oldest\n" +
		"or newest event, as Unix ms: they take no VALUE), recent (the window's 16 most\n" +
		"recent VALUEs with their times, newest first). With --at, the event\n" +
		"counts in the bucket of its own time (and first and last keep that time);\n" +
		"one older than the window is refused (exit 1) and nothing is written.\n" +
		"A window with no event prints none (JSON: null).\n" +
		"Text: KEY<TAB>VALUE (first, last: KEY<TAB>MS<TAB>RFC 3339 time; recent:\n" +
		"KEY<TAB>VALUE@MS VALUE@MS ...).",
	json: `{"key":K,"kind":KIND,"value":N} (avg: a decimal; first, last: Unix ms; recent: [{"at":MS,"value":N},…]; none: null), or {"key":K,"kind":KIND,"value":null,"error":"…"}`,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		kind := fs.String("kind", "", "the statistic: `KIND` max, min, avg, first, last or recent")
		at := fs.String("at", "", "agg add: the event's `TIME` (RFC 3339), for a late or out-of-order event")
		return func(pos []string) (action, error) {
			if *kind == "" {
				return nil, cmdUsagef("agg", "agg: --kind is required (max, min, avg, first, last or recent)")
			}
			var st store.Stat
			var err error
			if err := st.UnmarshalText([]byte(*kind)); err != nil || st == store.StatDistinct {
				return nil, cmdUsagef("agg", "agg: --kind %q is not max, min, avg, first, last or recent", *kind)
			}
			switch {
			case len(pos) >= 2 && pos[0] == "add":
				if err := checkKeys("agg", pos[1:2]); err != nil {
					return nil, err
				}
				o := store.StatEvent{Key: pos[1], Stat: st}
				switch {
				case (st == store.StatFirst || st == store.StatLast) && len(pos) != 2:
					return nil, cmdUsagef("agg", "agg add --kind %s takes no VALUE: it keeps the event's time", st)
				case st != store.StatFirst && st != store.StatLast && len(pos) != 3:
					return nil, cmdUsagef("agg", "agg add --kind %s takes one VALUE, an integer", st)
				case len(pos) == 3:
					v, err := strconv.ParseInt(pos[2], 10, 64)
					if err != nil {
						return nil, cmdUsagef("agg", "agg: VALUE %q is not an integer", pos[2])
					}
					o.Value = v
				}
				if o.Time, err = eventTime("agg", *at); err != nil {
					return nil, err
				}
				return storeAction(func(ctx context.Context, c *cli) error { return c.aggAdd(ctx, o) }), nil
			case len(pos) >= 2 && pos[0] == "read":
				if *at != "" {
					return nil, cmdUsagef("agg", "agg read takes no --at: it reads the window now")
				}
				if err := checkKeys("agg", pos[1:]); err != nil {
					return nil, err
				}
				return storeAction(func(ctx context.Context, c *cli) error { return c.aggRead(ctx, pos[1:], st) }), nil
			}
			return nil, synopsisError("agg")
		}
	},
}

// aggOut is agg's answer for one key: the value (null: no event in the
// window), or why the key failed.
type aggOut struct {
	Key   string `json:"key"`
	Kind  string `json:"kind"`
	Value any    `json:"value"`
	Error string `json:"error,omitempty"`
}

// sampleOut is one of recent's values.
type sampleOut struct {
	At    int64 `json:"at"`
	Value int64 `json:"value"`
}

// aggValue renders a statistic's value for JSON and text: nil and "none"
// when the window has no event.
func aggValue(st store.Stat, v store.StatValue) (any, string) {
	if !v.OK {
		return nil, "none"
	}
	s := strconv.FormatInt(v.Value, 10)
	text := s
	switch st {
	case store.StatAvg:
		s = v.Mean(6)
		text = s
	case store.StatFirst, store.StatLast:
		text = s + "\t" + time.UnixMilli(v.Value).UTC().Format(time.RFC3339Nano)
	case store.StatRecent:
		out, words := make([]sampleOut, len(v.Recent)), make([]string, len(v.Recent))
		for i, x := range v.Recent {
			out[i], words[i] = sampleOut(x), strconv.FormatInt(x.Value, 10)+"@"+strconv.FormatInt(x.At, 10)
		}
		return out, strings.Join(words, " ")
	}
	return json.Number(s), text
}

func (c *cli) aggAdd(ctx context.Context, o store.StatEvent) error {
	v, err := c.st.RecordStat(ctx, o)
	if err != nil {
		return err
	}
	n, text := aggValue(o.Stat, v)
	return c.p.emit(aggOut{Key: o.Key, Kind: o.Stat.String(), Value: n}, o.Key+"\t"+text)
}

// aggRead prints one line per key, as sum does.
func (c *cli) aggRead(ctx context.Context, keys []string, st store.Stat) error {
	vals, err := c.st.ReadStatMany(ctx, keys, st)
	return perKeyOf(c.p, keys, vals, err, "agg read", func(k string, v *store.StatValue) string {
		_, text := aggValue(st, *v)
		return k + "\t" + text
	}, func(k string, v *store.StatValue, e string) any {
		if v == nil {
			return aggOut{Key: k, Kind: st.String(), Error: e}
		}
		n, _ := aggValue(st, *v)
		return aggOut{Key: k, Kind: st.String(), Value: n}
	})
}
