package store

import (
	"errors"

	"github.com/windowstore/windowstore/internal/keyspace"
)

// MaxKeyLen is the longest key (before the prefix) that the store accepts.
const MaxKeyLen = keyspace.MaxKeyLen

// CheckKey reports whether the store accepts key: it must not be empty nor
// longer than MaxKeyLen bytes. Its errors wrap ErrInvalid.
func CheckKey(key string) error {
	if err := keyspace.Check(key); err != nil {
		return invalid("key", "", reason(err))
	}
	return nil
}

// UnescapeKey reverses the escaping of a counter key in its Redis key (see
// package keyspace), for tools that list counters. It fails on text that
// escaping cannot produce.
func UnescapeKey(s string) (string, error) {
	k, err := keyspace.Unescape(s)
	if err != nil {
		return "", invalid("unescape", "", reason(err))
	}
	return k, nil
}

// reason is a keyspace error's text without its package's words.
func reason(err error) string {
	var ie *keyspace.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return err.Error()
}

// Entity returns a view of the store whose counters for one entity (a user,
// a card, an IP) share a Redis Cluster slot, through a hash tag: its Redis
// keys are prefix + "{" + escape(entity) + "}:" + escape(key) + ":" + shape.
// Then SumMany over one entity's counters is one node's batch, and a
// multi-key script can update them together. Use it when you read or limit an
// entity's counters together; do not use it for huge entities, since one slot
// lives on one node.
//
// The view shares the store's client, window and backend; it is safe for
// concurrent use. An empty or over-long entity makes every call fail with
// ErrInvalid.
func (s *Store) Entity(entity string) *Store {
	v := *s
	v.space = s.space.Entity(entity)
	return &v
}

// Sub returns a view of the store whose counters carry name after the key:
// prefix + "{" + escape(key) + "}:" + name + ":" + shape. Views of different
// names keep different counters for one key, in the key's slot; package limit
// uses it to keep each policy's counter apart. The name is the program's, not
// the user's: it must not contain braces (calls fail with ErrInvalid).
func (s *Store) Sub(name string) *Store {
	v := *s
	v.sub = ":" + name
	return &v
}

// RedisKey returns the Redis key that holds the counter key (see package
// keyspace for the rules). It fails, wrapping ErrInvalid, for a key that
// CheckKey refuses.
func (s *Store) RedisKey(key string) (string, error) { return s.redisKey(key, s.tag) }

// redisKey builds the Redis key of key's counter of shape tag.
func (s *Store) redisKey(key, tag string) (string, error) {
	if err := keyspace.CheckAffix(s.sub); err != nil {
		return "", invalid("key", key, reason(err))
	}
	rk, err := s.space.Name(key, s.sub+":"+tag)
	if err != nil {
		return "", invalid("key", key, reason(err))
	}
	return rk, nil
}
