package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/backend"
	"github.com/windowstore/windowstore/nativehash"
	"github.com/windowstore/windowstore/tairhash"
)

// Backend names a backend for WithBackend.
type Backend string

const (
	// Auto picks the best backend the server offers: TairHash, then the native
	// hash with field TTL, then the plain native hash. It is the default.
	Auto Backend = "auto"
	// TairHash keeps counters in TairHash (exHash) keys with per-field expiry.
	TairHash Backend = "tairhash"
	// NativeHash keeps counters in native hashes: with hash-field TTL where the
	// server has it (Redis >= 7.4, Valkey >= 9), else plain with HDEL clean-up.
	NativeHash Backend = "nativehash"
	// NativeHashPlain forces the plain native hash, even where the server has
	// hash-field TTL. Counters of the two native modes are compatible.
	NativeHashPlain Backend = "nativehash-plain"
)

// Detection is what Detect learned about a server, and the backend it picked.
type Detection struct {
	Backend  string   // "nativehash" or "tairhash"
	FieldTTL bool     // buckets expire on their own (hash-field TTL or TairHash)
	Server   string   // "redis", "valkey", or what INFO calls itself
	Version  string   // the server's version string, for display only
	Modules  []string // loaded modules, from MODULE LIST; nil where it is refused
	Reason   string   // why this backend, in one sentence

	tairHash, hashFieldTTL bool
	notes                  string
}

func isServerErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// Detect asks the server what it offers, in one round trip: INFO server, MODULE
// LIST, and COMMAND INFO for EXHINCRBY (TairHash) and HPEXPIREAT (hash-field
// TTL). It decides by capability, never by version string, and picks as Auto
// does.
func Detect(ctx context.Context, c rueidis.Client) (Detection, error) {
	res := c.DoMulti(ctx,
		c.B().Info().Section("server").Build(),
		c.B().CommandInfo().CommandName("exhincrby", "hpexpireat").Build(),
		c.B().ModuleList().Build(),
	)
	var d Detection
	// A server that answers with an error (an ACL that denies INFO or COMMAND,
	// a proxy that lacks them) still gets a backend: the plain hash works
	// everywhere. A network error is returned.
	var notes []string
	info, err := res[0].ToString()
	if err != nil && !isServerErr(err) {
		return d, fmt.Errorf("store: detect: INFO: %w", err)
	}
	d.Server, d.Version = parseInfo(info)
	caps, err := res[1].ToArray()
	if err != nil {
		if !isServerErr(err) {
			return d, fmt.Errorf("store: detect: COMMAND INFO: %w", err)
		}
		notes = append(notes, "COMMAND INFO was refused ("+err.Error()+"), so no capability could be seen")
	}
	d.tairHash = len(caps) > 0 && !caps[0].IsNil()
	d.hashFieldTTL = len(caps) > 1 && !caps[1].IsNil()
	if mods, err := res[2].ToArray(); err == nil {
		d.Modules = []string{}
		for _, m := range mods {
			if kv, err := m.AsStrMap(); err == nil {
				d.Modules = append(d.Modules, kv["name"])
			}
		}
	} else if !isServerErr(err) {
		return d, fmt.Errorf("store: detect: MODULE LIST: %w", err)
	}
	d.notes = strings.Join(notes, "; ")
	d.pick(Auto)
	return d, nil
}

// pick sets Backend, FieldTTL and Reason for a choice, or reports that the
// server lacks it.
func (d *Detection) pick(want Backend) (*backend.Backend, error) {
	switch want {
	case Auto, "":
		if d.tairHash {
			return d.set(tairhash.Backend, "the server has TairHash (EXHINCRBY): buckets expire per field"), nil
		}
		if d.hashFieldTTL {
			return d.set(nativehash.FieldTTL, "the server has hash-field TTL (HPEXPIREAT) and no TairHash"), nil
		}
		return d.set(nativehash.Plain, "the server has neither TairHash nor hash-field TTL, so the scripts delete stale buckets"), nil
	case NativeHash:
		if d.hashFieldTTL {
			return d.set(nativehash.FieldTTL, "nativehash was asked for and the server has hash-field TTL"), nil
		}
		return d.set(nativehash.Plain, "nativehash was asked for; the server has no hash-field TTL"), nil
	case NativeHashPlain:
		return d.set(nativehash.Plain, "the plain native hash was asked for"), nil
	case TairHash:
		if d.tairHash {
			return d.set(tairhash.Backend, "tairhash was asked for and the server has it"), nil
		}
		return nil, fmt.Errorf("%w: %s: the server has no EXHINCRBY (no TairHash module)", ErrUnavailable, want)
	}
	return nil, fmt.Errorf("%w: unknown backend %q (want auto, tairhash, nativehash or nativehash-plain)", ErrInvalid, want)
}

func (d *Detection) set(b *backend.Backend, why string) *backend.Backend {
	if d.notes != "" {
		why += " (" + d.notes + ")"
	}
	d.Backend, d.FieldTTL, d.Reason = b.Name, b.FieldTTL, why
	return b
}

// parseInfo reads the server's name and version from INFO server.
func parseInfo(info string) (server, version string) {
	if info == "" {
		return "unknown", ""
	}
	server = "redis"
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "server_name":
			server = v
		case "valkey_version":
			server, version = "valkey", v
		case "redis_version":
			if version == "" {
				version = v
			}
		}
	}
	return server, version
}
