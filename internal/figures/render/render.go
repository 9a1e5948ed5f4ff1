// Package render writes the docs' figure tables (README.md, docs/*.md) from
// the figures file (see package figures, and tools/figures).
package render

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/windowstore/windowstore/internal/figures"
)

var region = regexp.MustCompile(`(?s)(<!-- figures:([a-z0-9]+) -->\n).*?(<!-- /figures:([a-z0-9]+) -->)`)

// renderers maps a region's name to what renders it.
var renderers = map[string]func(figures.File) string{
	"memory":   memory,
	"limiters": limiters,
	"tiers":    tiers,
	"ids":      ids,
	"distinct": distinct,
	"stats":    stats,
	"bench":    bench,
	"rls":      rls,
}

// README returns a document (README.md or a file of docs/) with every figure
// region rendered anew.
func README(readme string, f figures.File) (string, error) {
	var err error
	out := region.ReplaceAllStringFunc(readme, func(m string) string {
		sm := region.FindStringSubmatch(m)
		if sm[2] != sm[4] {
			err = fmt.Errorf("region %s ends as %s", sm[2], sm[4])
			return m
		}
		r, ok := renderers[sm[2]]
		if !ok {
			err = fmt.Errorf("no renderer for region %s", sm[2])
			return m
		}
		return sm[1] + r(f) + sm[3]
	})
	return out, err
}

// Regions lists the renderers' names.
func Regions() []string {
	var out []string
	for k := range renderers {
		out = append(out, k)
	}
	return out
}

// get formats a figure with a format, or "n/m" when it was not measured.
func get(f figures.File, name, format string) string {
	v, ok := f[name]
	if !ok {
		return "n/m"
	}
	return fmt.Sprintf(format, v.Value)
}

