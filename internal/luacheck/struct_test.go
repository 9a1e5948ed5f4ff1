package luacheck

import (
	"encoding/binary"
	"math"
	"strings"

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
