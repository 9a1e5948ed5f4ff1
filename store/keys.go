package store

import (
	"fmt"
	"strings"
)

// Keys come from user input: IPs, user IDs, header values. The rules:
//
//   - A key is 1 to MaxKeyLen bytes of anything, UTF-8 or not.
//   - Its Redis key is the prefix, then the key with every byte that is not
//     printable ASCII, and '%', '{' and '}', written as %XX (upper-case hex).
//     The escaping is injective, so two different keys never share a counter,
//     whatever separators they contain; and no key can carry braces to Redis,
//     so no caller can choose a Redis Cluster slot (or another counter's
//     slot) with a hash tag of its own.
//   - Hash tags are the store's to make: Entity(e) gives a view whose keys are
//     prefix + "{" + escape(e) + "}:" + escape(key), so all counters of one
//     entity live in one slot.
//
// Prefixes are the program's, not the user's, and are used as given. Two
// stores whose prefixes are prefixes of one another ("ws:" and "ws:a") can
// collide; end prefixes with a separator that keys cannot contain unescaped,
// or give each store its own.

// escapeKey writes key as described above.
func escapeKey(b *strings.Builder, key string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c <= ' ' || c >= 0x7f || c == '%' || c == '{' || c == '}' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// UnescapeKey reverses the escaping of a Redis key's key part, for tools that
// list counters. It fails on text that escaping cannot produce.
func UnescapeKey(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if c <= ' ' || c >= 0x7f || c == '{' || c == '}' {
				return "", fmt.Errorf("%w: %q is not an escaped key", ErrInvalid, s)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("%w: %q ends inside an escape", ErrInvalid, s)
		}
		v, ok := unhex(s[i+1], s[i+2])
		if !ok || !(v <= ' ' || v >= 0x7f || v == '%' || v == '{' || v == '}') {
			return "", fmt.Errorf("%w: %q has a bad escape at byte %d", ErrInvalid, s, i)
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}

func unhex(a, b byte) (byte, bool) {
	h := func(c byte) (byte, bool) {
		switch {
		case c >= '0' && c <= '9':
			return c - '0', true
		case c >= 'A' && c <= 'F':
			return c - 'A' + 10, true
		}
		return 0, false
	}
	x, ok1 := h(a)
	y, ok2 := h(b)
	return x<<4 | y, ok1 && ok2
}

// Entity returns a view of the store whose counters for one entity (a user,
// a card, an IP) share a Redis Cluster slot, through a hash tag: its Redis
// keys are prefix + "{" + escape(entity) + "}:" + escape(key). Then SumMany
// over one entity's counters is one node's batch, and a future multi-key
// script could read them together. Use it when you read an entity's features
// together; do not use it for huge entities, since one slot lives on one node.
//
// The view shares the store's client, window and backend; it is safe for
// concurrent use. An empty or over-long entity makes every call fail with
// ErrInvalid.
func (s *Store) Entity(entity string) *Store {
	v := *s
	v.entity, v.tagged = entity, true
	return &v
}

// redisKey builds the Redis key of key.
func (s *Store) redisKey(key string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(s.prefix) + len(key) + 8)
	b.WriteString(s.prefix)
	if s.tagged {
		if err := CheckKey(s.entity); err != nil {
			return "", fmt.Errorf("entity: %w", err)
		}
		b.WriteByte('{')
		escapeKey(&b, s.entity)
		b.WriteString("}:")
	}
	escapeKey(&b, key)
	return b.String(), nil
}
