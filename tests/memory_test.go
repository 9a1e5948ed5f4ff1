package tests

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windowstore/windowstore/features"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/figures"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestFieldEncodingMemory measures MEMORY USAGE of a full 60-bucket counter
// (the figure in fieldcodec's package doc) on every backend, and logs it. Memory
// is exact, not timed, so the bound is safe to assert.
func TestFieldEncodingMemory(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		w := store.Window{Length: 6 * time.Minute, Bucket: 6 * time.Second}
		s, srv := newStore(t, tg, w)
		ctx := ctxT(t)
		c := srv.Client(t)
		t0 := time.Now().Truncate(w.Bucket).Add(-w.Length + w.Bucket)
		for i := 0; i < 60; i++ {
			_, err := s.At(t0.Add(time.Duration(i)*w.Bucket)).Add(ctx, "mem", int64(i%60+1))
			require.NoError(t, err)
		}
		var n, hash, head int64 // (with a head, of both the hash and the head)
		keys := counterKeys(t, s, "mem")
		for i, k := range keys {
			m, err := c.Do(ctx, c.B().Arbitrary("MEMORY", "USAGE").Keys(k).Args("SAMPLES", "0").Build()).AsInt64()
			require.NoError(t, err)
			t.Logf("%s: %d bytes", k, m)
			if i == 0 {
				hash = m
			} else {
				head += m - int64(len(k))
			}
			n += m
		}
		snap, err := s.Inspect(ctx, "mem")
		require.NoError(t, err)
		require.Len(t, snap.Buckets, 60)
		t.Logf("%s: MEMORY USAGE of a 60-bucket counter: %d bytes (%.1f per bucket)", tg.name, n, float64(n)/60)
		// Field TTLs cost memory of their own (Redis 8 keeps a small hash with
		// TTLs as "listpackex"), and TairHash's MEMORY USAGE under-reports; the
		// bounds are the plain hash's: 12 bytes per bucket in the buckets'
		// hash, and a head (one record of 48 bytes) of at most 128 bytes and
		// its key's name.
		// The field-TTL servers differ here: Redis 8 keeps the small hash a
		// listpack with TTLs ("listpackex"), Valkey 9 makes it a hashtable
		// at its first field TTL, at two to three times the memory of a small
		// counter (docs/backends.md's memory table).
		enc, err := c.Do(ctx, c.B().ObjectEncoding().Key(keys[0]).Build()).ToString()
		require.NoError(t, err)
		switch tg.kind {
		case harness.Redis80:
			if tg.wantFieldTTL {
				require.Equal(t, "listpackex", enc)
			}
		case harness.Valkey9:
			require.Equal(t, "hashtable", enc)
		}
		if !tg.wantFieldTTL {
			require.LessOrEqual(t, hash, int64(12*60), "more than 12 bytes per bucket")
			require.LessOrEqual(t, head, int64(128), "a head of more than 128 bytes and its name")
		}
	})
}

