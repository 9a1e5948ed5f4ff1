package store

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/windowstore/windowstore/internal/backend"
)

// TestRegistry: every backend has a unique name, declares what it requires,
// and its Lua defines every primitive and operation the shared scripts call
// (see package backend).
func TestRegistry(t *testing.T) {
	names := map[string]bool{}
	prims := []string{"WS_RESERVED", "ws_read", "ws_drop", "ws_ttls"}
	ops := []string{"ws_open", "ws_prepare", "ws_commit", "ws_quiet", "ws_quietcommit", "ws_detail", "ws_sumover"}
	for _, b := range registry {
		if names[b.Name] || b.Name == "" || b.Family == "" || len(b.Requires) == 0 || b.Why == "" {
			t.Errorf("backend %+v: a name, a family, its requirements and a reason, please", b.Spec)
		}
		names[b.Name] = true
		src := func(frags []backend.Fragment) string {
			var s strings.Builder
			for _, f := range frags {
				s.WriteString(f.Src)
			}
			return s.String()
		}
		for _, name := range prims {
			if !defines(src(b.Prims), name) {
				t.Errorf("%s: its Prims do not define %s", b.Name, name)
			}
		}
		if slices.ContainsFunc(b.Ops, func(f backend.Fragment) bool { return f.Name == backend.ScanOps.Name }) {
			for _, name := range []string{"ws_incr", "ws_get"} {
				if !defines(src(b.Prims), name) {
					t.Errorf("%s: its Prims do not define %s, which ScanOps calls", b.Name, name)
				}
			}
		}
		for _, name := range ops {
			if !defines(src(b.Ops), name) {
				t.Errorf("%s: its Ops do not define %s", b.Name, name)
			}
		}
		for _, r := range b.Reserved {
			if !strings.Contains(src(b.Prims), r+" = true") {
				t.Errorf("%s: reserved field %s is not in WS_RESERVED", b.Name, r)
			}
		}
	}
	last := registry[len(registry)-1]
	if len(last.Requires) != 1 || last.Requires[0] != "hincrby" {
		t.Errorf("the last backend (%s) must work on any server", last.Name)
	}
}

func defines(src, name string) bool {
	return regexp.MustCompile(`(?m)^local (function )?([a-z_, ]*\b)?` + name + `\b`).MatchString(src)
}

func TestBackends(t *testing.T) {
	got := backendList()
	if got != "auto, tairhash, nativehash, nativehash-fieldttl, nativehash-plain" {
		t.Fatal(got)
	}
}