// thousands writes n with thousands separators.
func thousands(v float64) string {
	n := int64(math.Round(v))
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// server names the server that measured the figures of names, as recorded
// with them (Figure.Server, read from the server's INFO): one name, or
// several joined by " / " when they differ, or "server not recorded".
func server(f figures.File, names ...string) string {
	var out []string
	for _, n := range names {
		if v, ok := f[n]; ok && v.Server != "" && !slices.Contains(out, v.Server) {
			out = append(out, v.Server)
		}
	}
	if len(out) == 0 {
		return "server not recorded"
	}
	return strings.Join(out, " / ")
}

func bytes(f figures.File, name string) string {
	v, ok := f[name]
	if !ok {
		return "n/m"
	}
	return thousands(v.Value) + " B"
}

// backendRows are the rows of the tables per backend and server: a label, and
// the figures' key.
var backendRows = []struct{ name, key string }{
	{"plain hash", "redis70/nativehash-plain"},
	{"plain hash", "valkey/nativehash-plain"},
	{"plain hash", "redis80/nativehash-plain"},
	{"field TTL", "redis80/nativehash-fieldttl"},
	{"field TTL", "valkey9/nativehash-fieldttl"},
	{"TairHash (SORT mode)", "tairhash/tairhash"},
}

// memory is the table of memory per counter, per backend and server.
func memory(f figures.File) string {
	var b strings.Builder
	b.WriteString("| backend, server | 10 buckets | 60 buckets | 600 buckets |\n|---|---|---|---|\n")
	for _, r := range backendRows {
		if _, ok := f["memory/"+r.key+"/10"]; !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s, %s |", r.name, server(f, f.Names("memory/"+r.key+"/")...))
		for _, n := range []int{10, 60, 600} {
			name := fmt.Sprintf("memory/%s/%d", r.key, n)
			cell := bytes(f, name)
			if v, ok := f[name]; ok && n > 10 {
				cell += fmt.Sprintf(" (%.1f B/bucket)", v.Value/float64(n))
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nMemory is the growth of the server's `used_memory` over full counters (10,000 at 10 buckets, 5,000 at 60, 200 at 600) on a " +
		"fresh server, divided by the counters (`TestMemoryPerCounter`). Past 128 fields a hash leaves listpack encoding " +
		"(`hash-max-listpack-entries`) and costs 3 to 6 times more per bucket; use tiers (above) for long windows at fine " +
		"resolution. Field TTLs cost memory of their own: Redis 8 keeps a small hash with field TTLs as a \"listpackex\", " +
		"Valkey 9 turns it into a hashtable at its first field TTL (`OBJECT ENCODING`: `hashtable` from one field on), so a small " +
		"counter costs two to three times Redis 8's there, and one of 600 buckets less. TairHash's " +
		"per-field expiry index costs far more (measured by hand with a module built from its source, CI has no TairHash).\n")
	return b.String()
}

// stats is the memory of the window statistics, per backend and server.
func stats(f figures.File) string {
	var b strings.Builder
	b.WriteString("| backend, server | max or min (amounts) | first or last seen (Unix ms) | avg (a sum and a count) | recent (10 events) |\n|---|---|---|---|---|\n")
	for _, r := range backendRows {
		names := []string{"stats/" + r.key + "/max", "stats/" + r.key + "/last", "stats/" + r.key + "/avg", "stats/" + r.key + "/recent"}
		if _, ok := f[names[0]]; !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s, %s | %s | %s | %s | %s |\n", r.name, server(f, names...), bytes(f, names[0]), bytes(f, names[1]),
			bytes(f, names[2]), bytes(f, names[3]))
	}
	b.WriteString("\nMemory per key with a full window of 10 buckets (`TestStatMemory`): `MEMORY USAGE` of the statistic's keys " +
		"on the native hashes; on TairHash, whose `MEMORY USAGE` under-reports its keys, the growth of the server's `used_memory` over " +
		"5,000 keys on a fresh server. A bucket's extreme is one field, as a counter's amount (a window of more than 64 buckets caches its extreme in one more); a time " +
		"(13 digits) costs a few bytes more than a small amount; Avg is two counters; Recent is one field of up to 16 " +
		"\"start:ms:value\" entries (here 10). A counter of 10 buckets is about the same as a max (docs/backends.md measures counters by `used_memory`).\n")
	return b.String()
}

// limiters is the trade-off table of the limiters.
func limiters(f figures.File) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| algorithm | constructor | precision | memory per key (`MEMORY USAGE`, %s) | commands per decision (one script, +`TIME`) |\n|---|---|---|---|---|\n",
		server(f, f.Names("limiters/")...))
	ev := func(kind string) string {
		var parts []string
		for _, n := range []int{100, 1000, 10000} {
			name := fmt.Sprintf("limiters/%s/%d", kind, n)
			if v, ok := f[name]; ok {
				parts = append(parts, fmt.Sprintf("%s B at %s events", thousands(v.Value), thousands(float64(n))))
			}
		}
		if len(parts) == 0 {
			return "n/m"
		}
		return strings.Join(parts, "; ")
	}
	fmt.Fprintf(&b, "| exact sliding log (ZSET) | `limit.NewLog` | exact, to the ms | %s | `ZCOUNT` `ZREMRANGEBYSCORE` `ZADD` `PEXPIREAT` `ZRANGE` |\n", ev("log"))
	fmt.Fprintf(&b, "| bucketed sliding window | `limit.NewSlidingWindow` | one bucket; never over-admits | %s | `GET` `SET` of the head on the plain hash; `HMGET` `HSET` `HDEL` once per bucket (see Backends) |\n", ev("sliding-window"))
	fmt.Fprintf(&b, "| fixed window | `limit.NewFixedWindow` | a window; up to 2x the limit across an edge | %s | `HMGET` `HSET`/`HINCRBY` `PEXPIREAT` |\n", ev("fixed-window"))
	fmt.Fprintf(&b, "| token bucket, GCRA | `limit.NewGCRA` | exact, to the ms; a smooth rate, bursts up to a burst size | %s | `GET` `SET` |\n", ev("gcra"))
	if w, ok := f["limiters/three/windows"]; ok {
		c := f["limiters/three/combine"]
		fmt.Fprintf(&b, "| several sliding windows of one key, as one counter | `limit.NewWindows` | one bucket per window; never over-admits | "+
			"%s B for three windows (1m/1s, 1h/1m, 1d/1h) with every bucket counted, where `limit.Combine`'s three sliding windows take %s B (%.2fx) | "+
			"`HMGET` `HSET`, whatever the number of windows; `HDEL` once per bucket |\n", thousands(w.Value), thousands(c.Value), w.Value/c.Value)
	}
	if v, ok := f["limiters/log-vs-sliding/1000"]; ok {
		fmt.Fprintf(&b, "\nAt 1,000 events in the window the log takes %.0fx the memory of a 10-bucket sliding window (`TestLimiterMemory`, "+
			"events spread over a one-hour window).\n", v.Value)
	}
	return b.String()
}

