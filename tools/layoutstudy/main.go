// Command layoutstudy measures, before the store's layout is changed, what
// issue 23's one-hash layout would cost the server: every window of a key in
// one hash (a field prefix per window, a running-total pair per window), so
// that an Allow of several policies on one key is one HMGET and one HSET
// whatever the number of windows. It runs, in one invocation and against
// one server: the store's Allow and AllowAll of 3 policies on one key (today's
// layout: a hash per window), and a prototype script of the one-hash layout
// for 1 and for 3 windows; and the floors of both layouts (floorOne,
// floorSep: no Lua beyond one read and one write of each window's running
// total and bucket) and of a prefix-sum layout (floorCum: one field written
// whatever the number of windows), beside a script that only answers. It
// prints server CPU per operation (INFO cpu), medians of --runs runs with
// their range, and the ratios that issue 23's first target is stated in.
//
// Every operation runs one unmeasured round first. --ops names the
// operations to run, among them a prototype with no sweep at all (ring1,
// ring3: see ringHead) beside the ZSET log (zsetlog), the naive script
// (naive) and the script that only answers (noop). It prints each one's
// operations per key and second (its pace) and the ratios between them.
//
// The prototype is a lower bound, not the design: its bucket codes are
// absolute bucket indices (no year-stripping), its sums are doubles (no
// exact path past 2^53), and a counter idle past 32 buckets of a window is
// reset rather than rebuilt. Those paths are off the hot path measured here,
// which is otherwise the store's: the running total of each window read with
// its current bucket, the buckets that left swept by a second HMGET, one
// HSET, one HDEL, and an expiry when a bucket is new.
//
//	go run ./tools/layoutstudy --addr 127.0.0.1:6379 --buckets 10 --runs 3
//	go run ./tools/layoutstudy --addr 127.0.0.1:6379 --ops allow,allow3,ring1,ring3,zsetlog,naive,noop
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/baseline"
	"github.com/windowstore/windowstore/internal/figures/render"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tools/internal/serverstat"
)

// oneHash is the prototype. KEYS[1]: the key's hash. ARGV[1]: the number of
// windows n; then per window its field prefix, bucket ms, window ms, limit
// and cost. It admits when every window's sum plus its cost is within its
// limit, and then counts the cost in every window; it answers {allowed, the
// first window's sum}.
var oneHash = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n, key = tonumber(ARGV[1]), KEYS[1]
local W, fields = {}, {}
for j = 1, n do
  local a = 1 + (j - 1) * 5
  local p, b, w = ARGV[a + 1], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local c = math.floor(now / b)
  local cf = p .. string.format('%d', c)
  W[j] = {p = p, b = b, w = w, c = c, cf = cf, low = (math.floor((now - w) / b) + 1) * b,
    limit = tonumber(ARGV[a + 4]), cost = tonumber(ARGV[a + 5]), sum = 0, cur = 0, synced = false}
  fields[3 * j - 2], fields[3 * j - 1], fields[3 * j] = p .. 'm', p .. 't', cf
