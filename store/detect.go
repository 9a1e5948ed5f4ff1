package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	_ "github.com/windowstore/windowstore/nativehash" // registers its backends
	_ "github.com/windowstore/windowstore/tairhash"   // registers its backend
)

// registry lists every backend, best first: "auto" picks the first one whose
// commands the server has. The last one must work on any server: it is the
// choice when the server will not say what it has. Adding a backend is one
// package of its own and one line here.
var registry = []*backend.Backend{
	backend.Named(BackendTairHash),
	backend.Named(BackendFieldTTL),
	backend.Named(BackendPlain),
}

// Backends returns every name WithBackend accepts: "auto", then each backend
// family and each backend, best first.
func Backends() []string {
	out := []string{"auto"}
	for _, b := range registry {
		if !slices.Contains(out, b.Family) {
			out = append(out, b.Family)
		}
		if !slices.Contains(out, b.Name) {
			out = append(out, b.Name)
		}
	}
	return out
}

// backendList is Backends as text: "auto, tairhash, nativehash, ...".
func backendList() string {
	var names []string
	for _, b := range Backends() {
		names = append(names, string(b))
	}
	return strings.Join(names, ", ")
}

// Detection is what New learned about a server, and the backend it picked.
type Detection struct {
	Backend   string   // the backend's name, such as "nativehash-plain"
	Family    string   // its family, such as "nativehash"
	FieldTTL  bool     // buckets expire on their own (hash-field TTL or TairHash)
	Server    string   // "redis", "valkey", or what INFO calls itself
	Version   string   // the server's version string, for display only
	Modules   []string // loaded modules, from MODULE LIST; nil where it is refused
	Available []string // the backends the server has, best first
	Reason    string   // why this backend, in one sentence

	have  map[string]bool // commands the server has
	blind bool            // the server would not say (COMMAND INFO refused)
	notes string
}

func isServerErr(err error) bool {
	_, ok := rueidis.IsRedisErr(err)
	return ok
}

// requirements lists every command some backend requires, once.
func requirements() []string {
	var cmds []string
	for _, b := range registry {
		for _, c := range b.Requires {
			if !slices.Contains(cmds, c) {
				cmds = append(cmds, c)
			}
		}
	}
	return cmds
}

// detect asks the server what it offers, in one round trip: INFO server, MODULE
// LIST, and COMMAND INFO for the commands the backends require. It decides by
// capability, never by version string, and picks as "auto" does.
func detect(ctx context.Context, c rueidis.Client) (Detection, error) {
	cmds := requirements()
	res := c.DoMulti(ctx,
		c.B().Info().Section("server").Build(),
		c.B().CommandInfo().CommandName(cmds...).Build(),
		c.B().ModuleList().Build(),
	)
	d := Detection{have: map[string]bool{}}
	// A server that answers with an error (an ACL that denies INFO or COMMAND,
	// a proxy that lacks them) still gets a backend: the last of the registry
	// works everywhere. A network error is returned.
	var notes []string
	info, err := res[0].ToString()
	if err != nil && !isServerErr(err) {
		return d, &Error{Op: "detect", Detail: "INFO: " + err.Error(), Err: err}
	}
	d.Server, d.Version = parseInfo(info)
	caps, err := res[1].ToArray()
	if err != nil {
		if !isServerErr(err) {
			return d, &Error{Op: "detect", Detail: "COMMAND INFO: " + err.Error(), Err: err}
		}
		d.blind = true
		notes = append(notes, "COMMAND INFO was refused ("+err.Error()+"), so no capability could be seen")
	}
	for i, cmd := range cmds {
		d.have[cmd] = i < len(caps) && !caps[i].IsNil()
	}
	if mods, err := res[2].ToArray(); err == nil {
		d.Modules = []string{}
		for _, m := range mods {
			if kv, err := m.AsStrMap(); err == nil {
				d.Modules = append(d.Modules, kv["name"])
			}
		}
	} else if !isServerErr(err) {
		return d, &Error{Op: "detect", Detail: "MODULE LIST: " + err.Error(), Err: err}
	}
	d.notes = strings.Join(notes, "; ")
	for _, b := range registry {
		if d.has(b) {
			d.Available = append(d.Available, b.Name)
		}
	}
	if _, err := d.pick("auto"); err != nil {
		return d, err
	}
	return d, nil
}

// has reports whether the server has every command b requires.
func (d *Detection) has(b *backend.Backend) bool {
	if d.blind {
		return b == registry[len(registry)-1]
	}
	for _, c := range b.Requires {
		if !d.have[c] {
			return false
		}
	}
	return true
}

// pick sets Backend, Family, FieldTTL and Reason for a choice, or reports
// that the server lacks it.
func (d *Detection) pick(want string) (*backend.Backend, error) {
	if want == "" {
		want = "auto"
	}
	known := false
	var passed []string // the better backends the server lacks, and what for
	for _, b := range registry {
		if want != "auto" && want != b.Family && want != b.Name {
			continue
		}
		known = true
		if !d.has(b) {
			passed = append(passed, b.Name+" needs "+d.missing(b.Name))
			continue
		}
		why := b.Why
		if want != "auto" {
			why = want + " was asked for; " + why
		}
		if len(passed) > 0 && !d.blind {
			why += "; the server lacks the better ones (" + strings.Join(passed, "; ") + ")"
		}
		if d.notes != "" {
			why += " (" + d.notes + ")"
		}
		d.Backend, d.Family, d.FieldTTL, d.Reason = b.Name, b.Family, b.FieldTTL, why
		return b, nil
	}
	if !known {
		return nil, &Error{Op: "new", Kind: ErrInvalid, Detail: fmt.Sprintf("unknown backend %q (want %s)", want, backendList())}
	}
	return nil, &Error{Op: "new", Kind: ErrUnavailable, Detail: fmt.Sprintf("%s: the server lacks %s", want, d.missing(want))}
}

// missing names the commands the server lacks for a backend or family.
func (d *Detection) missing(want string) string {
	var lack []string
	for _, b := range registry {
		if want != b.Family && want != b.Name {
			continue
		}
		for _, c := range b.Requires {
			if !d.have[c] && !slices.Contains(lack, strings.ToUpper(c)) {
				lack = append(lack, strings.ToUpper(c))
			}
		}
	}
	if d.blind || len(lack) == 0 {
		return "what it needs (COMMAND INFO was refused)"
	}
	return strings.Join(lack, ", ")
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