// tiers compares a multi-resolution counter with its alternatives.
func tiers(f figures.File) string {
	var b strings.Builder
	b.WriteString("| one counter of a day at minute resolution, kept as | memory per counter | encoding |\n|---|---|---|\n")
	rows := []struct{ what, key string }{
		{"one 1,440-bucket hash (1d/1m)", "1440"},
		{"tiers 1h/1m + 1d/1h (one store, `WithTiers`)", "tiered"},
		{"the same two windows as two separate stores", "separate"},
		{"the hour tier alone (1h/1m)", "hour"},
	}
	for _, r := range rows {
		enc := "n/m"
		if v, ok := f["tiers/"+r.key+"/listpack"]; ok {
			enc = map[bool]string{true: "listpack", false: "hashtable"}[v.Value == 1]
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.what, bytes(f, "tiers/"+r.key+"/bytes"), enc)
	}
	if t, ok1 := f["tiers/tiered/bytes"]; ok1 {
		if h, ok2 := f["tiers/hour/bytes"]; ok2 {
			fmt.Fprintf(&b, "\nThe counter with both tiers costs %.2fx the hour tier alone (the target: at most 2x), and each tier "+
				"stays a listpack. Plain hash, %s, growth of `used_memory` over 1,000 full counters (200 at 1,440 "+
				"buckets) (`TestTierMemory`).\n", t.Value/h.Value, server(f, f.Names("tiers/")...))
		}
	}
	return b.String()
}

// ids is the memory and cost of event ids.
func ids(f figures.File) string {
	var b strings.Builder
	b.WriteString("| server | memory per event id (a key with an expiry) |\n|---|---|\n")
	for _, k := range []string{"redis70", "redis80", "valkey"} {
		name := "ids/" + k + "/bytes"
		fmt.Fprintf(&b, "| %s | %s |\n", server(f, name), bytes(f, name))
	}
	b.WriteString("\n(Growth of `used_memory` over 30,000 ids of 20 bytes, `TestEventIDMemory`; the id key's name repeats the counter's key.)\n")
	return b.String()
}

// distinct is the error and memory of distinct counts.
func distinct(f figures.File) string {
	var b strings.Builder
	b.WriteString("| distinct members in the window | relative error | memory, HyperLogLog buckets | memory, an exact set |\n|---|---|---|---|\n")
	for _, n := range []int{100, 10000, 1000000} {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", thousands(float64(n)), get(f, fmt.Sprintf("distinct/error/%d", n), "%.2f%%"),
			bytes(f, fmt.Sprintf("distinct/hll/%d", n)), bytes(f, fmt.Sprintf("distinct/set/%d", n)))
	}
	fmt.Fprintf(&b, "\nOne counter of 10 buckets, the members spread over them; the exact set is one `SET` of the same members "+
		"(`TestDistinctError`, %s, `MEMORY USAGE`). The error is that of Redis's HyperLogLog (0.81%% standard error), "+
		"the same for any member set of that size.\n", server(f, f.Names("distinct/")...))
	return b.String()
}

// bench is the benchmark table: every operation at 10 buckets, then those
// measured at other bucket counts.
func bench(f figures.File) string {
	var b strings.Builder
	if _, ok := f["bench/how"]; !ok {
		return "Not measured yet: run `scripts/bench.sh`.\n"
	}
	fmt.Fprintf(&b, "%s\n\n", f["bench/how"].How)
	b.WriteString("| operation | buckets | server µs/op, median (range) | vs naive | vs ZSET log | vs redis_rate | vs raw HINCRBY | vs Allow | ops/s | vs naive |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, nb := range []int{10, 60, 600, 1440} {
		for _, op := range BenchOps {
			p := fmt.Sprintf("bench/%d/%s/", nb, op)
			if _, ok := f[p+"server_us"]; !ok {
				continue
			}
			// Against Store.Allow at the same buckets: medians of one invocation.
			vsAllow := "n/m"
			if a := f[fmt.Sprintf("bench/%d/allow/server_us", nb)]; a.Value > 0 {
				vsAllow = fmt.Sprintf("%.2fx", f[p+"server_us"].Value/a.Value)
			}
			fmt.Fprintf(&b, "| %s | %s | %s (%s-%s) | %s | %s | %s | %s | %s | %s | %s |\n", op, thousands(float64(nb)), get(f, p+"server_us", "%.2f"),
				get(f, p+"server_us_min", "%.2f"), get(f, p+"server_us_max", "%.2f"), get(f, p+"cpu_vs_naive", "%.2fx"),
				get(f, p+"cpu_vs_zsetlog", "%.2fx"), get(f, p+"cpu_vs_redisrate", "%.2fx"), get(f, p+"cpu_vs_raw_hincrby", "%.2fx"), vsAllow,
				thousands(f[p+"ops_per_sec"].Value), get(f, p+"vs_naive", "%.2fx"))
		}
	}
	// add's growth with the window's length, measured in one invocation
	// against add at its first bucket count, over the same keys.
	var growth []string
	for _, nb := range []int{60, 600, 1440} {
		p := fmt.Sprintf("bench/%d/add/", nb)
		if v := f[p+"cpu_vs_add_base"].Value; v > 0 {
			growth = append(growth, fmt.Sprintf("`add` at %s buckets costs %.2fx `add` at %s", thousands(float64(nb)), v,
				thousands(f[p+"base_buckets"].Value)))
		}
	}
	if len(growth) > 0 {
		fmt.Fprintf(&b, "\nMeasured in one invocation over the same keys: %s.\n", strings.Join(growth, "; "))
	}
	b.WriteString(targets(f))
	return b.String()
}

