package luaprof

import (
	"strings"
	"testing"

	"github.com/windowstore/windowstore/internal/backend"
	_ "github.com/windowstore/windowstore/nativehash" // (registers the backends)
)

// TestPatch: the hooked copy of a real library keeps every line's number
// (one line appended), hooks each of its functions, and locate maps its
// lines to the files the library itself says (backend.Library.Locate).
func TestPatch(t *testing.T) {
	lib := backend.Named("nativehash-plain").Library
	src := lib.Source()
	lines, ok := patch(lib.Name(), src)
	if !ok {
		t.Fatal("no KEYS and ARGV line found")
	}
	orig := strings.Split(src, "\n")
	if len(lines) != len(orig)+1 {
		t.Fatalf("%d lines, want %d and one", len(lines), len(orig))
	}
	hooked := 0
	for i, l := range lines[:len(orig)] {
		if strings.Contains(l, "debug.sethook(ws__hook") {
			hooked++
		}
		if !strings.HasPrefix(l, orig[i]) && !strings.Contains(orig[i], "ws_main_") {
			t.Fatalf("line %d changed: %q", i+1, l)
		}
	}
	if want := strings.Count(src, "redis.register_function"); hooked != want || want < 3 {
		t.Fatalf("%d functions hooked, want %d", hooked, want)
	}
	for _, ln := range []int{40, len(orig) / 3, len(orig) / 2, len(orig) - 40} {
		wf, wl := lib.Locate(ln)
		f, l := locate(lines, ln)
		if f != wf || l != wl {
			t.Errorf("line %d: located at %s:%d, the library says %s:%d", ln, f, l, wf, wl)
		}
	}
}
