package luacheck

import (
	"errors"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/limitlua"
	lua "github.com/yuin/gopher-lua"
)

// fakeRedis is just enough of a server for the scripts to walk their paths:
// strings, hashes (native and TairHash alike), HyperLogLogs as exact sets,
// and sorted sets (what the leases and the log limiter call of them). It is
// no proof that a backend
// works (the integration suite runs the scripts on real servers); it is
// here to record which keys each redis.call touches.
type fakeRedis struct {
	strs    map[string]string
	hashes  map[string]map[string]string
	ret     lua.LValue // what the last script returned
	hlls    map[string]map[string]bool
	zsets   map[string]map[string]float64
	touched []string
}

func newFake() *fakeRedis {
	return &fakeRedis{strs: map[string]string{}, hashes: map[string]map[string]string{}, hlls: map[string]map[string]bool{},
		zsets: map[string]map[string]float64{}}
}

// zmember is a sorted set's member and score.
type zmember struct {
	m string
	s float64
}

// zrange is the members of sorted set key whose scores are within min and
// max (Redis's bounds: "(" excludes, "-inf" and "+inf"), by score.
func (f *fakeRedis) zrange(key, min, max string) []zmember {
	in := func(bound string, s float64, low bool) bool {
		excl := strings.HasPrefix(bound, "(")
		b := strings.TrimPrefix(bound, "(")
		var v float64
		switch b {
		case "-inf":
			return low
		case "+inf":
			return !low
		default:
			v, _ = strconv.ParseFloat(b, 64)
		}
		if low {
			return s > v || !excl && s == v
		}
		return s < v || !excl && s == v
	}
	var out []zmember
	for m, sc := range f.zsets[key] {
		if in(min, sc, true) && in(max, sc, false) {
			out = append(out, zmember{m, sc})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].s < out[j].s || out[i].s == out[j].s && out[i].m < out[j].m })
	return out
}

// limitOf applies a "LIMIT off n" among args to ms.
func limitOf(ms []zmember, args []string) []zmember {
	for i := range args {
		if strings.ToUpper(args[i]) == "LIMIT" && i+2 < len(args) {
			off, _ := strconv.Atoi(args[i+1])
			n, _ := strconv.Atoi(args[i+2])
			if off >= len(ms) {
				return nil
			}
			ms = ms[off:]
			if n >= 0 && n < len(ms) {
				ms = ms[:n]
			}
		}
	}
	return ms
}

func (f *fakeRedis) hll(key string) (map[string]bool, bool) {
	h, ok := f.hlls[key]
	return h, ok
}

// union is the members of the HyperLogLogs at keys (missing ones are empty).
func (f *fakeRedis) union(keys []string) map[string]bool {
	u := map[string]bool{}
	for _, k := range keys {
		h, _ := f.hll(k)
		for m := range h {
			u[m] = true
		}
	}
	return u
}

func (f *fakeRedis) del(key string) bool {
	_, a := f.strs[key]
	_, b := f.hashes[key]
	_, c := f.hlls[key]
	delete(f.strs, key)
	delete(f.hashes, key)
	_, d := f.zsets[key]
	delete(f.hlls, key)
	delete(f.zsets, key)
	return a || b || c || d
}

func (f *fakeRedis) hash(key string) map[string]string {
	h := f.hashes[key]
	if h == nil {
		h = map[string]string{}
		f.hashes[key] = h
	}
	return h
}

// keysOf returns the key arguments of a command.
func keysOf(cmd string, args []string) []string {
	switch cmd {
	case "TIME":
		return nil
	case "DEL", "PFCOUNT", "PFMERGE", "EXISTS", "MGET":
		return args
	}
	if len(args) == 0 {
		return nil
	}
	return args[:1]
}