end
local v = redis.call('HMGET', key, unpack(fields))
local dead, deadw = {}, {}
for j = 1, n do
  local X = W[j]
  local m, tt = tonumber(v[3 * j - 2]), tonumber(v[3 * j - 1])
  X.cur = tonumber(v[3 * j]) or 0
  X.new = not v[3 * j]
  if m ~= nil and tt ~= nil and m <= X.low and (X.low - m) / X.b <= 32 then
    X.sum, X.synced = tt, m == X.low
    for s = m, X.low - X.b, X.b do
      dead[#dead + 1] = X.p .. string.format('%d', s / X.b)
      deadw[#deadw + 1] = j
    end
  end
end
if #dead > 0 then
  local dv = redis.call('HMGET', key, unpack(dead))
  for i = 1, #dead do
    if dv[i] then
      local X = W[deadw[i]]
      X.sum = X.sum - tonumber(dv[i])
    end
  end
end
for j = 1, n do
  if W[j].sum + W[j].cost > W[j].limit then return {0, W[1].sum} end
end
local set, ns, new, far = {}, 0, false, 0
for j = 1, n do
  local X = W[j]
  set[ns + 1], set[ns + 2], set[ns + 3], set[ns + 4] = X.p .. 't', string.format('%d', X.sum + X.cost),
    X.cf, string.format('%d', X.cur + X.cost)
  ns = ns + 4
  if not X.synced then
    set[ns + 1], set[ns + 2] = X.p .. 'm', string.format('%d', X.low)
    ns = ns + 2
  end
  if X.new then new = true end
  if X.w + X.b > far then far = X.w + X.b end
end
redis.call('HSET', key, unpack(set))
if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end
if new then redis.call('PEXPIRE', key, far) end
return {1, W[1].sum + W[1].cost}
`)

// The floor scripts: what a window costs the server with no Lua beyond
// reading its running total and current bucket and writing them back (no
// sweep, no exactness, no expiry). floorOne keeps the n windows in one hash
// (KEYS[1]; ARGV: n, then per window its field prefix and bucket ms): one
// HMGET of 3n fields, one HSET of 2n. floorSep keeps each window in a hash of
// its own (KEYS[1..n]; ARGV: per window its bucket ms): n of each. They
// bound from below what any layout of these fields can reach.
var floorOne = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n, get, cf = tonumber(ARGV[1]), {}, {}
for j = 1, n do
  local p, b = ARGV[2 * j], tonumber(ARGV[2 * j + 1])
  cf[j] = p .. string.format('%d', math.floor(now / b))
  get[3 * j - 2], get[3 * j - 1], get[3 * j] = p .. 'm', p .. 't', cf[j]
end
local v = redis.call('HMGET', KEYS[1], unpack(get))
local set = {}
for j = 1, n do
  set[4 * j - 3], set[4 * j - 2] = ARGV[2 * j] .. 't', (tonumber(v[3 * j - 1]) or 0) + 1
  set[4 * j - 1], set[4 * j] = cf[j], (tonumber(v[3 * j]) or 0) + 1
end
redis.call('HSET', KEYS[1], unpack(set))
return 1
`)

var floorSep = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for j = 1, #KEYS do
  local c = string.format('%d', math.floor(now / tonumber(ARGV[j])))
  local v = redis.call('HMGET', KEYS[j], 'm', 't', c)
  redis.call('HSET', KEYS[j], 't', (tonumber(v[2]) or 0) + 1, c, (tonumber(v[3]) or 0) + 1)
end
return 1
`)

// floorCum is the floor of a prefix-sum layout, where an event writes one
// field whatever the number of windows: the key's hash keeps g, the total of
// every event ever counted, and per window a mark (its prefix and "b"): g
// as it was when the window's oldest live bucket started, so that the
// window's sum is g minus its mark. (Each bucket keeps g at its start, and a
// mark moves to the next bucket's when a bucket leaves: once per bucket, left
// out here, as the floors leave out sweeps.) KEYS[1]; ARGV: n, then per
// window its prefix. One HMGET of n + 1 fields, one HSET of one.
var floorCum = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local n = tonumber(ARGV[1])
local get = {'g'}
for j = 1, n do get[j + 1] = ARGV[j + 1] .. 'b' end
local v = redis.call('HMGET', KEYS[1], unpack(get))
local g, ok = tonumber(v[1]) or 0, true
for j = 1, n do
  if g - (tonumber(v[j + 1]) or 0) + 1 > 1099511627776 then ok = false end
end
if ok then redis.call('HSET', KEYS[1], 'g', g + 1) end
return 1
`)

// floorPack keeps every window's running state packed in one field of the
// key's hash (struct.pack: the time of the last write, then per window its
// total and current bucket, doubles): one HGET and one HSET of one field,
// whatever the number of windows. KEYS[1]; ARGV: n.
var floorPack = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = tonumber(ARGV[1])
local s = redis.call('HGET', KEYS[1], 's')
local T, t1, v1, t2, v2, t3, v3 = 0, 0, 0, 0, 0, 0, 0
if s then
  if n == 1 then T, t1, v1 = struct.unpack('<ddd', s) else T, t1, v1, t2, v2, t3, v3 = struct.unpack('<ddddddd', s) end
end
if t1 + 1 > 1099511627776 then return 0 end
if n == 1 then
  redis.call('HSET', KEYS[1], 's', struct.pack('<ddd', now, t1 + 1, v1 + 1))
else
  if t2 + 1 > 1099511627776 or t3 + 1 > 1099511627776 then return 0 end
  redis.call('HSET', KEYS[1], 's', struct.pack('<ddddddd', now, t1 + 1, v1 + 1, t2 + 1, v2 + 1, t3 + 1, v3 + 1))