// TestMemoryPerCounter measures each backend's memory per counter as the
// server's used_memory grows (less the growth of its clients' buffers, which
// pipelined writes leave behind: mem_clients_normal) over 10,000 full counters (1,000 at 600 buckets;
// MEMORY USAGE under-reports TairHash), at 10, 60 and 600 buckets, on a fresh
// server. It logs the figures docs/backends.md's memory table quotes; it asserts
// only the plain hash's 12-bytes-per-bucket bound, as the growth from 10
// to 60 buckets, so that the keys' fixed cost (the hash, the head, their
// entries in the keyspace) cancels out.
//
// The counters are filled with the store's own writes (Record with NoSum,
// at each bucket's instant), oldest bucket first, in bulk: for each bucket,
// every counter's write at once from 256 goroutines, so that the store
// coalesces them (see fill).
func TestMemoryPerCounter(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		srv := harness.Fresh(t, tg.kind)
		c := srv.Client(t)
		ctx := ctxLong(t)
		server := srv.Version(t)
		var per10 float64 // the 10-bucket stage's bytes per counter
		for _, buckets := range []int{10, 60, 600} {
			w := store.Window{Length: time.Duration(buckets) * time.Minute, Bucket: time.Minute}
			s, err := store.New(ctx, c, w, store.WithBackend(tg.backend), store.WithPrefix(fmt.Sprintf("m%d:", buckets)))
			require.NoError(t, err)
			// 10,000 counters at 10 buckets, 5,000 at 60, 200 at 600:
			// 520,000 writes a server. 10,000 at 60 and 1,000 at 600, 1.3
			// million writes, took up to 10 minutes under CI's load; 2,000
			// at 60 left the stage's figure to a noise of some 100 kB,
			// which once moved it by 9%. (A stage's figure includes any
			// growth of the keyspace's tables it causes: Valkey 8.1's moved
			// from 511 B at 2,000 counters to 548 B at 5,000.)
			counters := map[int]int{10: 10000, 60: 5000, 600: 200}[buckets]
			now := time.Now()
			// Before the baseline reading: the stats connection, and the
			// write script in the server's script cache (one write to a key
			// that is not counted).
			calls0 := scriptCalls(t, srv)
			_, err = s.At(now).Record(ctx, store.Event{Key: "warm", Delta: 1, NoSum: true})
			require.NoError(t, err)
			before := memoryInfo(t, c)
			start := time.Now()
			// Oldest bucket first: a write at an earlier instant would take
			// newer buckets for stale ones.
			for i := buckets - 1; i >= 0; i-- {
				fill(t, s, now.Add(-time.Duration(i)*time.Minute), counters, int64(i+1))
			}
			after := memoryInfo(t, c)
			per := float64(dataGrowth(t, before, after)) / float64(counters)
			writes := buckets * counters
			calls := scriptCalls(t, srv) - calls0
			t.Logf("%s: %d buckets: %.0f bytes per counter (%.1f per bucket): used_memory delta over %d counters, less the clients' buffers and the script cache",
				tg.name, buckets, per, per/float64(buckets), counters)
			t.Logf("%s: %d buckets: %d writes in %v (%.0f/s), %d script calls (%.1f writes per call)",
				tg.name, buckets, writes, time.Since(start).Round(time.Millisecond), float64(writes)/time.Since(start).Seconds(),
				calls, float64(writes)/float64(calls))
			if buckets == 10 {
				per10 = per
			}
			if !tg.wantFieldTTL && buckets == 60 {
				// 12 bytes a bucket, as the 50 more buckets cost: the
				// keys' own cost (some 290 B with the head) is in both
				// stages. (A bound on per/60, 12 B plus 60 for the keys,
				// held while the keys were a hash alone: with the head it
				// sat within 1% of its line and failed under CI's load.)
				require.Less(t, (per-per10)/50, 12.0, "bytes per bucket from 10 to 60 buckets (%.0f B, then %.0f B a counter)", per10, per)
			}
			// The first stage on the fresh server also pays the keyspace's
			// one-time growth, which moved its figure by up to 11% (Valkey
			// 176 to 201 B, Redis 7.0 237 to 258 B) on one machine, quiet or
			// under the whole suite's load, and once by 15% (Redis 8.0.2);
			// the later stages hold within 1%.
			tol := usedMemoryTolerance
			if buckets == 10 {
				tol = firstStageTolerance
			}
			figures.Check(t, fmt.Sprintf("memory/%s/%s/%d", tg.kind, tg.wantBackend, buckets), figures.Figure{Value: math.Round(per), Unit: "B",
				How:    "growth of used_memory (less the clients' buffers and the script cache) over full counters on a fresh server, per counter",
				Server: server}, tol)
		}
	})
}

// fill writes delta at the instant at to counters 0..n-1 of s, from 256
// goroutines at once: the store coalesces concurrent writes (WithBatching),
// so each round trip carries up to 64 of them.
func fill(t *testing.T, s *store.Store, at time.Time, n int, delta int64) {
	t.Helper()
	fillKeys(t, n, func(ctx context.Context, k string) error {
		_, err := s.At(at).Record(ctx, store.Event{Key: k, Delta: delta, NoSum: true})
		return err
	})
}

// fillKeys calls write for keys "0" to n-1, from 256 goroutines at once; it
// fails the test at the first error.
func fillKeys(t *testing.T, n int, write func(ctx context.Context, key string) error) {
	t.Helper()
	const workers = 256
	ctx := ctxT(t)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for g := 0; g < workers && g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := g; k < n && !failed.Load(); k += workers {
				if err := write(ctx, strconv.Itoa(k)); err != nil {
					failed.Store(true)
					t.Errorf("key %d: %v", k, err)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		t.FailNow()
	}
}

// scriptCalls counts the script calls (EVALSHA, EVAL, FCALL and their
// read-only forms) the server has run.
func scriptCalls(t *testing.T, srv *harness.Server) int64 {
	info := srv.Cmd(t, "INFO", "commandstats")
	var n int64
	for _, c := range []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"} {
		n += statField(t, info, "cmdstat_"+c, "calls")
	}
	return n
}