func (f *fakeRedis) call(L *lua.LState, nowMs int64) int {
	cmd := strings.ToUpper(L.CheckString(1))
	var args []string
	for i := 2; i <= L.GetTop(); i++ {
		args = append(args, lua.LVAsString(L.Get(i)))
	}
	f.touched = append(f.touched, keysOf(cmd, args)...)
	str := func(s string) lua.LValue { return lua.LString(s) }
	tbl := func(vs ...lua.LValue) *lua.LTable {
		t := L.NewTable()
		for _, v := range vs {
			t.Append(v)
		}
		return t
	}
	n := func(v int) lua.LValue { return lua.LNumber(v) }
	switch cmd {
	case "TIME":
		L.Push(tbl(str(strconv.FormatInt(nowMs/1000, 10)), str(strconv.FormatInt(nowMs%1000*1000, 10))))
	case "GET":
		if s, ok := f.strs[args[0]]; ok {
			L.Push(str(s))
		} else {
			L.Push(lua.LFalse)
		}
	case "MGET":
		t := L.NewTable()
		for _, k := range args {
			if s, ok := f.strs[k]; ok {
				t.Append(str(s))
			} else {
				t.Append(lua.LFalse)
			}
		}
		L.Push(t)
	case "GETRANGE": // (of a HyperLogLog: its magic)
		switch {
		case f.hlls[args[0]] != nil:
			L.Push(str("HYLL"))
		case f.strs[args[0]] != "":
			L.Push(str(f.strs[args[0]][:min(4, len(f.strs[args[0]]))]))
		default:
			L.Push(str(""))
		}
	case "SET":
		f.del(args[0])
		f.strs[args[0]] = args[1]
		ok := L.NewTable()
		ok.RawSetString("ok", str("OK"))
		L.Push(ok)
	case "DEL":
		c := 0
		for _, k := range args {
			if f.del(k) {
				c++
			}
		}
		L.Push(n(c))
	case "EXISTS":
		L.Push(n(0))
	case "PEXPIREAT", "EXHPEXPIREAT":
		L.Push(n(1))
	case "HPEXPIREAT":
		L.Push(tbl(n(1)))
	case "PTTL", "EXHPTTL":
		L.Push(n(-1))
	case "HPTTL":
		t := L.NewTable()
		for range args[3:] {
			t.Append(n(-1))
		}
		L.Push(t)
	case "HGET", "EXHGET":
		if v, ok := f.hashes[args[0]][args[1]]; ok {
			L.Push(str(v))
		} else {
			L.Push(lua.LFalse)
		}
	case "HMGET":
		t := L.NewTable()
		for _, fl := range args[1:] {
			if v, ok := f.hashes[args[0]][fl]; ok {
				t.Append(str(v))
			} else {
				t.Append(lua.LFalse)
			}
		}
		L.Push(t)
	case "HSET", "EXHSET":
		h := f.hash(args[0])
		for i := 1; i+1 < len(args); i += 2 {
			h[args[i]] = args[i+1]
		}
		L.Push(n(1))
	case "HDEL", "EXHDEL":
		for _, fl := range args[1:] {
			delete(f.hashes[args[0]], fl)
		}
		L.Push(n(1))
	case "HGETALL", "EXHGETALL":
		t := L.NewTable()
		h := f.hashes[args[0]]
		var fs []string
		for k := range h {
			fs = append(fs, k)
		}
		sort.Strings(fs)
		for _, k := range fs {
			t.Append(str(k))
			t.Append(str(h[k]))
		}
		L.Push(t)
	case "HINCRBY", "EXHINCRBY":
		h := f.hash(args[0])
		a, _ := strconv.ParseInt(h[args[1]], 10, 64)
		d, _ := strconv.ParseInt(args[2], 10, 64)
		h[args[1]] = strconv.FormatInt(a+d, 10)
		L.Push(lua.LNumber(a + d))
	case "PFADD":
		h, ok := f.hll(args[0])
		if !ok {
			h = map[string]bool{}
			f.del(args[0])
			f.hlls[args[0]] = h
		}
		changed := !ok
		for _, m := range args[1:] {
			changed = changed || !h[m]
			h[m] = true
		}
		if changed {
			L.Push(n(1))
		} else {
			L.Push(n(0))
		}
	case "PFMERGE":
		u := f.union(args)
		f.del(args[0])
		f.hlls[args[0]] = u
		ok := L.NewTable()
		ok.RawSetString("ok", str("OK"))
		L.Push(ok)
	case "PFCOUNT":
		L.Push(n(len(f.union(args))))
	case "ZADD":
		z := f.zsets[args[0]]
		if z == nil {
			f.del(args[0])
			z = map[string]float64{}
			f.zsets[args[0]] = z
		}
		added := 0
		for i := 1; i+1 < len(args); i += 2 {
			if _, ok := z[args[i+1]]; !ok {
				added++
			}
			z[args[i+1]], _ = strconv.ParseFloat(args[i], 64)
		}
		L.Push(n(added))
	case "ZSCORE":
		if sc, ok := f.zsets[args[0]][args[1]]; ok {
			L.Push(str(strconv.FormatFloat(sc, 'f', -1, 64)))
		} else {
			L.Push(lua.LFalse)
		}
	case "ZREM":
		c := 0
		for _, m := range args[1:] {
			if _, ok := f.zsets[args[0]][m]; ok {
				delete(f.zsets[args[0]], m)
				c++
			}
		}
		L.Push(n(c))
	case "ZCOUNT":
		L.Push(n(len(f.zrange(args[0], args[1], args[2]))))
	case "ZREMRANGEBYSCORE":
		ms := f.zrange(args[0], args[1], args[2])
		for _, m := range ms {
			delete(f.zsets[args[0]], m.m)
		}
		L.Push(n(len(ms)))
	case "ZRANGEBYSCORE", "ZRANGE":
		var ms []zmember
		byScore := cmd == "ZRANGEBYSCORE"
		for _, a := range args[3:] {
			byScore = byScore || strings.ToUpper(a) == "BYSCORE"
		}
		if byScore {
			ms = limitOf(f.zrange(args[0], args[1], args[2]), args[3:])
		} else { // by index; negative counts from the end
			all := f.zrange(args[0], "-inf", "+inf")
			a, _ := strconv.Atoi(args[1])
			b, _ := strconv.Atoi(args[2])
			if a < 0 {
				a += len(all)
			}
			if b < 0 {
				b += len(all)
			}
			for i := max(a, 0); i <= b && i < len(all); i++ {
				ms = append(ms, all[i])
			}
		}
		t := L.NewTable()
		scores := false
		for _, a := range args[3:] {
			scores = scores || strings.ToUpper(a) == "WITHSCORES"
		}
		for _, m := range ms {
			t.Append(str(m.m))
			if scores {
				t.Append(str(strconv.FormatFloat(m.s, 'f', -1, 64)))
			}
		}
		L.Push(t)
	default:
		L.RaiseError("the fake has no %s", cmd)
	}
	return 1
}