end
return 1
`)

// floorPackSep keeps each window's state packed in one field of the
// window's own hash (KEYS[1..n]): n HGETs and n HSETs of one field each.
// With ARGV[1] = "b", the current bucket keeps a field of its own as well
// (HMGET of the state and the bucket, HSET of both).
var floorPackSep = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local both = ARGV[1] == 'b'
for j = 1, #KEYS do
  if both then
    local c = string.format('%d', math.floor(now / 1000))
    local r = redis.call('HMGET', KEYS[j], 'S', c)
    local m, t1, v1 = 0, 0, 0
    if r[1] then m, t1 = struct.unpack('<dd', r[1]) end
    v1 = tonumber(r[2]) or 0
    if t1 + 1 > 1099511627776 then return 0 end
    redis.call('HSET', KEYS[j], 'S', struct.pack('<dd', now, t1 + 1), c, v1 + 1)
  else
    local s = redis.call('HGET', KEYS[j], 's')
    local m, t1, v1 = 0, 0, 0
    if s then m, t1, v1 = struct.unpack('<ddd', s) end
    if t1 + 1 > 1099511627776 then return 0 end
    redis.call('HSET', KEYS[j], 's', struct.pack('<ddd', now, t1 + 1, v1 + 1))
  end
end
return 1
`)

// noop is a script that only answers: the part of a call's cost that no
// layout changes.
var noop = rueidis.NewLuaScript(`return 1`)

type window struct {
	prefix string
	bucket time.Duration
	length time.Duration
}

