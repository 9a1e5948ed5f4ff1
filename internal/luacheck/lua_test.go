package luacheck

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/limitlua"
	_ "github.com/windowstore/windowstore/nativehash"
	_ "github.com/windowstore/windowstore/tairhash"
	lua "github.com/yuin/gopher-lua"
)

var backends = []*backend.Backend{backend.Named(backend.NameTairHash), backend.Named(backend.NameFieldTTL), backend.Named(backend.NamePlain)}

func allScripts() []*backend.Script {
	var out []*backend.Script
	for _, b := range backends {
		out = append(out, b.Write, b.Sum, b.Inspect)
	}
	return append(out, limitlua.Scripts()...)
}

// TestCompile: every assembled script is valid Lua.
func TestCompile(t *testing.T) {
	for _, sc := range allScripts() {
		L := lua.NewState()
		if _, err := L.LoadString(sc.Source()); err != nil {
			t.Errorf("%s does not compile: %v", sc.Name(), err)
		}
		L.Close()
	}
}

var (
	nameRE    = regexp.MustCompile(`\b(?:ws|WS)_\w+`)
	declareRE = regexp.MustCompile(`(?m)^\s*local\s+(?:function\s+((?:ws|WS)_\w+)|((?:(?:ws|WS)_\w+\s*,\s*)*(?:ws|WS)_\w+)\s*=)`)
	commentRE = regexp.MustCompile(`--[^\n]*`)
)

// TestDeclared: every ws_ and WS_ name a script uses is declared as a local
// before its first use. A Lua local is visible only after its declaration: a
// name used before, or never declared (a primitive a backend forgot), would
// be a global and nil at run time, which compiling does not catch.
func TestDeclared(t *testing.T) {
	for _, sc := range allScripts() {
		src := commentRE.ReplaceAllString(sc.Source(), "")
		declared := map[string]int{}
		for _, m := range declareRE.FindAllStringSubmatchIndex(src, -1) {
			names := ""
			if m[2] >= 0 {
				names = src[m[2]:m[3]]
			} else {
				names = src[m[4]:m[5]]
			}
			for _, n := range strings.Split(names, ",") {
				n = strings.TrimSpace(n)
				if _, ok := declared[n]; !ok {
					declared[n] = m[0]
				}
			}
		}
		for _, m := range nameRE.FindAllStringIndex(src, -1) {
			n := src[m[0]:m[1]]
			at, ok := declared[n]
			if !ok {
				t.Errorf("%s uses %s, which it never declares", sc.Name(), n)
				declared[n] = -1
			} else if at > m[0] {
				t.Errorf("%s uses %s before it declares it", sc.Name(), n)
				declared[n] = -1
			}
		}
	}
}

// lib loads a backend's shared library (its Write script without the body)
// in a fresh interpreter whose redis.call answers TIME with serverMs, and
// returns the library's functions by name.
func lib(t *testing.T, b *backend.Backend, serverMs int64) (*lua.LState, *lua.LTable) {
	t.Helper()
	src := b.Write.Source()
	cut := strings.LastIndex(src[:strings.Index(src, "-- @file backend/lua/write.lua")], "local function ws_main()")
	names := []string{"ws_header", "ws_shape", "ws_start", "ws_target", "ws_plus", "ws_num", "ws_split", "ws_sign", "ws_fits", "ws_pair"}
	var exp []string
	for _, n := range names {
		exp = append(exp, n+" = "+n)
	}
	L := lua.NewState()
	t.Cleanup(L.Close)
	stub := fmt.Sprintf(`redis = {
  call = function(cmd) if cmd == 'TIME' then return {'%d', '%d'} end error('no server here: ' .. cmd) end,
  error_reply = function(msg) return {err = msg} end,
}
`, serverMs/1000, serverMs%1000*1000)
	if err := L.DoString(stub + src[:cut] + "\nreturn {" + strings.Join(exp, ", ") + "}"); err != nil {
		t.Fatal(err)
	}
	return L, L.Get(-1).(*lua.LTable)
}

func call(t *testing.T, L *lua.LState, fns *lua.LTable, name string, nret int, args ...lua.LValue) []lua.LValue {
	t.Helper()
	if err := L.CallByParam(lua.P{Fn: fns.RawGetString(name), NRet: nret, Protect: true}, args...); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	out := make([]lua.LValue, nret)
	for i := nret - 1; i >= 0; i-- {
		out[i] = L.Get(-1)
		L.Pop(1)
	}
	return out
}

func num(v lua.LValue) int64 { return int64(v.(lua.LNumber)) }

