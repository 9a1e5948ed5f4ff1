// Package luacheck runs windowstore's Lua without a server, in gopher-lua (a
// Lua 5.1 interpreter in Go, with doubles for numbers as Redis's Lua has): it
// compiles every assembled script, and checks the shared Lua's arithmetic and
// live buckets against the Go code and math/big. It is a module of its own so
// that the library's module depends on rueidis alone.
//
// It proves the Lua's logic, not that a backend works on a server: the
// integration suite (tests/) does that on real servers.
package luacheck
