package store

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/engine"
)

// leaseTag names a key's leases in its Redis key, where a counter has its
// window's tag: prefix + "{" + escape(key) + "}" + sub + ":lease", a sorted
// set of lease ids scored by the instant each one ends
// (internal/backend/lua/lease.lua).
const leaseTag = "lease"

// maxLeaseID bounds a lease id's length.
const maxLeaseID = 128

func isLease(k OpKind) bool { return k == OpAcquire || k == OpRefresh || k == OpRelease }

// leaseItem is the group item of a lease op's kind.
func leaseItem(k OpKind) string {
	switch k {
	case OpAcquire:
		return backend.ItemAcquire
	case OpRefresh:
		return backend.ItemRefresh
	}
	return backend.ItemRelease
}

// checkLease checks a lease op's fields.
func checkLease(o Op) error {
	switch {
	case o.Lease == "" || len(o.Lease) > maxLeaseID || strings.ContainsAny(o.Lease, " \t\r\n"):
		return errors.New("lease id " + strconv.Quote(o.Lease) + " must have 1 to 128 bytes and no spaces")
	case o.Kind == OpAcquire && (o.Limit < 0 || o.Limit > maxExact):
		return errors.New("lease limit " + strconv.FormatInt(o.Limit, 10) + " must be within [0, 2^53]")
	case o.Kind != OpRelease && (o.TTL < time.Millisecond || o.TTL > backend.MaxLeaseTTL || o.TTL%time.Millisecond != 0):
		return errors.New("lease TTL " + o.TTL.String() + " must be a whole number of ms from 1ms to 2^40 ms")
	}
	return nil
}

// newLeaseID is a random lease id: 128 bits, 22 characters of base64url
// that never begin with '-', so that the id passes as an argument, not a
// flag, on a command line (windowctl lease refresh KEY ID).
func newLeaseID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// leaseAnswer reads a lease item's answer {held, ok, retry ms, refused} into v.
func (v *Value) leaseAnswer(a engine.Answer, o Op, duplicate bool) error {
	f := make([]int64, len(a.Vals))
	for i, m := range a.Vals {
		n, err := m.AsInt64()
		if err != nil {
			return errors.New("unexpected lease answer " + m.String())
		}
		f[i] = n
	}
	if len(f) != 4 {
		return errors.New("unexpected lease answer")
	}
	v.Sum, v.Counted = f[0], f[1] == 1 && !duplicate
	if o.Kind == OpAcquire {
		v.Limit, v.Remaining = o.Limit, remaining(o.Limit, f[0])
		v.Refused, v.RetryAfter = f[3] == 1, ms(f[2])
	}
	return nil
}