// maxScriptAlloc bounds what one script call may allocate here, compiling
// the script included (a few MB): a table indexed by a bucket code (up to 31
// million for one-second buckets, near a year's end, where TestKeysDeclared
// runs) costs gopher-lua 16 bytes per code below it, hundreds of MB.
const maxScriptAlloc = 64 << 20

// run runs a script's source as EVALSHA would, with keys and args, at
// serverMs; it returns the keys its redis.calls touched that it did not
// declare, and the script's error.
func (f *fakeRedis) run(t *testing.T, sc *backend.Script, serverMs int64, keys, args []string) ([]string, error) {
	t.Helper()
	L := lua.NewState()
	defer L.Close()
	redis := L.NewTable()
	L.SetField(redis, "call", L.NewFunction(func(L *lua.LState) int { return f.call(L, serverMs) }))
	L.SetField(redis, "pcall", L.NewFunction(func(L *lua.LState) int { return f.call(L, serverMs) }))
	L.SetField(redis, "error_reply", L.NewFunction(func(L *lua.LState) int {
		e := L.NewTable()
		e.RawSetString("err", L.Get(1))
		L.Push(e)
		return 1
	}))
	L.SetGlobal("redis", redis)
	setStruct(L)
	kt, at := L.NewTable(), L.NewTable()
	for _, k := range keys {
		kt.Append(lua.LString(k))
	}
	for _, a := range args {
		at.Append(lua.LString(a))
	}
	L.SetGlobal("KEYS", kt)
	L.SetGlobal("ARGV", at)
	f.touched = nil
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := L.DoString(sc.Source())
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > maxScriptAlloc {
		t.Errorf("a script call allocated %d MB: gopher-lua (miniredis, the demo's server) fills a table's array "+
			"with nils up to a positive integer key below 2^26, such as a bucket code: key such tables otherwise", d>>20)
	}
	f.ret = nil
	if err == nil {
		f.ret = L.Get(-1)
	}
	declared := map[string]bool{}
	for _, k := range keys {
		declared[k] = true
	}
	var bad []string
	for _, k := range f.touched {
		if !declared[k] {
			bad = append(bad, k)
		}
	}
	return bad, err
}

