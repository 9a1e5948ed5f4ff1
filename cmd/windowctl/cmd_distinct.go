package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/windowstore/windowstore/store"
)

var distinctCmd = &command{
	name:    "distinct",
	args:    "add KEY MEMBER... | count KEY...",
	summary: "add members to a distinct count, or read distinct counts",
	details: "distinct add adds each MEMBER to KEY's distinct count (a HyperLogLog per\n" +
		"bucket; about 0.81% standard error) and prints the number of distinct members\n" +
		"in the window. distinct count prints each KEY's, in order, read in one round\n" +
		"trip; a key that fails gets an error line, as with sum.\n" +
		"Text: KEY<TAB>N.",
	json: `{"key":K,"distinct":N}, or {"key":K,"error":"…"}`,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		return func(pos []string) (action, error) {
			switch {
			case len(pos) >= 3 && pos[0] == "add":
				if err := checkKeys("distinct", pos[1:2]); err != nil {
					return nil, err
				}
				return storeAction(func(ctx context.Context, c *cli) error { return c.distinctAdd(ctx, pos[1], pos[2:]) }), nil
			case len(pos) >= 2 && pos[0] == "count":
				if err := checkKeys("distinct", pos[1:]); err != nil {
					return nil, err
				}
				return storeAction(func(ctx context.Context, c *cli) error { return c.distinctCount(ctx, pos[1:]) }), nil
			}
			return nil, synopsisError("distinct")
		}
	},
}

func (c *cli) distinctAdd(ctx context.Context, key string, members []string) error {
	v, err := c.st.RecordStat(ctx, store.StatEvent{Key: key, Stat: store.StatDistinct, Members: members})
	if err != nil {
		return err
	}
	n := v.Value
	return c.p.emit(distinctOut{Key: key, Distinct: &n}, fmt.Sprintf("%s\t%d", key, n))
}

// distinctCount prints one line per key, as sum does.
func (c *cli) distinctCount(ctx context.Context, keys []string) error {
	vs, err := c.st.ReadStatMany(ctx, keys, store.StatDistinct)
	var counts []int64
	if vs != nil {
		counts = make([]int64, len(vs))
		for i, v := range vs {
			counts[i] = v.Value
		}
	}
	return c.perKey(keys, counts, err, "distinct count", func(k string, v *int64, e string) any {
		return distinctOut{Key: k, Distinct: v, Error: e}
	})
}
