package luacheck

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// setStruct gives L the part of Redis's struct library the scripts use:
// struct.pack and struct.unpack of little-endian doubles ("<ddd..."), as the
// plain hash's heads are packed. struct.unpack takes a start position and
// answers the values, then the position after them, as Redis's does.
func setStruct(L *lua.LState) {
	count := func(L *lua.LState, f string) int {
		if !strings.HasPrefix(f, "<") || strings.Trim(f[1:], "d") != "" {
			L.RaiseError("the fake struct library has no format %q", f)
		}
		return len(f) - 1
	}
	st := L.NewTable()
	L.SetField(st, "pack", L.NewFunction(func(L *lua.LState) int {
		n := count(L, L.CheckString(1))
		b := make([]byte, 8*n)
		for i := range n {
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(float64(L.CheckNumber(2+i))))
		}
		L.Push(lua.LString(b))
		return 1
	}))
	L.SetField(st, "unpack", L.NewFunction(func(L *lua.LState) int {
		n := count(L, L.CheckString(1))
		s := L.CheckString(2)
		pos := L.OptInt(3, 1) - 1
		if pos < 0 || len(s)-pos < 8*n {
			L.RaiseError("bad argument #2 to 'unpack' (data string too short)")
		}
		for i := range n {
			L.Push(lua.LNumber(math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[pos+8*i:])))))
		}
		L.Push(lua.LNumber(pos + 8*n + 1))
		return n + 1
	}))
	L.SetGlobal("struct", st)
}

// TestLuaPack checks the plain hash's packing in Lua (nativehash/lua/pack.lua),
// which a server without the struct library (the demo's embedded miniredis)
// runs: for finite doubles of every kind (integers up to 2^53 and beyond,
// Unix ms, zero of either sign, fractions, subnormals, the largest), it
// makes the bytes Go's encoding does, and reads them back to the same bits,
// one number or many at a position. With a struct library, the fragment
// takes the library's functions.
func TestLuaPack(t *testing.T) {
	src, err := os.ReadFile("../../nativehash/lua/pack.lua")
	if err != nil {
		t.Fatal(err)
	}
	// load runs the fragment in L and answers a function that answers its
	// ws_pack and ws_unpack as they are now (the first call settles them).
	load := func(L *lua.LState) lua.LValue {
		if err := L.DoString(string(src) + "\nreturn function() return ws_pack, ws_unpack end"); err != nil {
			t.Fatal(err)
		}
		get := L.Get(-1)
		L.Pop(1)
		return get
	}
	L := lua.NewState()
	defer L.Close()
	get := load(L)
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, -0.1, 3, 255, 256, 65535, 1 << 31, 1<<32 + 1,
		1735732806000, -1735732806000, 1<<53 - 1, -(1<<53 - 1), 1 << 53, 1<<53 + 2, 1 << 62, -(1 << 63),
		math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 2.2250738585072014e-308, 2.225073858507201e-308,
		math.MaxFloat64, -math.MaxFloat64, math.Pi, 1e-300}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		switch rng.IntN(3) {
		case 0:
			vals = append(vals, float64(rng.Int64N(1<<54)-1<<53))
		case 1:
			vals = append(vals, float64(rng.Int64N(1<<20)-1<<19))
		default:
			f := math.Float64frombits(rng.Uint64())
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				vals = append(vals, f)
			}
		}
	}
	call := func(L *lua.LState, fn lua.LValue, nret int, args ...lua.LValue) []lua.LValue {
		t.Helper()
		if err := L.CallByParam(lua.P{Fn: fn, NRet: nret, Protect: true}, args...); err != nil {
			t.Fatal(err)
		}
		out := make([]lua.LValue, nret)
		for i := range nret {
			out[i] = L.Get(-nret + i)
		}
		L.Pop(nret)
		return out
	}
	first := call(L, get, 2)
	call(L, first[0], 1, lua.LString("<d"), lua.LNumber(1)) // settles them
	fns := call(L, get, 2)
	pack, unpack := fns[0], fns[1]
	if pack == first[0] {
		t.Fatal("the first call did not settle ws_pack")
	}
	for _, v := range vals {
		want := make([]byte, 8)
		binary.LittleEndian.PutUint64(want, math.Float64bits(v))
		got := call(L, pack, 1, lua.LString("<d"), lua.LNumber(v))[0].String()
		if got != string(want) {
			t.Fatalf("pack %v (%#x): % x, want % x", v, math.Float64bits(v), got, want)
		}
		back := call(L, unpack, 2, lua.LString("<d"), lua.LString(got))
		if b := math.Float64bits(float64(back[0].(lua.LNumber))); b != math.Float64bits(v) || back[1] != lua.LNumber(9) {
			t.Fatalf("unpack of %v: %#x, position %v", v, b, back[1])
		}
	}
	// Many at once, from a position.
	args := []lua.LValue{lua.LString("<" + strings.Repeat("d", 6))}
	var want []byte
	for _, v := range vals[:6] {
		args = append(args, lua.LNumber(v))
		want = binary.LittleEndian.AppendUint64(want, math.Float64bits(v))
	}
	got := call(L, pack, 1, args...)[0].String()
	if got != string(want) {
		t.Fatalf("pack of six: % x, want % x", got, want)
	}
	back := call(L, unpack, 5, lua.LString("<dddd"), lua.LString("xyz"+got), lua.LNumber(12))
	for i, v := range vals[1:5] {
		if math.Float64bits(float64(back[i].(lua.LNumber))) != math.Float64bits(v) {
			t.Fatalf("unpack at 12: number %d is %v, want %v", i, back[i], v)
		}
	}
	if back[4] != lua.LNumber(44) {
		t.Fatalf("unpack at 12: position %v, want 44", back[4])
	}
	// With the server's library, the fragment takes it.
	S := lua.NewState()
	defer S.Close()
	setStruct(S)
	getS := load(S)
	call(S, call(S, getS, 2)[1], 2, lua.LString("<d"), lua.LString("12345678"))
	fns = call(S, getS, 2)
	st := S.GetGlobal("struct").(*lua.LTable)
	if fns[0] != S.GetField(st, "pack") || fns[1] != S.GetField(st, "unpack") {
		t.Fatal("pack.lua does not take the server's struct library")
	}
}
