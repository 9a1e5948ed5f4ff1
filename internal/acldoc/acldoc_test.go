package acldoc_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/windowstore/windowstore/internal/acldoc"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/limitlua"
	_ "github.com/windowstore/windowstore/limit" // declares the limiters' rules
	_ "github.com/windowstore/windowstore/nativehash"
	_ "github.com/windowstore/windowstore/tairhash"
)

func TestParse(t *testing.T) {
	got := acldoc.Parse(backend.ACLRule{Label: "plain hash", Rule: "~ws:* -@all +hello +command|info"},
		backend.ACLRule{Label: "event ids", Rule: "+get +set"}, backend.ACLRule{Label: "event ids", Rule: "+other"})
	want := map[string][]string{"plain hash": {"HELLO", "COMMAND|INFO"}, "event ids": {"GET", "SET"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %v, want %v", got, want)
	}
}

func TestDoc(t *testing.T) {
	p := filepath.Join(t.TempDir(), "acl.md")
	doc := "# x\n\n**ACL.** The least:\n\n```\nplain hash:  ~ws:* -@all  +hello\nevent ids:   +get +set\n```\n"
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := acldoc.Doc(p)
	want := []backend.ACLRule{{Label: "plain hash", Rule: "~ws:* -@all +hello"}, {Label: "event ids", Rule: "+get +set"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Doc = %v, %v; want %v", got, err, want)
	}
	if _, err := acldoc.Doc(filepath.Join(t.TempDir(), "none.md")); err == nil {
		t.Error("a missing file: no error")
	}
}

// TestDocumented: docs/acl.md documents exactly the rules the packages
// declare, word for word (in any order): the declarations are the source,
// the document follows them.
func TestDocumented(t *testing.T) {
	doc, err := acldoc.Doc("../../docs/acl.md")
	if err != nil {
		t.Fatal(err)
	}
	var declared []backend.ACLRule
	for _, rs := range [][]backend.ACLRule{backend.Named(backend.NamePlain).ACLRules(), backend.Named(backend.NameFieldTTL).ACLRules(),
		backend.Named(backend.NameTairHash).ACLRules(), limitlua.ACL} {
		for _, r := range rs {
			if !slices.ContainsFunc(declared, func(d backend.ACLRule) bool { return d.Label == r.Label }) {
				declared = append(declared, r)
			}
		}
	}
	byLabel := func(a, b backend.ACLRule) int {
		if a.Label < b.Label {
			return -1
		}
		if a.Label > b.Label {
			return 1
		}
		return 0
	}
	slices.SortFunc(doc, byLabel)
	slices.SortFunc(declared, byLabel)
	if !reflect.DeepEqual(doc, declared) {
		t.Errorf("docs/acl.md documents\n%v\nthe packages declare\n%v", doc, declared)
	}
}