// TestKeysDeclared runs every script of every backend, and the limiters',
// through the paths that touch keys (adds and their sweeps, limits that
// admit and refuse, groups with ids, late events and distinct counts across
// bucket changes, distinct counts over a shorter span, leases taken with a
// limit, refreshed, released and taken back by a refused link, sums,
// Inspect) and
// checks that every key a redis.call touches was declared in KEYS: Redis's
// contract for scripts, which a cluster relies on while a slot migrates.
func TestKeysDeclared(t *testing.T) {
	const bucket, window, future = 1000, 10000, 2000
	shape := backend.Shape(bucket, window)
	code, err := codec.New(time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	dk := func(k string) []string { // as store's distinctKeys: the hash, the union, the ring
		keys := []string{k + ":d", k + ":d:u"}
		for j := range window/bucket + 3 + future/bucket {
			keys = append(keys, k+":d:r"+strconv.Itoa(j))
		}
		return keys
	}
	shape2, shape3 := backend.Shape(2*bucket, 3*window), backend.Shape(10*bucket, 10*window)
	for _, b := range backends {
		f := newFake()
		// c lists counters' keys as store's counterKeys gives them: with a
		// backend that keeps heads, each counter's hash and a head (here
		// one per counter, but {u}'s three windows share one).
		c := func(ks ...string) []string {
			if !b.Head {
				return ks
			}
			var out []string
			for _, k := range ks {
				h := k + ":hd"
				if strings.HasPrefix(k, "{u}") {
					h = "{u}:hd"
				}
				out = append(out, k+":b", h)
			}
			return out
		}
		cat := func(parts ...[]string) []string {
			var out []string
			for _, p := range parts {
				out = append(out, p...)
			}
			return out
		}
		t0 := time.Date(2025, 12, 31, 23, 59, 55, 300e6, time.UTC) // across a year end
		for step := 0; step < 40; step++ {
			at := t0.Add(time.Duration(step) * 700 * time.Millisecond)
			ms := at.UnixMilli()
			hdr := backend.Header(backend.ServerClock, code.YearStarts(at), future, "")
			if step%2 == 1 {
				hdr = backend.Header(backend.ClientClock(ms), code.YearStarts(at), future, "")
			}
			late := strconv.FormatInt(ms-3000, 10)
			calls := []struct {
				name string
				sc   *backend.Script
				keys []string
				args []string
			}{
				{"add", b.Write, c("{a}"), []string{backend.OpAdd, shape, "5"}},
				{"add no sum", b.Write, c("{a}"), []string{backend.OpAddNoSum, shape, "-2"}},
				{"allow", b.Write, c("{b}"), []string{backend.OpAllow, shape, "3", "1"}},
				{"three windows of one key", b.Write, c("{u}:1", "{u}:2", "{u}:3"), // one head
					[]string{backend.OpGroup, "3", "", "20000", "", backend.ItemLimit, shape, "100", "1",
						backend.ItemLimit, shape2, "100", "1", backend.ItemLimit, shape3, strconv.Itoa(step % 4), "1"}},
				{"a list of limits", b.Write, c("{u}:1", "{u}:2"), // two of the three windows, as one list
					[]string{backend.OpLimits, shape + " 100 1 " + shape2 + " " + strconv.Itoa(step%4) + " 1"}},
				{"tiers of one key", b.Write, c("{u}:1", "{u}:2", "{u}:3"),
					[]string{backend.OpGroup, "3", "", "20000", late, backend.ItemCount, shape, "1",
						backend.ItemCount, shape2, "1", backend.ItemQuiet, shape3, "-1"}},
				{"group", b.Write,
					cat([]string{"{e}:id:" + strconv.Itoa(step%3)}, c("{e}:c", "{e}:l"), dk("{e}:h"), c("{e}:r")),
					[]string{backend.OpGroup, "4", "id" + strconv.Itoa(step%3), "20000", "",
						backend.ItemCount, shape, "2", backend.ItemLimit, shape, "4", "1",
						backend.ItemDistinct, shape, "2", "m" + strconv.Itoa(step%7), "n" + strconv.Itoa(step%5), backend.ItemRead, shape}},
				{"record batch", b.Write, cat(c("{p}:c", "{p}:l"), dk("{p}:h")), // the fast group (no id, no time)
					[]string{backend.OpGroup, "3", "", "20000", "", backend.ItemCount, shape, "2", backend.ItemLimit, shape, "4", "1",
						backend.ItemDistinct, shape, "2", "m" + strconv.Itoa(step%7), "n" + strconv.Itoa(step%5)}},
				{"record batch with id", b.Write, cat([]string{"{p}:id:" + strconv.Itoa(step%3)}, c("{p}:c", "{p}:l"), dk("{p}:h")),
					[]string{backend.OpGroup, "3", "id" + strconv.Itoa(step%3), "2000", "", backend.ItemCount, shape, "1",
						backend.ItemLimit, shape, "6", "1", backend.ItemDistinct, shape, "1", "i" + strconv.Itoa(step%4)}},
				{"record batch with statistics", b.Write, cat(c("{p}:c"), []string{"{p}:max", "{p}:last", "{p}:recent"}, dk("{p}:h")),
					[]string{backend.OpGroup, "5", "", "20000", "", backend.ItemCount, shape, "1",
						backend.ItemExtreme, shape, backend.XMax, strconv.Itoa(step % 9), backend.ItemExtreme, shape, backend.XMax, "",
						backend.ItemExtreme, shape, backend.XRecent, strconv.Itoa(step), backend.ItemDistinct, shape, "1", "s" + strconv.Itoa(step%4)}},
				{"late group", b.Write, cat(c("{e}:c"), dk("{e}:h")),
					[]string{backend.OpGroup, "2", "", "20000", late, backend.ItemCount, shape, "1",
						backend.ItemDistinct, shape, "1", "late" + strconv.Itoa(step)}},
				{"link", b.Write, cat([]string{"{f}:id:x" + strconv.Itoa(step)}, c("{f}:l", "{f}:k", "{g}:l")),
					[]string{backend.OpLink, "2", "2", "x" + strconv.Itoa(step), "20000", "",
						backend.ItemLimit, shape, "10", "1", backend.ItemIfOK, shape, "1",
						"1", "", "20000", "", backend.ItemLimit, shape, "0", "1"}},
				{"link of limits", b.Write, c("{q}:a", "{q}:b", "{r}:c", "{a}"), // the fast link, then an add
					[]string{backend.OpLink, "2", "2", "", "20000", "", backend.ItemLimit, shape, "10", "1", backend.ItemLimit, shape, "8", "2",
						"1", "", "20000", "", backend.ItemLimit, shape, strconv.Itoa(step % 3), "1", backend.OpAdd, shape, "1"}},
				{"link of fast groups", b.Write, c("{s}:c", "{s}:l", "{t}:l"), // counts and limits, no id
					[]string{backend.OpLink, "2", "2", "", "20000", "", backend.ItemCount, shape, "1", backend.ItemLimit, shape, "10", "1",
						"1", "", "20000", "", backend.ItemLimit, shape, strconv.Itoa(step % 3), "1"}},
				{"check", b.Write, cat([]string{"{h}:id:y" + strconv.Itoa(step)}, c("{h}:l", "{h}:c"), dk("{h}:d")),
					[]string{backend.OpCheck, "3", "y" + strconv.Itoa(step), "20000", "",
						backend.ItemLimit, shape, "10", "1", backend.ItemCount, shape, "1", backend.ItemDistinct, shape, "1", "m"}},
				{"reserve", b.Write, cat([]string{"{h}:id:y" + strconv.Itoa(step)}, c("{h}:l", "{h}:c")),
					[]string{backend.OpReserve, "n" + strconv.Itoa(step), "2", "y" + strconv.Itoa(step), "20000", "",
						backend.ItemLimit, shape, "10", "1", backend.ItemCount, shape, "1"}},
				{"undo", b.Write, cat([]string{"{h}:id:y" + strconv.Itoa(step)}, c("{h}:l", "{h}:c")),
					[]string{backend.OpUndo, "n" + strconv.Itoa(step), "2", "y" + strconv.Itoa(step), "20000", "",
						backend.ItemLimit, shape, "10", "1", backend.ItemCount, shape, "1"}},
				{"lease and limit", b.Write, cat([]string{"{k}:lease"}, c("{k}:l")),
					[]string{backend.OpGroup, "2", "", "20000", "", backend.ItemAcquire, "2", "60000", "id" + strconv.Itoa(step%4),
						backend.ItemLimit, shape, "100", "1"}},
				{"refresh", b.Write, []string{"{k}:lease"},
					[]string{backend.OpGroup, "1", "", "20000", "", backend.ItemRefresh, "2", "60000", "id" + strconv.Itoa(step%4)}},
				{"release", b.Write, []string{"{k}:lease"},
					[]string{backend.OpGroup, "1", "", "20000", "", backend.ItemRelease, "2", "60000", "id" + strconv.Itoa((step+1)%4)}},
				{"lease link", b.Write, cat([]string{"{m}:id:z" + strconv.Itoa(step), "{m}:lease"}, c("{m}:c", "{n}:l")),
					[]string{backend.OpLink, "2", "2", "z" + strconv.Itoa(step), "20000", "",
						backend.ItemAcquire, "1", "60000", "lz" + strconv.Itoa(step), backend.ItemCount, shape, "1",
						"1", "", "20000", "", backend.ItemLimit, shape, strconv.Itoa(step % 2), "1"}},
				{"distinct read", b.Write, dk("{e}:h"), []string{backend.OpGroup, "1", "", "20000", "", backend.ItemDistinct, shape, "0"}},
				{"add distinct", b.Write, dk("{e}:h"), []string{backend.OpDAdd, shape, "2", "a" + strconv.Itoa(step%7), "b" + strconv.Itoa(step%3)}},
				{"count", b.Write, dk("{e}:h"), []string{backend.OpDCount, shape, "10000"}},
				{"count over 3s", b.Write, dk("{e}:h"), []string{backend.OpDCount, shape, "3000"}},
				{"batch", b.Write, cat(c("{a}", "{b}"), dk("{e}:h")),
					[]string{backend.OpAdd, shape, "1", backend.OpAllow, shape, "100", "2", backend.OpDCount, shape, "10000"}},
				{"batch of adds", b.Write, cat(c("{a}"), dk("{e}:h"), dk("{f}:h")),
					[]string{backend.OpAdd, shape, "1", backend.OpDAdd, shape, "1", "m" + strconv.Itoa(step%5), backend.OpDAdd, shape, "1", "n"}},
				{"max", b.Write, []string{"{x}:max"}, []string{backend.OpGroup, "1", "", "20000", "", backend.ItemExtreme, shape, backend.XMax, strconv.Itoa(step % 9)}},
				{"late first", b.Write, []string{"{x}:first"}, []string{backend.OpGroup, "1", "", "20000", late, backend.ItemExtreme, shape, backend.XMin, ""}},
				{"sum", b.Sum, c("{a}", "{b}"), []string{shape, "10000", shape, "4000"}},
				{"sums of one key", b.Sum, c("{u}:1", "{u}:2", "{u}:3"), []string{shape, "10000", shape2, "30000", shape3, "20000"}},
				{"read extremes", b.Sum, []string{"{x}:max", "{x}:first"}, []string{shape, backend.XMax, shape, backend.XMin}},
				{"a run of sums", b.Sum, c("{a}", "{b}", "{u}:1"), []string{"*2", shape, "10000", shape, "10000"}},
				{"a run of extremes", b.Sum, []string{"{x}:max", "{x}:max"}, []string{"*2", shape, backend.XMax}},
				{"inspect", b.Inspect, c("{a}"), []string{shape}},
			}
			for _, c := range calls {
				bad, err := f.run(t, c.sc, ms, c.keys, append(append([]string(nil), hdr...), c.args...))
				if err != nil {
					t.Fatalf("%s %s at %v: %v", b.Name, c.name, at, err)
				}
				if len(bad) > 0 {
					t.Errorf("%s %s at %v: touched undeclared keys %v (declared %v)", b.Name, c.name, at, bad, c.keys)
				}
			}
		}
		if len(f.zsets["{k}:lease"]) == 0 {
			t.Fatalf("%s: no lease is held: the test walks no lease path", b.Name)
		}
		if len(f.hlls) == 0 || len(f.hashes) == 0 {
			t.Fatalf("%s: the scripts wrote nothing: the test walks no path", b.Name)
		}
		if _, ok := f.strs["{u}:hd"]; b.Head && !ok {
			t.Fatalf("%s: no head was written for {u}'s windows", b.Name)
		}
		if _, ok := f.hashes["{f}:h:d"]; !ok {
			t.Fatalf("%s: the batch's second distinct add wrote nothing under its own keys", b.Name)
		}
	}
	for _, sc := range limitlua.Scripts() {
		f := newFake()
		if strings.Contains(sc.Name(), "windows") {
			// Three windows (1 s x 3, 2 s x 3, 10 s x 2) of limits 4, 6
			// and 2^51, for two keys in one call: marks that move,
			// refusals that walk, and costs of 2^50 that rebase.
			keys := []string{"{w}:n", "{w}:n:2", "{w}:n:3", "{v}:n", "{v}:n:2", "{v}:n:3"}
			var big int64 // the big costs admitted for {w}
			for step := 0; step < 120; step++ {
				ms := 1767225600000 + int64(step)*450
				cost, lim := strconv.Itoa(step%3), "4"
				if step >= 60 {
					ms += int64(step-60) * 1050
					cost, lim = strconv.FormatInt(1<<50, 10), strconv.FormatInt(1<<51, 10)
				}
				args := []string{strconv.FormatInt(ms, 10), "5000", "3", "1000", "3", lim, "m1", "v1", "2000", "3", lim, "m2", "v2",
					"10000", "2", lim, "m3", "v3", cost, "1"}
				if step < 60 {
					args[10] = "6"
				}
				bad, err := f.run(t, sc, ms, keys, args)
				if err != nil {
					t.Fatalf("%s step %d: %v", sc.Name(), step, err)
				}
				if len(bad) > 0 {
					t.Errorf("%s: touched undeclared keys %v", sc.Name(), bad)
				}
				res, ok := f.ret.(*lua.LTable)
				if !ok || res.Len() != 2 {
					t.Fatalf("%s step %d: replied %v", sc.Name(), step, f.ret)
				}
				for i := 1; i <= 2; i++ {
					r, ok := res.RawGetInt(i).(*lua.LTable)
					if !ok || r.RawGetString("err") != lua.LNil {
						t.Fatalf("%s step %d: operation %d replied %v", sc.Name(), step, i, lua.LVAsString(r.RawGetString("err")))
					}
					if i == 1 && step >= 60 && r.RawGetInt(1) == lua.LNumber(1) {
						big++
					}
				}
			}
			if g, _ := strconv.ParseFloat(f.hashes["{w}:n"]["g"], 64); big*(1<<50) <= 1<<52 || g > 1<<52 {
				t.Fatalf("%s: %d costs of 2^50 admitted, and the running total is %v: no rebase was walked", sc.Name(), big, g)
			}
			continue
		}
		for _, args := range [][]string{{"", "1000", "5", "1", "nonce"}, {"1767225600000", "1000", "5", "1", "nonce"}} {
			if strings.Contains(sc.Name(), "gcra") {
				args = []string{args[0], "1000", "5", "5", "1"}
			}
			bad, err := f.run(t, sc, 1767225600000, []string{"{l}"}, args)
			if err != nil {
				t.Fatalf("%s: %v", sc.Name(), err)
			}
			if len(bad) > 0 {
				t.Errorf("%s: touched undeclared keys %v", sc.Name(), bad)
			}
		}
	}
}

// oneWindow is a window of 10 s in buckets of 1 s, an instant, and a call's
// header at that instant on the server's clock.
func oneWindow(t *testing.T) (shape string, at time.Time, hdr []string) {
	at = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	code, err := codec.New(time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	return backend.Shape(1000, 10000), at, backend.Header(backend.ServerClock, code.YearStarts(at), 2000, "")
}

// errReply is the message of the error reply a script raised (redis.error_reply),
// or "" when err is not one.
func errReply(err error) string {
	var ae *lua.ApiError
	if errors.As(err, &ae) {
		if e, ok := ae.Object.(*lua.LTable); ok {
			return lua.LVAsString(e.RawGetString("err"))
		}
	}
	return ""
}

// TestLimitsListMalformed: a list of limits (backend.OpLimits) that is not
// "shape limit cost ..." fails the call with WSARGS and writes nothing, on
// every backend; after another operation, it ends the call's batch.
func TestLimitsListMalformed(t *testing.T) {
	shape, at, hdr := oneWindow(t)
	for _, b := range backends {
		keys := []string{"{u}:1", "{u}:2"}
		if b.Head {
			keys = []string{"{u}:1:b", "{u}:hd", "{u}:2:b", "{u}:hd"}
		}
		for _, list := range []string{"", shape, shape + " 5", shape + " x 1", shape + " 5 1 " + shape, shape + " 5 1e", "  "} {
			f := newFake()
			_, err := f.run(t, b.Write, at.UnixMilli(), keys, append(append([]string(nil), hdr...), backend.OpLimits, list))
			msg := errReply(err)
			if !strings.HasPrefix(msg, backend.CodeArgs+" ") {
				t.Errorf("%s: list %q: %v (%q), want a %s error", b.Name, list, err, msg, backend.CodeArgs)
			}
			if len(f.hashes)+len(f.strs) > 0 {
				t.Errorf("%s: list %q wrote %v %v", b.Name, list, f.hashes, f.strs)
			}
		}
		// After an add, in one call: the add keeps its answer, the list
		// answers its error and ends the batch (the next add never runs),
		// and the call itself does not fail, so that no caller whose
		// operation wrote is told that it failed.
		f := newFake()
		args := append(append([]string(nil), hdr...), backend.OpAdd, shape, "5", backend.OpLimits, shape+" 5", backend.OpAdd, shape, "7")
		if _, err := f.run(t, b.Write, at.UnixMilli(), keys, args); err != nil {
			t.Errorf("%s: the call failed: %v", b.Name, err)
			continue
		}
		out, ok := f.ret.(*lua.LTable)
		if !ok {
			t.Errorf("%s: reply %v", b.Name, f.ret)
			continue
		}
		if out.Len() != 4 || lua.LVAsString(out.RawGetInt(1)) != "1" || lua.LVAsString(out.RawGetInt(2)) != "5" ||
			lua.LVAsString(out.RawGetInt(3)) != "-1" {
			t.Errorf("%s: reply of %d values: %v %v %v, want the add's sum 5, then -1 and an error", b.Name, out.Len(),
				out.RawGetInt(1), out.RawGetInt(2), out.RawGetInt(3))
		}
		if e, ok := out.RawGetInt(4).(*lua.LTable); !ok || !strings.HasPrefix(lua.LVAsString(e.RawGetString("err")), backend.CodeArgs+" ") {
			t.Errorf("%s: the malformed operation's answer %v, want a %s error", b.Name, out.RawGetInt(4), backend.CodeArgs)
		}
	}
}

// TestHeaderMalformed: a header (backend.Header) that is not a clock and
// "y1 y2 y3 y4 y5 future[ trace]" fails every script's call with WSARGS and
// writes nothing, on every backend.
func TestHeaderMalformed(t *testing.T) {
	shape, at, hdr := oneWindow(t)
	years := strings.Fields(hdr[1])
	for _, b := range backends {
		keys := []string{"{u}:1"}
		if b.Head {
			keys = []string{"{u}:1:b", "{u}:hd"}
		}
		for _, h := range [][]string{{"", ""}, {"", strings.Join(years[:5], " ")}, {"", strings.Join(years[:5], " ") + " x"},
			{"", "a " + strings.Join(years[1:], " ")}, {"x", hdr[1]}, {""}} {
			for _, sc := range []*backend.Script{b.Write, b.Sum, b.Inspect} {
				f := newFake()
				args := append(append([]string(nil), h...), backend.OpAdd, shape, "5")
				if sc != b.Write {
					args = append(append([]string(nil), h...), shape, "0")
				}
				_, err := f.run(t, sc, at.UnixMilli(), keys, args)
				msg := errReply(err)
				if !strings.HasPrefix(msg, backend.CodeArgs+" ") {
					t.Errorf("%s %s: header %q: %v (%q), want a %s error", b.Name, sc.Name(), h, err, msg, backend.CodeArgs)
				}
				if len(f.hashes)+len(f.strs) > 0 {
					t.Errorf("%s %s: header %q wrote %v %v", b.Name, sc.Name(), h, f.hashes, f.strs)
				}
			}
		}
	}
}

// TestSumRunsAnswer: the Sum script reads a run ("*r" before a pair) as r
// counters or extremes over the keys that follow one another, and the pair
// after a run over the keys after the run's, on every backend: each key
// answers its own value.
func TestSumRunsAnswer(t *testing.T) {
	shape, at, hdr := oneWindow(t)
	for _, b := range backends {
		f := newFake()
		ck := func(k string) []string {
			if b.Head {
				return []string{k + ":b", k + ":hd"}
			}
			return []string{k}
		}
		var keys, want []string
		for i, k := range []string{"{a}", "{b}", "{c}"} { // counters of 1, 2, 3
			if _, err := f.run(t, b.Write, at.UnixMilli(), ck(k), append(append([]string(nil), hdr...), backend.OpAdd, shape, strconv.Itoa(i+1))); err != nil {
				t.Fatal(b.Name, err)
			}
		}
		for i, k := range []string{"{x}", "{y}", "{z}"} { // maxima of 7, 8, 9
			args := append(append([]string(nil), hdr...), backend.OpGroup, "1", "", "20000", "", backend.ItemExtreme, shape, backend.XMax, strconv.Itoa(7+i))
			if _, err := f.run(t, b.Write, at.UnixMilli(), []string{k}, args); err != nil {
				t.Fatal(b.Name, err)
			}
		}
		args := append([]string(nil), hdr...)
		// {x} {y} as a run of maxima, {a} {b} as a run of sums, {z}, then {c}.
		args = append(args, "*2", shape, backend.XMax, "*2", shape, "10000", shape, backend.XMax, shape, "10000")
		keys = append(append(append(append([]string{"{x}", "{y}"}, ck("{a}")...), ck("{b}")...), "{z}"), ck("{c}")...)
		want = []string{"7", "8", "1", "2", "9", "3"}
		if _, err := f.run(t, b.Sum, at.UnixMilli(), keys, args); err != nil {
			t.Fatal(b.Name, err)
		}
		out, ok := f.ret.(*lua.LTable)
		var got []string
		for i := 1; ok && i <= out.Len(); i++ {
			v := out.RawGetInt(i)
			if x, ok := v.(*lua.LTable); ok { // an extreme: its value first
				v = x.RawGetInt(1)
			}
			got = append(got, lua.LVAsString(v))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: answers %q, want %q", b.Name, got, want)
		}
	}
}

// TestWriteRunsAnswer: the Write script reads a run ("*r" before an
// operation) as r operations over the keys that follow one another, each
// answering on its own, and the operation after a run over the keys after
// the run's, on every backend.
func TestWriteRunsAnswer(t *testing.T) {
	shape, at, hdr := oneWindow(t)
	for _, b := range backends {
		f := newFake()
		ck := func(ks ...string) []string {
			var out []string
			for _, k := range ks {
				if b.Head {
					out = append(out, k+":b", k+":hd")
				} else {
					out = append(out, k)
				}
			}
			return out
		}
		args := append(append([]string(nil), hdr...), "*2", backend.OpAdd, shape, "1", backend.OpAdd, shape, "5", "*3", backend.OpAdd, shape, "3")
		if _, err := f.run(t, b.Write, at.UnixMilli(), ck("{a}", "{b}", "{c}", "{a}", "{x}", "{c}"), args); err != nil {
			t.Fatal(b.Name, err)
		}
		out, ok := f.ret.(*lua.LTable)
		var got []string
		for i := 1; ok && i <= out.Len(); i++ {
			got = append(got, lua.LVAsString(out.RawGetInt(i)))
		}
		want := []string{"1", "1", "1", "1", "1", "5", "1", "4", "1", "3", "1", "8"}
		if !slices.Equal(got, want) {
			t.Errorf("%s: answers %q, want %q", b.Name, got, want)
		}
	}
}