func usedMemory(t testing.TB, c rueidis.Client) int64 { return memoryInfoNow(t, c)["used_memory"] }

// usedMemoryTolerance is how far a figure measured as the growth of
// used_memory may stray from the committed one before its test fails. The same
// server binary and the same writes give the same figure within 1% on one
// machine, but CI's machines measured up to 7% more than the machine that
// recorded them (jemalloc's arenas and the keyspace's table growth depend on
// how the writes interleave), and once 8.4% (Redis 8.0.2, plain hash, 60
// buckets: 785 B against 724, under the whole suite's load; 692 to 743 B in
// four runs of the test alone on the same machine: the keys were the same,
// 59 fields and a 48-byte head each, and used_memory_dataset moved by 0.6%,
// but used_memory_overhead, the keyspace's tables, by 578 to 918 kB); 12%
// still catches a layout that regressed, which moves a figure by a quarter
// or more.
const usedMemoryTolerance = 0.12

// firstStageTolerance is TestMemoryPerCounter's tolerance for its first stage
// (10 buckets), which the keyspace's one-time growth moves more: by 15.3% once
// (Redis 8.0.2, plain hash, 271 B against 235, under the whole suite's load,
// with used_memory_overhead up by 1 MB that no later stage showed).
const firstStageTolerance = 0.20

// dataGrowth is the growth of the data set between two INFO memory readings:
// used_memory's growth less what is not data, that is the clients' buffers
// (pipelined writes leave some behind: mem_clients_normal) and the script
// cache (used_memory_scripts: a script or function library the server first
// sees during the measured phase). Without the last, a figure measured on the
// first store of a fresh server carried the script bodies, some 20 bytes per
// counter at 10,000 counters, depending on how the writes happened to batch.
func dataGrowth(t testing.TB, before, after map[string]int64) int64 {
	t.Helper()
	d := func(k string) int64 { return after[k] - before[k] }
	g := d("used_memory") - d("mem_clients_normal") - d("used_memory_scripts")
	t.Logf("memory: overhead %+d dataset %+d", d("used_memory_overhead"), d("used_memory_dataset"))
	t.Logf("memory: used_memory %+d, of which clients' buffers %+d, scripts %+d (%+d cached scripts, %+d libraries): data %+d",
		d("used_memory"), d("mem_clients_normal"), d("used_memory_scripts"), d("number_of_cached_scripts"), d("number_of_libraries"), g)
	return g
}

// memoryInfo returns the numeric fields of INFO memory once the server has
// settled: the clients' buffers that a burst of pipelined writes leaves behind
// are freed, and their accounting (mem_clients_normal) refreshed, by the
// server's cron, a second or two after the burst. Without waiting, the same
// run measured figures up to 15% apart. It reads INFO every 250 ms until
// used_memory and mem_clients_normal hold still for three readings in a row,
// or 8 s have passed.
func memoryInfo(t testing.TB, c rueidis.Client) map[string]int64 {
	t.Helper()
	last, same := memoryInfoNow(t, c), 0
	for deadline := time.Now().Add(8 * time.Second); same < 2 && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		m := memoryInfoNow(t, c)
		if m["used_memory"] == last["used_memory"] && m["mem_clients_normal"] == last["mem_clients_normal"] {
			same++
		} else {
			same = 0
		}
		last = m
	}
	return last
}

// memoryInfoNow returns the numeric fields of INFO memory.
func memoryInfoNow(t testing.TB, c rueidis.Client) map[string]int64 {
	info, err := c.Do(ctxT(t), c.B().Info().Section("memory").Build()).ToString()
	require.NoError(t, err)
	out := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				out[k] = n
			}
		}
	}
	for _, k := range []string{"used_memory", "mem_clients_normal", "used_memory_scripts"} {
		if _, ok := out[k]; !ok {
			t.Fatalf("no %s in INFO memory", k)
		}
	}
	return out
}

