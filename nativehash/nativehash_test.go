package nativehash

import (
	"slices"
	"strings"
	"testing"

	"github.com/windowstore/windowstore/internal/acldoc"
	"github.com/windowstore/windowstore/internal/backend"
)

// TestACLRules: docs/acl.md's ACL rule for each mode allows every command its
// scripts call, with event ids and distinct counts, and nothing they do not.
func TestACLRules(t *testing.T) {
	rules := acldoc.Parse(append(plain.ACLRules(), fieldTTL.ACLRules()...)...)
	for label, b := range map[string]*backend.Backend{"plain hash": plain, "field TTL": fieldTTL} {
		if err := acldoc.Check(rules, label, []string{"event ids", "distinct counts", "leases"}, b.Write, b.Sum, b.Inspect); err != nil {
			t.Error(err)
		}
	}
}

// TestFieldTTLWrites: the field-TTL mode never HSETs a counter (HSET clears a
// field's TTL), sets every bucket's TTL with an absolute time (HPEXPIREAT: a
// relative one would drift with the script's clock), and has no reserved
// fields. (The distinct counts' hash of HyperLogLogs has no field TTLs: it is
// left out; so is a window extreme's write, fieldttlx.lua, which HSETs and
// then sets the field's TTL again, checked by TestFieldTTLExtremeTTL.)
func TestFieldTTLWrites(t *testing.T) {
	cmds := fieldTTL.Write.CommandsOutside("backend/lua/distinct.lua", "backend/lua/lease.lua", "nativehash/lua/fieldttlx.lua")
	for _, bad := range []string{"HSET", "HSETEX", "HPEXPIRE", "HEXPIRE", "HINCRBYFLOAT"} {
		if slices.Contains(cmds, bad) {
			t.Errorf("the field-TTL write script calls %s", bad)
		}
	}
	if !slices.Contains(cmds, "HPEXPIREAT") || !slices.Contains(cmds, "HINCRBY") {
		t.Errorf("the field-TTL write script lacks HINCRBY or HPEXPIREAT: %v", cmds)
	}
	if len(fieldTTL.Reserved) != 0 || !fieldTTL.FieldTTL {
		t.Errorf("FieldTTL spec: %+v", fieldTTL.Spec)
	}
}

// TestPlainCommitOrder: the plain mode's commit writes m, t and the bucket in
// one HSET before it deletes anything, so that a write refused at the HSET
// (OOM) leaves the running total as it was; and m and t are its reserved
// fields, which the shared scan skips.
func TestPlainCommitOrder(t *testing.T) {
	src := plain.Write.Source()
	i := strings.Index(src, "local function ws_commit(")
	if i < 0 {
		t.Fatal("no ws_commit in the plain write script")
	}
	body := src[i:]
	body = body[:strings.Index(body, "\nend\n")]
	hset, drop := strings.Index(body, "'HSET'"), strings.Index(body, "ws_drop(")
	if hset < 0 || drop < 0 || hset > drop {
		t.Errorf("ws_commit: HSET at %d, ws_drop at %d:\n%s", hset, drop, body)
	}
	if !slices.Equal(plain.Reserved, []string{"m", "t"}) || plain.FieldTTL {
		t.Errorf("Plain spec: %+v", plain.Spec)
	}
	for _, f := range []string{"m", "t"} {
		if !plain.IsReserved(f) {
			t.Errorf("%s is not reserved", f)
		}
	}
	if plain.IsReserved("0") {
		t.Error("a bucket code is reserved")
	}
}

// TestSpecs: the two modes are one family, under names of their own.
func TestSpecs(t *testing.T) {
	if plain.Name == fieldTTL.Name || plain.Family != "nativehash" || fieldTTL.Family != "nativehash" {
		t.Errorf("names %q %q, families %q %q", plain.Name, fieldTTL.Name, plain.Family, fieldTTL.Family)
	}
}

// TestFieldTTLExtremeTTL: a window extreme's write on the field-TTL mode
// HSETs (which clears the field's TTL) and then sets the TTL again, in the
// same function. (tests/stat_test.go checks the TTL on a real server.)
func TestFieldTTLExtremeTTL(t *testing.T) {
	src := fieldTTL.Write.Source()
	body := func(fn string) string {
		i := strings.Index(src, "local function "+fn+"(")
		if i < 0 {
			t.Fatalf("no %s in the field-TTL write script", fn)
		}
		b := src[i:]
		return b[:strings.Index(b, "\nend\n")]
	}
	set, expire := body("ws_setx"), body("ws_fieldexpire")
	if h, e := strings.Index(set, "'HSET'"), strings.Index(set, "ws_fieldexpire(L, key, B)"); h < 0 || e < h {
		t.Errorf("ws_setx must HSET, then set the field's TTL again:\n%s", set)
	}
	if !strings.Contains(expire, "'HPEXPIREAT', key, at, 'FIELDS', 1, B.field") {
		t.Errorf("ws_fieldexpire must set the field's TTL:\n%s", expire)
	}
}