// BenchOps are the bench's operations (tools/bench), in the table's order.
var BenchOps = []string{"add", "addnosum", "addid", "sum", "sum100", "allow", "refuse", "refuseat", "allow3", "windows", "windows3", "refuse3", "refuse3at", "allow3x", "refuse3x", "attack",
	"record6", "record6id", "record8", "record6x", "observe", "distinct", "distincthot", "lease", "naive", "zsetlog", "gcra", "redisrate", "rawhincrby", "rawhgetall"}

// RLSResult is one service's figures over an invocation of tools/rlsbench, a
// line of its --json output, which tools/figures records.
type RLSResult struct {
	Service      string  `json:"service"`
	Decisions    float64 `json:"decisions_per_sec"`
	DecisionsMin float64 `json:"decisions_per_sec_min"`
	DecisionsMax float64 `json:"decisions_per_sec_max"`
	CPUUs        float64 `json:"server_cpu_us_per_decision"`
	CPUUsMin     float64 `json:"server_cpu_us_per_decision_min"`
	CPUUsMax     float64 `json:"server_cpu_us_per_decision_max"`
	Admitted     float64 `json:"admitted_fraction"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
}

// RLSVariants are the windowstored settings of the README's table beside
// envoyproxy/ratelimit (scripts/rls-bench.sh with RECORD=NAME), in its order:
// each measured in an invocation of its own, beside envoyproxy/ratelimit.
var RLSVariants = []struct{ Name, Label string }{
	{"sliding60", "windowstored (sliding windows of 60 buckets, all or nothing)"},
	{"bucket6s", "windowstored, `bucket: 6s` (10 buckets)"},
}

// rls renders windowstored beside envoyproxy/ratelimit: envoyproxy/ratelimit's
// row from the first variant's invocation, and each variant's with its CPU per
// decision against envoyproxy/ratelimit's in the same invocation.
func rls(f figures.File) string {
	first := "rls/" + RLSVariants[0].Name + "/"
	if _, ok := f[first+"windowstored/cpu_us"]; !ok {
		return "Not measured yet: run `RECORD=" + RLSVariants[0].Name + " ./scripts/rls-bench.sh`.\n"
	}
	row := func(b *strings.Builder, label, p, ratio string) {
		fmt.Fprintf(b, "| %s | %s (%s-%s) | %s µs (%s-%s) | %s |\n", label, thousands(f[p+"decisions"].Value),
			thousands(f[p+"decisions_min"].Value), thousands(f[p+"decisions_max"].Value), get(f, p+"cpu_us", "%.1f"),
			get(f, p+"cpu_us_min", "%.1f"), get(f, p+"cpu_us_max", "%.1f"), ratio)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", f[first+"how"].How)
	b.WriteString("| service | decisions/s | Redis CPU per decision | CPU vs envoyproxy/ratelimit |\n|---|---:|---:|---:|\n")
	row(&b, "envoyproxy/ratelimit (fixed windows)", first+"envoy/", "1.00x")
	for _, v := range RLSVariants {
		p := "rls/" + v.Name + "/"
		if _, ok := f[p+"windowstored/cpu_us"]; ok {
			row(&b, v.Label, p+"windowstored/", get(f, p+"cpu_vs_envoy", "%.2fx"))
		}
	}
	return b.String()
}
