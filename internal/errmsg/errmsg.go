// Package errmsg is the one home of the message style of windowstore's error
// type (store.Error, which limit, features and httplimit use too): the package named once, then what the
// error is about, the key, the kind and the detail:
//
//	store: add "user:42": counter overflow: the window sum would leave the int64 range; nothing was written
package errmsg

import (
	"strconv"
	"strings"
)

// kindText is a sentinel's message less its package's "name: " prefix: the
// kinds are shared (store.ErrInvalid is every package's), and the message
// names its package once.
func kindText(kind error) string {
	msg := kind.Error()
	if p, rest, ok := strings.Cut(msg, ": "); ok && p != "" && strings.Trim(p, "abcdefghijklmnopqrstuvwxyz") == "" {
		return rest
	}
	return msg
}

// Format returns pkg + ": " + subject, then the key quoted when hasKey, then
// kind's message less its package's prefix, then detail; kind may be nil
// and detail empty.
func Format(pkg, subject, key string, hasKey bool, kind error, detail string) string {
	var b strings.Builder
	b.WriteString(pkg)
	b.WriteString(": ")
	b.WriteString(subject)
	if hasKey {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(key))
	}
	if kind != nil {
		b.WriteString(": ")
		b.WriteString(kindText(kind))
	}
	if detail != "" {
		b.WriteString(": ")
		b.WriteString(detail)
	}
	return b.String()
}

// Unwrap returns kind and cause, those that are not nil, for an error type's
// Unwrap() []error.
func Unwrap(kind, cause error) []error {
	var out []error
	if kind != nil {
		out = append(out, kind)
	}
	if cause != nil {
		out = append(out, cause)
	}
	return out
}
