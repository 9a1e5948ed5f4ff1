package backend

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func testBackend() *Backend {
	return New(Spec{
		Name: "test", Family: "test", Requires: []string{"hincrby"},
		Prims: []Fragment{{Name: "test/prims.lua", Src: "local WS_RESERVED = {}\nlocal function ws_read(key) return {} end\n"}},
		Ops:   []Fragment{ScanOps},
	})
}

// TestAssembly: every script is its fragments in order, each behind a marker,
// and Locate maps an assembled line back to the fragment's own file and line.
func TestAssembly(t *testing.T) {
	b := testBackend()
	for _, sc := range []*Script{b.Write, b.Sum, b.Inspect} {
		src := sc.Source()
		var files []string
		for i, line := range strings.Split(src, "\n") {
			f, ok := strings.CutPrefix(line, "-- @file ")
			if !ok {
				continue
			}
			files = append(files, f)
			if file, l := sc.Locate(i + 2); file != f || l != 1 {
				t.Errorf("%s: line %d is %s:%d, want %s:1", sc.Name(), i+2, file, l, f)
			}
		}
		want := []string{"backend/constants (generated)", "backend/lua/base.lua", "backend/lua/exact.lua", "backend/lua/live.lua",
			"test/prims.lua", "backend/lua/scan.lua", "backend/lua/decide.lua", "backend/lua/distinct.lua", "backend/lua/extreme.lua", "backend/lua/scanops.lua", "backend/lua/lease.lua", "backend/lua/event.lua"}
		if !slices.Equal(files[:len(want)], want) || len(files) != len(want)+1 {
			t.Errorf("%s: fragments %v", sc.Name(), files)
		}
		if file, _ := sc.Locate(1); file != "" {
			t.Errorf("a marker line maps to %s", file)
		}
	}
	if !b.Sum.ReadOnly() || !b.Inspect.ReadOnly() || b.Write.ReadOnly() {
		t.Fatal("read-only flags")
	}
}

// TestConstants: the op and error codes reach the Lua from Go, once.
func TestConstants(t *testing.T) {
	src := constants().Src
	for _, want := range []string{"local WS_OP_ADD = '" + OpAdd + "'", "local WS_E = {NOTCOUNTER = '" + CodeNotCounter + "', OVERFLOW = '" + CodeOverflow + "'",
		"PENDING = '" + CodePending + "'}", "local WS_HEADER = 2"} {
		if !strings.Contains(src, want) {
			t.Errorf("constants lack %q", want)
		}
	}
	// No Lua file spells a code out: they all use the constants.
	for _, name := range []string{"base.lua", "exact.lua", "live.lua", "scan.lua", "scanops.lua", "decide.lua", "event.lua", "write.lua", "sum.lua", "inspect.lua"} {
		b, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			t.Fatal(err)
		}
		for _, code := range []string{"'" + CodeOverflow + "'", "'" + CodeNotCounter + "'", "'" + OpAdd + "'"} {
			if strings.Contains(string(b), code) {
				t.Errorf("%s spells out %s", name, code)
			}
		}
	}
}

func TestScriptErrorParse(t *testing.T) {
	sc := testBackend().Write
	line := strings.Count(sc.Source()[:strings.Index(sc.Source(), "-- @file backend/lua/decide.lua")], "\n") + 5
	tests := []struct {
		raw             string
		code, msg, file string
		fileLine        int
		sha             bool
	}{
		{"WSOVERFLOW windowstore: the window sum would leave the int64 range; nothing was written", "WSOVERFLOW",
			"the window sum would leave the int64 range; nothing was written", "", 0, false},
		{"WRONGTYPE Operation against a key holding the wrong kind of value script: " + sc.SHA1() + ", on @user_script:" + strconv.Itoa(line) + ".",
			"WRONGTYPE", "Operation against a key holding the wrong kind of value", "backend/lua/decide.lua", 4, true},
		{"user_script:" + strconv.Itoa(line) + ": attempt to compare nil with number script: " + sc.SHA1() + ", on @user_script:" + strconv.Itoa(line) + ".",
			"ERR", "attempt to compare nil with number", "backend/lua/decide.lua", 4, true},
		{"NOPERM User u has no permissions to run the 'hset' command", "NOPERM", "User u has no permissions to run the 'hset' command", "", 0, false},
	}
	for _, tt := range tests {
		e := sc.parse(tt.raw)
		if e.Code != tt.code || e.Message != tt.msg || e.File != tt.file || e.Line != tt.fileLine || (e.SHA != "") != tt.sha {
			t.Errorf("parse(%q) = %+v", tt.raw, e)
		}
		if strings.Contains(e.Error(), "user_script") || strings.Contains(e.Error(), sc.SHA1()) {
			t.Errorf("%q leaks the script's location", e.Error())
		}
	}
}

func TestHeader(t *testing.T) {
	years := [5]int64{1, 2, 3, 4, 5}
	got := Header(ClientClock(42), years, 5000, "")
	if !slices.Equal(got, []string{"42", "1 2 3 4 5 5000"}) {
		t.Fatal(got)
	}
	var c HeaderCache
	a, b := c.Get(ServerClock, years, 5000, ""), c.Get(ServerClock, years, 5000, "")
	if &a[0] != &b[0] || !slices.Equal(a, Header(ServerClock, years, 5000, "")) {
		t.Fatal("server-clock headers are not shared")
	}
	if cl := c.Get(ClientClock(7), years, 5000, ""); cl[0] != "7" || &cl[0] == &a[0] || a[0] != "" {
		t.Fatal("a client-clock header changed the shared one")
	}
	if d := c.Get(ServerClock, [5]int64{2, 3, 4, 5, 6}, 5000, ""); &d[0] == &a[0] || d[1] != "2 3 4 5 6 5000" {
		t.Fatal("new years, same header")
	}
	if tr := c.Get(ServerClock, years, 5000, Trace("x", true)); tr[1] != "1 2 3 4 5 5000 gx" || Trace("x", false) != "tx" {
		t.Fatal("a trace", tr)
	}
	if Shape(1000, 60000) != "1000:60000" {
		t.Fatal(Shape(1000, 60000))
	}
}

// TestCommands: Commands finds every literal call, once, and flags one that
// is not a literal.
func TestCommands(t *testing.T) {
	s := NewScript("t", false, Fragment{Name: "t.lua", Src: "redis.call('HGET', k)\nredis.pcall( 'hset', k)\nredis.call('TIME')\nredis.call('HGET', k)\n"})
	if got := s.Commands(); !slices.Equal(got, []string{"HGET", "HSET", "TIME"}) {
		t.Errorf("Commands() = %v", got)
	}
	s = NewScript("t", false, Fragment{Name: "t.lua", Src: "local c = 'DEL'\nredis.call(c, k)\n"})
	if got := s.Commands(); !slices.Equal(got, []string{"?"}) {
		t.Errorf("a call by variable: Commands() = %v", got)
	}
	for _, sc := range []*Script{testBackend().Write, testBackend().Sum} {
		if slices.Contains(sc.Commands(), "?") {
			t.Errorf("%s calls a command that is not a literal", sc.Name())
		}
	}
}

// TestLuaBudget: the Lua of every backend and limiter together stays within
// 3,000 lines (one engine per backend: a fast path earns its lines).
func TestLuaBudget(t *testing.T) {
	lines := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "tools" || d.Name() == "tests") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".lua") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			lines += strings.Count(string(b), "\n")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lines < 1000 || lines > 3000 {
		t.Fatalf("%d lines of Lua, want at most 3,000 (and the walk to find them)", lines)
	}
	t.Logf("%d lines of Lua", lines)
}
