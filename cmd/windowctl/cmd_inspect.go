package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

var inspectCmd = &command{
	name:    "inspect",
	args:    "KEY",
	summary: "show every bucket of the counter",
	details: "Prints the counter's Redis key, backend and key TTL, its running total (plain\n" +
		"hash), and every bucket with its start, value and TTL. Reads only.",
	json: `{"key":K,"redis_key":"…","backend":"…","buckets":[{"field":"…","start":"RFC3339","value":N,"ttl_ms":N}],` +
		`"running_total":"N","running_total_mark_ms":"MS"}` + "\n(the running total fields only on the plain hash)",
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		return func(pos []string) (action, error) {
			if len(pos) != 1 {
				return nil, synopsisError("inspect")
			}
			if err := checkKeys("inspect", pos); err != nil {
				return nil, err
			}
			return storeAction(func(ctx context.Context, c *cli) error { return c.inspect(ctx, pos[0]) }), nil
		}
	},
}

func (c *cli) inspect(ctx context.Context, key string) error {
	s, err := c.st.Inspect(ctx, key)
	if err != nil {
		return err
	}
	o := inspectOut{Key: s.Key, RedisKey: s.RedisKey, Head: s.Head, Backend: s.Backend, Buckets: []bucketOut{}, Meta: s.Meta}
	var b strings.Builder
	fmt.Fprintf(&b, "key %s (redis key %s, backend %s, key TTL %s)\n", s.Key, s.RedisKey, s.Backend, ttlText(s.KeyTTL))
	if s.Head != "" {
		fmt.Fprintf(&b, "head %s (the current bucket and the running total)\n", s.Head)
	}
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
