package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/store"
)

// What the commands that read and write counters share: each runs on a store
// built from the global flags (their own files are cmd_NAME.go).

type cli struct {
	st      *store.Store
	client  rueidis.Client // st's, for allow's stores of other windows
	p       *printer
	prefix  string
	backend string
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

// perKey prints one line per key of a many-key read: its value, or, where the
// read's ManyError has one, its error; it fails with keysFailed (exit 1) when
// any key failed. An error that is not a ManyError is returned as it is.
func (c *cli) perKey(keys []string, vals []int64, err error, what string, out func(key string, v *int64, err string) any) error {
	return perKeyOf(c.p, keys, vals, err, what, func(k string, v *int64) string { return fmt.Sprintf("%s\t%d", k, *v) }, out)
}

// perKeyOf is perKey for values of any type, printed as text by text.
func perKeyOf[T any](p *printer, keys []string, vals []T, err error, what string, text func(key string, v *T) string,
	out func(key string, v *T, err string) any) error {
	var many *store.ManyError
	if err != nil && !errors.As(err, &many) {
		return err
	}
	failed := keysFailed{total: len(keys), what: what}
	for i, k := range keys {
		o, line := out(k, &vals[i], ""), text(k, &vals[i])
		if many != nil && many.Errs[i] != nil {
			e := keyError(k, many.Errs[i])
			o, line = out(k, nil, e), fmt.Sprintf("%s\terror: %s", k, e)
			if failed.failed++; failed.failed == 1 {
				failed.first = fmt.Sprintf("%q: %s", k, e)
			}
		}
		if err := p.emit(o, line); err != nil {
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
	for _, op := range []string{"sum", "read stat"} {
		msg = strings.TrimPrefix(msg, fmt.Sprintf("%s %q: ", op, key))
	}
	return msg
}
