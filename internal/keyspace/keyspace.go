// Package keyspace builds the Redis keys of windowstore's counters and
// limiters from keys that come from user input: IPs, user IDs, header values.
// It is the one place where keys are built; package store and package limit
// both go through it.
//
// The rules:
//
//   - A key (and an entity) is 1 to MaxKeyLen bytes of anything, UTF-8 or not.
//     An empty or longer one is refused with an error that wraps ErrInvalid.
//
//   - In Redis, every byte of it that is not printable ASCII, and '%', '{' and
//     '}', is written as %XX (upper-case hex). The escaping is injective, so two
//     different keys never share a Redis key whatever separators they hold, and
//     no key can carry a brace to Redis: no caller can choose a Redis Cluster
//     slot with a hash tag of its own.
//
//   - Hash tags are windowstore's to make. Every Redis key holds exactly one,
//     around the escaped key, or around the escaped entity of an entity view,
//     so that everything one counter needs (its tiers, its event ids) lives
//     in one slot, and an entity's counters can be updated in one script:
//
//     prefix + "{" + escape(key) + "}" + suffix                      no entity
//     prefix + "{" + escape(entity) + "}:" + escape(key) + suffix    entity view
//
//   - The prefix and the suffix are the program's, not the user's, and are
//     used as given: they must not contain braces. Two prefixes of which one
//     begins the other ("ws:" and "ws:a") can collide; give each store its own.
//
// For example, with prefix "ws:" and suffix ":1m/1s":
//
//	key "user:42"                 ws:{user:42}:1m/1s
//	key "{victim}"                ws:{%7Bvictim%7D}:1m/1s
//	entity "user:42", key "spend" ws:{user:42}:spend:1m/1s
package keyspace

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxKeyLen is the longest key, and the longest entity, in bytes, before
// escaping. Escaped, a key takes at most three times as many bytes.
const MaxKeyLen = 1024

// ErrInvalid reports a key, entity, prefix or suffix that cannot name a
// counter.
var ErrInvalid = errors.New("keyspace: invalid key")

// InvalidError is the error this package returns: errors.Is sees ErrInvalid
// in it, and Reason says what is wrong without the package's name, for
// callers that wrap it in messages of their own.
type InvalidError struct {
	Reason string // e.g. "empty key"
}

func (e *InvalidError) Error() string { return "keyspace: invalid key: " + e.Reason }

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, a ...any) error { return &InvalidError{Reason: fmt.Sprintf(format, a...)} }

// Check reports whether key can name a counter: 1 to MaxKeyLen bytes.
func Check(key string) error {
	if key == "" {
		return invalidf("empty key")
	}
	if len(key) > MaxKeyLen {
		return invalidf("key of %d bytes is longer than %d", len(key), MaxKeyLen)
	}
	return nil
}

// CheckAffix reports whether a prefix or suffix can be used: it must not
// contain a brace, since a brace would make a hash tag of its own.
func CheckAffix(s string) error {
	if strings.ContainsAny(s, "{}") {
		return invalidf("prefix or suffix %q contains a brace", s)
	}
	return nil
}

// Space is a key prefix, optionally narrowed to one entity. The zero value is
// the empty prefix with no entity. A Space is a small value, safe to copy and
// for concurrent use.
type Space struct {
	prefix string
	entity string
	tagged bool
}

// New returns the space of keys under prefix. It fails, wrapping ErrInvalid,
// for a prefix that holds a brace.
func New(prefix string) (Space, error) {
	if err := CheckAffix(prefix); err != nil {
		return Space{}, err
	}
	return Space{prefix: prefix}, nil
}

// Prefix returns the space's prefix.
func (s Space) Prefix() string { return s.prefix }

// Entity returns the space narrowed to one entity: its keys share the entity's
// hash tag, and so one Redis Cluster slot. An entity that Check refuses makes
// every Name call fail.
func (s Space) Entity(entity string) Space {
	s.entity, s.tagged = entity, true
	return s
}

// EntityName returns the entity of the space, and whether it has one.
func (s Space) EntityName() (string, bool) { return s.entity, s.tagged }

// Name returns the Redis key of key in this space, followed by suffix (the
// program's, used as given). Its errors wrap ErrInvalid.
func (s Space) Name(key, suffix string) (string, error) {
	if err := Check(key); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(s.prefix) + len(s.entity) + len(key) + len(suffix) + 8)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	if s.tagged {
		if err := Check(s.entity); err != nil {
			return "", invalidf("entity: %s", err.(*InvalidError).Reason)
		}
		Escape(&b, s.entity)
		b.WriteString("}:")
		Escape(&b, key)
	} else {
		Escape(&b, key)
		b.WriteByte('}')
	}
	b.WriteString(suffix)
	return b.String(), nil
}

// Escape writes key to b, escaped as the package doc describes.
func Escape(b *strings.Builder, key string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if escaped(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

func escaped(c byte) bool { return c <= ' ' || c >= 0x7f || c == '%' || c == '{' || c == '}' }

// Unescape reverses Escape, for tools that list counters. It fails, wrapping
// ErrInvalid, on text that Escape cannot produce.
func Unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if escaped(c) {
				return "", invalidf("%q is not an escaped key", s)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", invalidf("%q ends inside an escape", s)
		}
		v, ok := unhex(s[i+1], s[i+2])
		if !ok || !escaped(v) {
			return "", invalidf("%q has a bad escape at byte %d", s, i)
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

// Slot returns the Redis Cluster hash slot of a Redis key, as the server
// computes it: CRC16 of the hash tag (the text between the first '{' and the
// next '}', when not empty), else of the whole key, modulo 16384.
func Slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) % 16384
}

// crc16 is CRC-16/XMODEM, the checksum of Redis Cluster's key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// TokenForm says in words what Token accepts, for error messages.
const TokenForm = "a letter or *, then letters, digits or :/!#$%&'*+-.^_`|~"

// Token reports whether s is a Structured Fields token (RFC 8941 section
// 3.3.4), as the RateLimit header fields need of a policy's name.
func Token(s string) bool {
	if s == "" {
		return false
	}
	c := s[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == ':' || c == '/' || c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' ||
			c == '*' || c == '+' || c == '-' || c == '.' || c == '^' || c == '_' || c == '`' || c == '|' || c == '~':
		default:
			return false
		}
	}
	return true
}

// Shape writes a window's shape as keys carry it: its length and its bucket
// in their largest whole unit among d, h, m, s and ms ("10m/1m", "1d/1h",
// "1500ms/500ms").
func Shape(length, bucket time.Duration) string { return compact(length) + "/" + compact(bucket) }

// compact writes d in its largest whole unit among d, h, m, s and ms.
func compact(d time.Duration) string {
	ms := d.Milliseconds()
	for _, u := range []struct {
		ms   int64
		name string
	}{{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}} {
		if ms != 0 && ms%u.ms == 0 {
			return strconv.FormatInt(ms/u.ms, 10) + u.name
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}
