package tairhash

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/windowstore/windowstore/internal/acldoc"
)

// TestACLRules: docs/acl.md's TairHash rule allows every command the scripts
// call, with event ids and distinct counts, and nothing they do not.
func TestACLRules(t *testing.T) {
	rules := acldoc.Parse(tair.ACLRules()...)
	if err := acldoc.Check(rules, "TairHash", []string{"event ids", "distinct counts", "leases"}, tair.Write, tair.Sum, tair.Inspect); err != nil {
		t.Error(err)
	}
}

// TestWriteForm pins the one write form that replicates correctly: EXHINCRBY
// with no TTL argument, then EXHPEXPIREAT with an absolute time, on every
// write; and no key-level expiry on a TairHash key (it crashed the module).
func TestWriteForm(t *testing.T) {
	src := tair.Write.Source()
	i := strings.Index(src, "local function ws_incr(")
	if i < 0 {
		t.Fatal("no ws_incr")
	}
	body := src[i : i+strings.Index(src[i:], "\nend\n")]
	incr := regexp.MustCompile(`redis\.call\('EXHINCRBY', key, B\.field, delta\)`)
	exp := regexp.MustCompile(`redis\.call\('EXHPEXPIREAT', key, B\.field, ws_expiry\(`)
	a, b := incr.FindStringIndex(body), exp.FindStringIndex(body)
	if a == nil || b == nil || a[0] > b[0] {
		t.Errorf("ws_incr is not EXHINCRBY (no TTL argument) then EXHPEXPIREAT (absolute):\n%s", body)
	}
	if strings.Contains(body, " if ") {
		t.Errorf("ws_incr sets the TTL on some writes only: EXHINCRBY clears it on every one:\n%s", body)
	}
	if n, m := strings.Count(src, "'EXHINCRBY'"), len(incr.FindAllString(src, -1)); n != m {
		t.Errorf("%d EXHINCRBY calls, %d of them without TTL arguments: PXAT, PX and KEEPTTL reach replicas wrong", n, m)
	}
	// No key-level expiry, and no native hash command, outside the distinct
	// counts (distinct.lua) and the leases (lease.lua), whose keys are core
	// Redis keys on every backend (HyperLogLogs and a native hash of them,
	// sorted sets), never TairHash keys.
	expiry := regexp.MustCompile(`redis\.call\('(?:PEXPIREAT|PEXPIRE|EXPIRE|EXPIREAT)'`)
	for i, line := range strings.Split(src, "\n") {
		if f, _ := tair.Write.Locate(i + 1); f != "backend/lua/distinct.lua" && f != "backend/lua/lease.lua" && expiry.MatchString(line) {
			t.Errorf("a key-level expiry outside the distinct counts: %s", strings.TrimSpace(line))
		}
	}
	if !slices.Contains(tair.Write.Commands(), "PEXPIREAT") {
		t.Error("the distinct counts' keys get no expiry: the check above checks nothing")
	}
	cmds := tair.Write.CommandsOutside("backend/lua/distinct.lua", "backend/lua/lease.lua")
	for _, bad := range []string{"HGETALL", "HINCRBY", "HSET", "HDEL"} {
		if slices.Contains(cmds, bad) {
			t.Errorf("the TairHash scripts call the native hash's %s", bad)
		}
	}
}

// TestSpec: the backend is its own family, with field TTLs and no reserved
// fields, and requires the two commands of its write.
func TestSpec(t *testing.T) {
	if tair.Name != "tairhash" || tair.Family != "tairhash" || !tair.FieldTTL || len(tair.Reserved) != 0 {
		t.Errorf("spec: %+v", tair.Spec)
	}
	if !slices.Equal(tair.Requires, []string{"exhincrby", "exhpexpireat"}) {
		t.Errorf("Requires = %v", tair.Requires)
	}
}