// TestLiveMatchesCodec checks the Lua's live buckets (live.lua) against
// codec.Live, whose own tests walk the calendar by brute force: at
// instants around year ends (after a leap year and not), on leap days, with
// buckets that do and do not divide the year, on the client's clock and on
// the server's.
func TestLiveMatchesCodec(t *testing.T) {
	L, fns := lib(t, backend.Named(backend.NamePlain), 0)
	rng := rand.New(rand.NewPCG(1, 2))
	anchors := []string{"2024-12-31T23:59:50Z", "2025-01-01T00:00:03Z", "2024-02-29T12:00:00Z", "2024-03-01T00:00:00Z",
		"2025-12-31T23:58:30Z", "2026-01-01T00:00:00Z", "2026-07-01T08:00:00Z", "2023-12-31T23:00:00Z"}
	shapes := []struct{ b, w time.Duration }{
		{time.Second, 10 * time.Second}, {7 * time.Second, 70 * time.Second}, {time.Minute, time.Hour},
		{time.Hour, 24 * time.Hour}, {10 * time.Minute, 3 * time.Hour}, {time.Millisecond, 5 * time.Millisecond},
		{24 * time.Hour, 30 * 24 * time.Hour}, {13 * time.Second, 13 * time.Second},
	}
	checked := 0
	for _, a := range anchors {
		base, _ := time.Parse(time.RFC3339, a)
		for _, sh := range shapes {
			cd, err := codec.New(sh.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 40; i++ {
				now := base.Add(time.Duration(rng.Int64N(int64(4*sh.w))) - 2*sh.w).Truncate(time.Millisecond)
				for _, future := range []int64{0, 5000} {
					hdr := backend.Header(backend.ClientClock(now.UnixMilli()), cd.YearStarts(now), future, "")
					tbl := L.NewTable()
					for _, h := range hdr {
						tbl.Append(lua.LString(h))
					}
					H := call(t, L, fns, "ws_header", 1, tbl)[0]
					S := call(t, L, fns, "ws_shape", 1, H, lua.LString(backend.Shape(sh.b.Milliseconds(), sh.w.Milliseconds())))[0].(*lua.LTable)
					get := func(k string) int64 { return num(S.RawGetString(k)) }
					live, err := cd.Live(now, sh.w)
					if err != nil {
						t.Fatal(err)
					}
					where := fmt.Sprintf("now %v, bucket %v, window %v, future %d", now, sh.b, sh.w, future)
					if get("c") != live.Code || get("lo") != live.Current.Lo || get("cstart") != live.Year+live.Code*live.BucketMs {
						t.Fatalf("%s: c %d lo %d cstart %d; codec %+v", where, get("c"), get("lo"), get("cstart"), live)
					}
					if live.Previous.Len() > 0 && (get("plo") != live.Previous.Lo || get("phi") != live.Previous.Hi) ||
						live.Previous.Len() == 0 && get("plo") <= get("phi") {
						t.Fatalf("%s: previous %d..%d; codec %+v", where, get("plo"), get("phi"), live.Previous)
					}
					_, _, end := cd.Bounds(now)
					if future == 0 && get("hi") != live.Code {
						t.Fatalf("%s: hi %d, want the current code %d", where, get("hi"), live.Code)
					}
					// Every code's start as the Lua maps it, against the codec's.
					for _, r := range []codec.Range{live.Current, live.Previous} {
						for k := r.Lo; k <= r.Hi && k < r.Lo+50; k++ {
							want, _ := live.StartOf(k)
							got := call(t, L, fns, "ws_start", 1, S, lua.LNumber(k))[0]
							if got == lua.LNil || num(got) != want {
								t.Fatalf("%s: code %d starts at %v, want %d", where, k, got, want)
							}
						}
					}
					// The oldest live bucket.
					oldest := live.Year + live.Current.Lo*live.BucketMs
					if live.Previous.Len() > 0 {
						oldest = live.PrevYear + live.Previous.Lo*live.BucketMs
					}
					if get("low") != oldest {
						t.Fatalf("%s: low %d, want %d", where, get("low"), oldest)
					}
					// Buckets up to the tolerance ahead are live, no further.
					if future > 0 {
						ahead := now.Add(time.Duration(future) * time.Millisecond)
						for at := end; !at.After(ahead); {
							code, start, next := cd.Bounds(at)
							got := call(t, L, fns, "ws_start", 1, S, lua.LNumber(code))[0]
							if got == lua.LNil || num(got) != start.UnixMilli() {
								t.Fatalf("%s: the bucket at %v (code %d) is not live ahead: %v", where, start, code, got)
							}
							at = next
						}
					}
					checked++
				}
			}
		}
	}
	t.Logf("%d instants checked", checked)
}

// interesting int64 values for the exact arithmetic.
func edgy(rng *rand.Rand) int64 {
	d := rng.Int64N(2001) - 1000
	switch rng.IntN(10) {
	case 0:
		return math.MaxInt64 - rng.Int64N(1000)
	case 1:
		return math.MinInt64 + rng.Int64N(1000)
	case 2:
		return 1<<53 + d
	case 3:
		return -(1 << 53) + d
	case 4:
		return 1<<62 + d
	case 5:
		return -(1 << 62) + d
	case 6:
		return d
	case 7:
		return int64(rng.Uint64())
	}
	return rng.Int64N(1<<54) - 1<<53
}

// asBig reads a sum as the scripts leave it: a double when exact, else a
// decimal string.
func asBig(t *testing.T, v lua.LValue) *big.Int {
	switch x := v.(type) {
	case lua.LNumber:
		f := float64(x)
		if f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			t.Fatalf("a number that is not an exact integer: %v", f)
		}
		return big.NewInt(int64(f))
	case lua.LString:
		n, ok := new(big.Int).SetString(string(x), 10)
		if !ok {
			t.Fatalf("not a decimal: %q", x)
		}
		return n
	}
	t.Fatalf("unexpected %T", v)
	return nil
}

