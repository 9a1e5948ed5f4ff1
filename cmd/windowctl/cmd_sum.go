package main

import (
	"context"
	"flag"
)

var sumCmd = &command{
	name:    "sum",
	args:    "KEY...",
	summary: "print the window sums, read in one round trip",
	details: "Prints the window sum of each KEY, in order, read in one round trip and\n" +
		"writing nothing. A key that fails (say, one that holds a string) gets an\n" +
		"error line instead and the others are still printed; the exit status is\n" +
		"then 1, with a count of the failed keys on stderr.\n" +
		"Text: KEY<TAB>SUM, or KEY<TAB>error: MESSAGE.",
	json: `{"key":K,"sum":N}, or {"key":K,"error":"key holds a value that is not a counter"}`,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		return func(pos []string) (action, error) {
			if len(pos) == 0 {
				return nil, synopsisError("sum")
			}
			if err := checkKeys("sum", pos); err != nil {
				return nil, err
			}
			return storeAction(func(ctx context.Context, c *cli) error { return c.sum(ctx, pos) }), nil
		}
	},
}

// sum prints one line per key, in order: its sum, or why it failed. A failed
// key does not stop the others; the command then fails (exit 1).
func (c *cli) sum(ctx context.Context, keys []string) error {
	sums, err := c.st.SumMany(ctx, keys)
	return c.perKey(keys, sums, err, "sum", func(k string, v *int64, e string) any { return sumOut{Key: k, Sum: v, Error: e} })
}