// TestFeatureSetMemory measures the README's feature set (logins per user
// over a minute, an hour and a day; a per-minute login limit; distinct cards
// per device over a day) as the growth of used_memory per pair of entities on
// a fresh Redis 7.0 (plain hash), every bucket of every window written: one
// event a second over the last minute, a minute over the last hour and an
// hour over the last day, each with a card of its own.
func TestFeatureSetMemory(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxLong(t)
	minute := store.Window{Length: time.Minute, Bucket: time.Second}
	hour := store.Window{Length: time.Hour, Bucket: time.Minute}
	day := store.Window{Length: 24 * time.Hour, Bucket: time.Hour}
	set, err := features.New(ctx, c, []features.Feature{
		{Name: "logins", Entity: "user", Kind: features.Count, Windows: []store.Window{minute, hour, day}},
		{Name: "login_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{minute}, Limits: []int64{1 << 40}},
		{Name: "cards", Entity: "device", Kind: features.Distinct, Of: "card", Windows: []store.Window{day}},
	}, store.WithPrefix(harness.Prefix(t)), store.WithBackend("nativehash-plain"))
	require.NoError(t, err)
	at := threeWindowsFull() // (the logins' three windows full)
	fill := func(k int) error {
		id := strconv.Itoa(k)
		for i, ts := range at {
			res, err := set.At(ts).Record(ctx, features.Event{Entities: map[string]string{
				"user": "u" + id, "device": "d" + id, "card": id + ":" + strconv.Itoa(i)}})
			if err != nil {
				return err
			}
			if !res.Allowed {
				return errors.New("refused")
			}
		}
		return nil
	}
	require.NoError(t, fill(-1)) // the scripts in the cache, the connections made
	before := memoryInfo(t, c)
	const pairs = 500
	parallelKeys(t, pairs, fill)
	after := memoryInfo(t, c)
	per := float64(dataGrowth(t, before, after)) / pairs
	t.Logf("the README's feature set, every bucket written: %.0f bytes per user and device", per)
	res, err := set.At(at[len(at)-1]).Read(ctx, map[string]string{"user": "u0", "device": "d0"})
	require.NoError(t, err)
	logins, _ := res.Get("logins")
	require.Equal(t, []int64{60, 119, 142}, logins.Sums)
	figures.Check(t, "features/readme/bytes", figures.Figure{Value: math.Round(per), Unit: "B", Server: srv.Version(t),
		How: "growth of used_memory per user and device on a fresh server, every bucket of every window written"}, usedMemoryTolerance)
}

// TestTierMemory measures a day at minute resolution kept four ways, on the
// plain hash (Redis 7.0), as the growth of used_memory per counter: one
// 1,440-bucket hash, a multi-resolution counter of an hour at 1 min and a day
// at 1 h (WithTiers), the same two windows as separate stores, and the hour
// alone. The multi-resolution counter must cost at most twice the hour alone,
// and every tier must stay in listpack encoding.
func TestTierMemory(t *testing.T) {
	t.Parallel()
	srv := harness.Fresh(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxLong(t) // about 515,000 writes
	server := srv.Version(t)
	hour, day := store.Window{Length: time.Hour, Bucket: time.Minute}, store.Window{Length: 24 * time.Hour, Bucket: time.Hour}
	now := time.Now().Truncate(time.Minute).Add(-time.Second)
	measure := func(name string, counters int, fill func(k int) error, keys func(k int) []string) {
		require.NoError(t, fill(-1)) // the script in the cache, the connections made
		before := memoryInfo(t, c)
		parallelKeys(t, counters, fill)
		after := memoryInfo(t, c)
		per := float64(dataGrowth(t, before, after)) / float64(counters)
		listpack := 1.0
		for _, k := range keys(0) {
			if e := encoding(t, c, k); e != "listpack" && e != "embstr" && e != "raw" { // (a head is a string)
				listpack = 0
			}
		}
		t.Logf("%s: %.0f bytes per counter, listpack %v", name, per, listpack == 1)
		figures.Check(t, "tiers/"+name+"/bytes", figures.Figure{Value: math.Round(per), Unit: "B", Server: server}, usedMemoryTolerance)
		figures.Check(t, "tiers/"+name+"/listpack", figures.Figure{Value: listpack, Server: server}, 0)
	}
	key := func(k int) string { return "c" + strconv.Itoa(k) }
	mk := func(prefix string, w store.Window, opts ...store.Option) *store.Store {
		s, err := store.New(ctx, c, w, append([]store.Option{store.WithPrefix(prefix), store.WithBackend("nativehash-plain")}, opts...)...)
		require.NoError(t, err)
		return s
	}
	// One hash of 1,440 minute buckets (200 counters: 288,000 writes).
	wide := mk("wide:", store.Window{Length: 24 * time.Hour, Bucket: time.Minute})
	measure("1440", 200, func(k int) error {
		for i := 1439; i >= 0; i-- {
			if _, err := wide.At(now.Add(-time.Duration(i)*time.Minute)).Record(ctx, store.Event{Key: key(k), Delta: 1, NoSum: true}); err != nil {
				return err
			}
		}
		return nil
	}, func(k int) []string { return counterKeys(t, wide, key(k)) })
	// The tiers: one write per event updates both; a day of hourly events,
	// then the last hour's minutes.
	tiered := mk("tiered:", hour, store.WithTiers(day))
	tieredFill := func(k int) error {
		for h := 23; h >= 1; h-- {
			if _, err := tiered.At(now.Add(-time.Duration(h)*time.Hour)).Record(ctx, store.Event{Key: key(k), Delta: 1, NoSum: true}); err != nil {
				return err
			}
		}
		for m := 59; m >= 0; m-- {
			if _, err := tiered.At(now.Add(-time.Duration(m)*time.Minute)).Record(ctx, store.Event{Key: key(k), Delta: 1, NoSum: true}); err != nil {
				return err
			}
		}
		return nil
	}
	measure("tiered", 1000, tieredFill, func(k int) []string {
		return append(counterKeys(t, mk("tiered:", hour), key(k)), counterKeys(t, mk("tiered:", day), key(k))...)
	})
	sh, sd := mk("sep:", hour), mk("sep:", day)
	measure("separate", 1000, func(k int) error {
		for h := 23; h >= 0; h-- {
			if _, err := sd.At(now.Add(-time.Duration(h)*time.Hour)).Record(ctx, store.Event{Key: key(k), Delta: 1, NoSum: true}); err != nil {
				return err
			}
		}
		for m := 59; m >= 0; m-- {
			if _, err := sh.At(now.Add(-time.Duration(m)*time.Minute)).Record(ctx, store.Event{Key: key(k), Delta: 1, NoSum: true}); err != nil {
				return err
			}
		}
		return nil
	}, func(k int) []string { return append(counterKeys(t, sh, key(k)), counterKeys(t, sd, key(k))...) })
	alone := mk("alone:", hour)
	measure("hour", 1000, func(k int) error {
		for m := 59; m >= 0; m-- {
			if _, err := alone.At(now.Add(-time.Duration(m)*time.Minute)).Record(ctx, store.Event{Key: key(k), Delta: 1, NoSum: true}); err != nil {
				return err
			}
		}
		return nil
	}, func(k int) []string { return counterKeys(t, alone, key(k)) })
	// The day tier holds what was written: 23 hourly events and 60 minutes.
	n, err := tiered.At(now).Over(24*time.Hour).Sum(ctx, key(0))
	require.NoError(t, err)
	require.EqualValues(t, 83, n)
}

// TestEventIDMemory measures the memory of an event id: the growth of
// used_memory over 30,000 AddEvent calls with ids of 20 bytes, on counters
// that exist already (a delta of 0, so only the ids grow).
func TestEventIDMemory(t *testing.T) {
	t.Parallel()
	for _, kind := range []harness.Kind{harness.Redis70, harness.Redis80, harness.Valkey} {
		t.Run(string(kind), func(t *testing.T) {
			srv := harness.Fresh(t, kind)
			c := srv.Client(t)
			ctx := ctxLong(t)
			s, err := store.New(ctx, c, store.Window{Length: time.Hour, Bucket: time.Minute}, store.WithPrefix("ids:"))
			require.NoError(t, err)
			now := time.Now()
			parallelKeys(t, 100, func(k int) error { _, err := s.At(now).Add(ctx, "u"+strconv.Itoa(k), 1); return err })
			_, err = s.At(now).Record(ctx, store.Event{Key: "u0", ID: "warm-up-id-0000000000"})
			require.NoError(t, err)
			before := memoryInfo(t, c)
			const ids = 30000
			parallelKeys(t, ids, func(k int) error {
				_, err := s.At(now).Record(ctx, store.Event{Key: "u" + strconv.Itoa(k%100), ID: fmt.Sprintf("evt-%016x", k)})
				return err
			})
			after := memoryInfo(t, c)
			per := float64(dataGrowth(t, before, after)) / ids
			t.Logf("%s: %.1f bytes per event id", kind, per)
			// Redis 8 measured 127 to 142 B in runs of one machine (its
			// overhead alone varies by 200 KB over the 30,000 ids), so this
			// figure is held to 15%, not usedMemoryTolerance.
			figures.Check(t, "ids/"+string(kind)+"/bytes", figures.Figure{Value: math.Round(per), Unit: "B", Server: srv.Version(t)}, 0.15)
		})
	}
}
