package acldoc

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestRules(t *testing.T) {
	p := filepath.Join(t.TempDir(), "README.md")
	doc := "# x\n\n**ACL.** The least:\n\n```\nplain hash:  ~ws:* -@all +hello +command|info\nevent ids:   +get +set          distinct counts: +pfadd\n```\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Rules(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"plain hash": {"HELLO", "COMMAND|INFO"}, "event ids": {"GET", "SET"}, "distinct counts": {"PFADD"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Rules = %v, want %v", got, want)
	}
	if _, err := Rules(filepath.Join(t.TempDir(), "none.md")); err == nil {
		t.Error("a missing README: no error")
	}
}

// TestREADME: the project's docs/acl.md has the block, with every label the
// packages' tests look for.
func TestREADME(t *testing.T) {
	got, err := Rules("../../docs/acl.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"plain hash", "field TTL", "TairHash", "event ids", "distinct counts", "log", "fixed window", "gcra"} {
		if len(got[l]) == 0 {
			t.Errorf("no rules for %q in %v", l, got)
		}
	}
}
