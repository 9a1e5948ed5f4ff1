package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sample is three samples of perf script's text, shortened: a command called
// by a script, redis.call's conversion work, and a reply's write.
const sample = `redis-server 20519   622.040331:     200000 cpu-clock:ppp: 
	           72ce0 dictFind+0x70 (/usr/bin/redis-server)
	           9fa6f lookupKey+0x1f (/usr/bin/redis-server)
	           c79af hmgetCommand+0x1f (/usr/bin/redis-server)
	           791eb call+0xcb (/usr/bin/redis-server)
	          14b076 scriptCall+0x216 (/usr/bin/redis-server)
	          148d58 luaRedisGenericCommand+0xd8 (/usr/bin/redis-server)
	          1681a6 luaV_execute+0xda6 (/usr/bin/redis-server)
	          14a3cf luaCallFunction+0xdf (/usr/bin/redis-server)
	          14b686 fcallCommandGeneric+0xe6 (/usr/bin/redis-server)
	           791eb call+0xcb (/usr/bin/redis-server)
	           7bb7d processCommand+0x96d (/usr/bin/redis-server)
	           96a88 readQueryFromClient+0x2e8 (/usr/bin/redis-server)

redis-server 20519   622.046028:     200000 cpu-clock:ppp: 
	          164884 luaS_newlstr+0x84 (/usr/bin/redis-server)
	          147c9f luaGetFromRegistry+0xf (/usr/bin/redis-server)
	          148ca6 luaRedisGenericCommand+0x26 (/usr/bin/redis-server)
	          1681a6 luaV_execute+0xda6 (/usr/bin/redis-server)
	          14b686 fcallCommandGeneric+0xe6 (/usr/bin/redis-server)
	           791eb call+0xcb (/usr/bin/redis-server)
	           96a88 readQueryFromClient+0x2e8 (/usr/bin/redis-server)

redis-server 20519   622.042912:     200000 cpu-clock:ppp: 
	ffffffff8225f2d9 pvm_irq_enable+0x19 ([kernel.kallsyms])
	ffffffff81e7daeb sock_write_iter+0x18b ([kernel.kallsyms])
	           fde9d __GI___writev+0x4d (/usr/lib/x86_64-linux-gnu/libc.so.6)
	           8f44b writeToClient+0x4b (/usr/bin/redis-server)
	           742b2 beforeSleep+0xf2 (/usr/bin/redis-server)
`

func TestRead(t *testing.T) {
	p, err := read(strings.NewReader(sample))
	require.NoError(t, err)
	require.Equal(t, 3, p.total)
	require.Equal(t, map[string]int{catCommand: 1, catConvert: 1, catWrite: 1}, p.cats)
	require.Equal(t, map[string]int{"hmgetCommand": 1}, p.cmds)
	var b strings.Builder
	p.print(&b, 3)
	require.Contains(t, b.String(), " 33.3%    1.00 µs  "+catCommand)
	require.Contains(t, b.String(), "hmgetCommand")
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		stack []string
		cat   string
	}{
		{[]string{"luaH_get", "luaV_execute", "lua_pcall", "luaCallFunction", "call"}, catLua},
		{[]string{"sweeplist", "luaC_step", "luaV_execute", "lua_pcall"}, catGC},
		{[]string{"luaS_newlstr", "luaCreateArray", "fcallCommandGeneric", "call"}, catFcall},
		{[]string{"lookupCommand", "scriptCall", "luaRedisGenericCommand", "luaV_execute"}, catDispatch},
		{[]string{"hincrbyCommand", "call", "processCommand", "readQueryFromClient"}, catOther},
		{[]string{"processMultibulkBuffer", "processInputBuffer", "readQueryFromClient"}, catRead},
		{[]string{"epoll_wait", "aeProcessEvents"}, catLoop},
	} {
		got, _ := classify(c.stack)
		require.Equal(t, c.cat, got, "%v", c.stack)
	}
}