// TestExactArithmetic checks ws_plus (and through it ws_split, ws_norm,
// ws_num, ws_fits) against math/big on a million random sums near the
// edges: exact in every case, a double only below 2^53, and the int64 check
// right.
func TestExactArithmetic(t *testing.T) {
	L, fns := lib(t, backend.Named(backend.NamePlain), 0)
	rng := rand.New(rand.NewPCG(7, 11))
	n := 200000
	if testing.Short() {
		n = 20000
	}
	for i := 0; i < n; i++ {
		a, d := edgy(rng), edgy(rng)
		var av lua.LValue = lua.LString(strconv.FormatInt(a, 10))
		if a < 1<<53 && a > -(1<<53) {
			av = lua.LNumber(a)
		}
		// a itself through ws_num, as a pair of halves.
		want := new(big.Int).Add(big.NewInt(a), big.NewInt(d))
		out := call(t, L, fns, "ws_plus", 2, av, lua.LString(strconv.FormatInt(d, 10)))
		if got := asBig(t, out[0]); got.Cmp(want) != 0 {
			t.Fatalf("%d + %d = %v, want %v", a, d, got, want)
		}
		if fits := out[1] == lua.LTrue; fits != (want.IsInt64()) {
			t.Fatalf("%d + %d: fits %v, want %v", a, d, fits, want.IsInt64())
		}
	}
}

// TestLibraries: each backend's Functions library, and the limiters', is valid Lua once its
// shebang line is off, and registering it defines one function per script,
// under the name FCALL uses, with the no-writes flag exactly on the read-only
// scripts (FCALL_RO refuses a function without it, and a replica runs only
// those).
func TestLibraries(t *testing.T) {
	type library struct {
		lib     *backend.Library
		scripts []*backend.Script
	}
	var libs []library
	for _, b := range backends {
		libs = append(libs, library{b.Library, []*backend.Script{b.Write, b.Sum, b.Inspect}})
	}
	limits := limitlua.Scripts()
	libs = append(libs, library{limits[0].Library(), limits})
	for _, l := range libs {
		lib := l.lib
		src := lib.Source()
		first, rest, ok := strings.Cut(src, "\n")
		if !ok || first != "#!lua name="+lib.Name() {
			t.Errorf("%s: first line %q, want the shebang with the library's name", lib.Name(), first)
			continue
		}
		L := lua.NewState()
		registered := map[string]bool{} // name -> has no-writes
		redis := L.NewTable()
		L.SetField(redis, "register_function", L.NewFunction(func(L *lua.LState) int {
			spec := L.CheckTable(1)
			name := lua.LVAsString(spec.RawGetString("function_name"))
			if _, ok := spec.RawGetString("callback").(*lua.LFunction); !ok {
				t.Errorf("%s: function %s has no callback", lib.Name(), name)
			}
			noWrites := false
			if flags, ok := spec.RawGetString("flags").(*lua.LTable); ok {
				flags.ForEach(func(_, v lua.LValue) { noWrites = noWrites || lua.LVAsString(v) == "no-writes" })
			}
			if _, dup := registered[name]; dup {
				t.Errorf("%s: function %s registered twice", lib.Name(), name)
			}
			registered[name] = noWrites
			return 0
		}))
		L.SetGlobal("redis", redis)
		// Keep the line numbers the server reports: the shebang line becomes
		// an empty one.
		if err := L.DoString("\n" + rest); err != nil {
			t.Errorf("%s does not load: %v", lib.Name(), err)
			L.Close()
			continue
		}
		L.Close()
		for _, sc := range l.scripts {
			noWrites, ok := registered[sc.Function()]
			switch {
			case sc.Function() == "":
				t.Errorf("%s: %s has no function name", lib.Name(), sc.Name())
			case !ok:
				t.Errorf("%s: %s's function %s is not registered", lib.Name(), sc.Name(), sc.Function())
			case noWrites != sc.ReadOnly():
				t.Errorf("%s: %s: no-writes flag %v, read-only %v", lib.Name(), sc.Name(), noWrites, sc.ReadOnly())
			}
			delete(registered, sc.Function())
		}
		for name := range registered {
			t.Errorf("%s: function %s belongs to no script", lib.Name(), name)
		}
	}
}
