package store

import (
	"errors"

	"github.com/windowstore/windowstore/internal/keyspace"
)

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

// counterKeys are the keys of the counter whose Redis key (redisKey) is rk,
// of shape tag, as the backend's scripts take them (WS_KPC and ws_ckey in
// the Lua): rk itself; or, with a backend that keeps a head per key (the
// plain hash, see package nativehash), the counter's hash, rk + ":b", and
// the key's head, rk less its shape + "h":
//
//	ws:{user:42}:10m/1m    ->  ws:{user:42}:10m/1m:b, ws:{user:42}:h
func (s *Store) counterKeys(rk, tag string) []string {
	if !s.be.Head {
		return []string{rk}
	}
	return []string{rk + ":b", rk[:len(rk)-len(tag)] + "h"}
}

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