func (w window) args(limit int64) []string {
	return []string{w.prefix, strconv.FormatInt(w.bucket.Milliseconds(), 10), strconv.FormatInt(w.length.Milliseconds(), 10),
		strconv.FormatInt(limit, 10), "1"}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "the server")
	nb := flag.Int("buckets", 10, "buckets per window")
	keys := flag.Int("keys", 10000, "keys")
	runs := flag.Int("runs", 3, "runs per operation")
	dur := flag.Duration("duration", 3*time.Second, "one run")
	conc := flag.Int("goroutines", 64, "callers")
	only := flag.String("ops", "", "the operations to run, comma-separated (default: every one)")
	flag.Parse()
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	base := store.Window{Length: time.Duration(*nb) * time.Second, Bucket: time.Second}
	var policies []*store.Store
	var wins []window
	for i, scale := range []time.Duration{1, 10, 100} {
		w := store.Window{Length: base.Length * scale, Bucket: base.Bucket * scale}
		s, err := store.New(ctx, c, w, store.WithPrefix("study:ws:"), store.WithBackend("nativehash-plain"))
		if err != nil {
			log.Fatal(err)
		}
		policies = append(policies, s)
		wins = append(wins, window{prefix: string(rune('a' + i)), bucket: w.Bucket, length: w.Length})
	}
	const lim = 1 << 40
	lg, err := limit.NewLog(c, "log", lim, base.Length, limit.WithPrefix("study:zset:"))
	if err != nil {
		log.Fatal(err)
	}
	proto := func(n int) func(context.Context, string) error {
		return func(ctx context.Context, k string) error {
			args := []string{strconv.Itoa(n)}
			for _, w := range wins[:n] {
				args = append(args, w.args(lim)...)
			}
			return oneHash.Exec(ctx, c, []string{"study:one:" + k}, args).Error()
		}
	}
	floor := func(n int, one bool) func(context.Context, string) error {
		return func(ctx context.Context, k string) error {
			if one {
				args := []string{strconv.Itoa(n)}
				for _, w := range wins[:n] {
					args = append(args, w.prefix, strconv.FormatInt(w.bucket.Milliseconds(), 10))
				}
				return floorOne.Exec(ctx, c, []string{"study:one:" + k}, args).Error()
			}
			var keys, args []string
			for _, w := range wins[:n] {
				keys = append(keys, "study:sep:"+k+":"+w.prefix)
				args = append(args, strconv.FormatInt(w.bucket.Milliseconds(), 10))
			}
			return floorSep.Exec(ctx, c, keys, args).Error()
		}
	}
	cum := func(n int) func(context.Context, string) error {
		return func(ctx context.Context, k string) error {
			args := []string{strconv.Itoa(n)}
			for _, w := range wins[:n] {
				args = append(args, w.prefix)
			}
			return floorCum.Exec(ctx, c, []string{"study:cum:" + k}, args).Error()
		}
	}
	ops := []study{
		{"allow", func(ctx context.Context, k string) error { _, err := policies[0].Allow(ctx, k, lim, 1); return err }},
		{"allow3", func(ctx context.Context, k string) error {
			_, err := store.AllowAll(ctx, 1, store.Quota{Store: policies[0], Key: k, Limit: lim},
				store.Quota{Store: policies[1], Key: k, Limit: lim}, store.Quota{Store: policies[2], Key: k, Limit: lim})
			return err
		}},
		{"onehash1", proto(1)},
		{"onehash3", proto(3)},
		{"noop", func(ctx context.Context, k string) error {
			return noop.Exec(ctx, c, []string{"study:one:" + k}, nil).Error()
		}},
		{"floor1", floor(1, false)},
		{"floor3one", floor(3, true)},
		{"floor3sep", floor(3, false)},
		{"floorcum1", cum(1)},
		{"floorcum3", cum(3)},
		{"floorpack1", func(ctx context.Context, k string) error {
			return floorPack.Exec(ctx, c, []string{"study:pack1:" + k}, []string{"1"}).Error()
		}},
		{"packsep1", func(ctx context.Context, k string) error {
			return floorPackSep.Exec(ctx, c, []string{"study:sep:" + k + ":a"}, []string{"a"}).Error()
		}},
		{"packsep3", func(ctx context.Context, k string) error {
			return floorPackSep.Exec(ctx, c, []string{"study:sep:" + k + ":a", "study:sep:" + k + ":b", "study:sep:" + k + ":c"}, []string{"a"}).Error()
		}},
		{"packsepb1", func(ctx context.Context, k string) error {
			return floorPackSep.Exec(ctx, c, []string{"study:sep:" + k + ":a"}, []string{"b"}).Error()
		}},
		{"packsepb3", func(ctx context.Context, k string) error {
			return floorPackSep.Exec(ctx, c, []string{"study:sep:" + k + ":a", "study:sep:" + k + ":b", "study:sep:" + k + ":c"}, []string{"b"}).Error()
		}},
		{"floorpack3", func(ctx context.Context, k string) error {
			return floorPack.Exec(ctx, c, []string{"study:one:" + k}, []string{"3"}).Error()
		}},
		{"ring1", func(ctx context.Context, k string) error {
			return ringHead.Exec(ctx, c, []string{"study:ring1:" + k}, ringArgs(wins, 1, *nb, lim)).Error()
		}},
		{"ring3", func(ctx context.Context, k string) error {
			return ringHead.Exec(ctx, c, []string{"study:ring3:" + k}, ringArgs(wins, 3, *nb, lim)).Error()
		}},
		{"zsetlog", func(ctx context.Context, k string) error { _, err := lg.Allow(ctx, k, 1); return err }},
		{"naive", func(ctx context.Context, k string) error {
			return baseline.Naive.Exec(ctx, c, []string{"study:naive:" + k}, baseline.NaiveArgs(time.Now(), *nb)).Error()
		}},
	}
	if *only != "" {
		want := strings.Split(*only, ",")
		for _, w := range want {
			if !slices.ContainsFunc(ops, func(o study) bool { return o.name == w }) {
				log.Fatalf("layoutstudy: no operation %q", w)
			}
		}
		ops = slices.DeleteFunc(ops, func(o study) bool { return !slices.Contains(want, o.name) })
	}
	// Fill: every key gets full windows in both layouts, oldest bucket first.
	now := time.Now()
	sem := make(chan struct{}, 128)
	var wg sync.WaitGroup
	for k := 0; k < *keys; k++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(k string) {
			defer func() { <-sem; wg.Done() }()
			for i, s := range policies {
				fv := c.B().Hset().Key("study:one:" + k).FieldValue()
				b := s.Window().Bucket
				for j := *nb - 1; j >= 0; j-- {
					if _, err := s.At(now.Add(-time.Duration(j)*b)).Record(ctx, store.Event{Key: k, Delta: 1, NoSum: true}); err != nil {
						log.Fatal(err)
					}
					at := now.Add(-time.Duration(j) * b).UnixMilli()
					fv = fv.FieldValue(wins[i].prefix+strconv.FormatInt(at/b.Milliseconds(), 10), "1")
				}
				low := (now.UnixMilli()-s.Window().Length.Milliseconds())/b.Milliseconds() + 1
				fv = fv.FieldValue(wins[i].prefix+"m", strconv.FormatInt(low*b.Milliseconds(), 10)).FieldValue(wins[i].prefix+"t", strconv.Itoa(*nb))
				if err := c.Do(ctx, fv.Build()).Error(); err != nil {
					log.Fatal(err)
				}
			}
			for i, w := range wins {
				fv := c.B().Hset().Key("study:sep:" + k + ":" + w.prefix).FieldValue()
				b := w.bucket.Milliseconds()
				for j := *nb - 1; j >= 0; j-- {
					fv = fv.FieldValue(strconv.FormatInt(now.Add(-time.Duration(j)*w.bucket).UnixMilli()/b, 10), "1")
				}
				low := (now.UnixMilli()-policies[i].Window().Length.Milliseconds())/b + 1
				fv = fv.FieldValue("m", strconv.FormatInt(low*b, 10)).FieldValue("t", strconv.Itoa(*nb))
				if err := c.Do(ctx, fv.Build()).Error(); err != nil {
					log.Fatal(err)
				}
			}
			cum := c.B().Hset().Key("study:cum:"+k).FieldValue().FieldValue("g", strconv.Itoa(3**nb))
			for i, w := range wins {
				cum = cum.FieldValue(w.prefix+"b", strconv.Itoa(i**nb))
				for j := 0; j < *nb; j++ {
					cum = cum.FieldValue(w.prefix+strconv.Itoa(j), strconv.Itoa(i**nb+j))
				}
			}
			if err := c.Do(ctx, cum.Build()).Error(); err != nil {
				log.Fatal(err)
			}
			if err := c.Do(ctx, c.B().Pexpire().Key("study:one:"+k).Milliseconds(wins[2].length.Milliseconds()+wins[2].bucket.Milliseconds()).Build()).Error(); err != nil {
				log.Fatal(err)
			}
		}(strconv.Itoa(k))
	}
	wg.Wait()
	enc, _ := c.Do(ctx, c.B().ObjectEncoding().Key("study:one:0").Build()).ToString()
	n1, _ := c.Do(ctx, c.B().Hlen().Key("study:one:0").Build()).AsInt64()
	fmt.Printf("one-hash key: %d fields, encoding %s\n", n1, enc)
	// One round unmeasured: every key's counter in its steady state (the
	// ring prototype, the log and the naive script start empty).
	for _, o := range ops {
		run(ctx, c, *conc, *keys, *dur, o.op)
	}
	us, pace := map[string][]float64{}, map[string][]float64{}
	for r := 0; r < *runs; r++ {
		for _, o := range ops {
			u, rate := run(ctx, c, *conc, *keys, *dur, o.op)
			us[o.name], pace[o.name] = append(us[o.name], u), append(pace[o.name], rate/float64(*keys))
		}
	}
	med := map[string]float64{}
	for _, o := range ops {
		m, lo, hi := render.Median(us[o.name])
		p, _, _ := render.Median(pace[o.name])
		med[o.name] = m
		fmt.Printf("%-9s %7.2f µs/op (%.2f-%.2f)   %.1f ops per key and second\n", o.name, m, lo, hi, p)
	}
	for _, r := range [][2]string{{"allow", "zsetlog"}, {"ring1", "zsetlog"}, {"ring1", "naive"}, {"ring1", "allow"}, {"ring3", "ring1"}, {"allow3", "allow"}} {
		if med[r[0]] > 0 && med[r[1]] > 0 {
			fmt.Printf("%s/%s %.2fx   ", r[0], r[1], med[r[0]]/med[r[1]])
		}
	}
	fmt.Println()
	if *only != "" {
		return
	}
	fmt.Printf("onehash3/allow %.2fx   onehash3/onehash1 %.2fx   onehash1/allow %.2fx\n",
		med["onehash3"]/med["allow"], med["onehash3"]/med["onehash1"], med["onehash1"]/med["allow"])
	fmt.Printf("floors: floor3one/floor1 %.2fx   floor3sep/floor1 %.2fx   noop/floor1 %.2fx   floorcum3/floorcum1 %.2fx   floorcum3/floor1 %.2fx\n",
		med["floor3one"]/med["floor1"], med["floor3sep"]/med["floor1"], med["noop"]/med["floor1"],
		med["floorcum3"]/med["floorcum1"], med["floorcum3"]/med["floor1"])
}

// study is one measured operation: op calls it on key k.
type study struct {
	name string
	op   func(ctx context.Context, k string) error
}

// run calls op from conc goroutines for d and answers the server's CPU µs
// per successful call, and the calls per second.
func run(ctx context.Context, c rueidis.Client, conc, keys int, d time.Duration, op func(context.Context, string) error) (float64, float64) {
	cpu0 := serverstat.CPU(ctx, c)
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for rctx.Err() == nil {
				if err := op(rctx, strconv.Itoa(r.IntN(keys))); err == nil {
					n.Add(1)
				} else if rctx.Err() == nil {
					log.Fatal(err)
				}
			}
		}(g)
	}
	wg.Wait()
	return (serverstat.CPU(ctx, c) - cpu0) / float64(n.Load()), float64(n.Load()) / d.Seconds()
}
