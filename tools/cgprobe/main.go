// Command cgprobe drives one operation of the store against a server at a
// steady pace on a virtual clock, for counting the server's instructions per
// operation under valgrind's callgrind (scripts/callgrind.sh): unlike the
// server's CPU time, which varies on a shared machine by up to 3x, an
// instruction count is the same from run to run for the same code, keys and
// calls (to within the few per cent by which the store's batching of
// concurrent operations varies), so a change of a script can be measured
// alone.
//
// It makes three stores of one prefix (windows of 10 buckets: 10s/1s,
// 100s/10s, 1000s/100s, as the bench's allow3) and the bench's six-feature
// set (record6, on the 10s/1s window), one op per key first (not
// measured), then runs --n operations of --op over --keys keys from --conc
// callers; with --step, on a client clock (Store.At) that advances by step
// once every key has had an operation: --step 0 keeps every key's window
// synced (no bucket starts), --step 300ms starts the 1 s window's bucket on
// about one operation in three. With --pid, it zeroes callgrind's counters
// after the first operations (callgrind_control -z) and dumps them at the
// end (-d); with --luaprof, it counts the scripts' Lua instructions line by
// line instead (scripts/luaprof.sh).
//
//	go run ./tools/cgprobe --addr 127.0.0.1:6379 --op allow3 --step 300ms --conc 32
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/baseline"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tools/internal/luaprof"
	"github.com/windowstore/windowstore/tools/internal/workload"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "the server")
	op := flag.String("op", "add", "add, addnosum (Record with NoSum), allow, allow3 (store.AllowAll of the three stores), refuse (Allow under a limit of 1, refused after the warm-up), refuse3 (allow3 refused by its third store's limit of 1), allow3x (the bench's: AllowAll of the 1 s store on three keys, linked), refuse3x (allow3x refused by its third key's limit of 0), sum, summany (SumMany of all --keys keys), distinct (RecordStat of StatDistinct of one of 1,000 members), observe (RecordStat of StatMax), refuseat (the bench's: Allow refused by a window full in every bucket), record6 (the bench's) or naive (the bench's naive script, 10 buckets of 1 s, on the virtual clock)")
	n := flag.Int("n", 6000, "operations measured")
	keys := flag.Int("keys", 100, "keys")
	conc := flag.Int("conc", 32, "callers")
	step := flag.Duration("step", 0, "virtual time between two passes over the keys (a client clock); <0: the server's clock")
	pid := flag.Int("pid", 0, "the callgrind process to zero after the first operations, and dump at the end")
	warm := flag.Bool("warm", true, "one operation per key before measuring")
	prefix := flag.String("prefix", "cg:", "key prefix")
	lp := flag.Int("luaprof", 0, "after the warm-up, count the scripts' Lua instructions line by line (a server whose Lua keeps "+
		"its debug library: scripts/luaprof.sh), and print that many top lines")
	flag.Parse()
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	var st []*store.Store
	for _, sc := range []time.Duration{1, 10, 100} {
		s, err := store.New(ctx, c, store.Window{Length: 10 * sc * time.Second, Bucket: sc * time.Second},
			store.WithPrefix(*prefix), store.WithBackend("nativehash-plain"))
		if err != nil {
			log.Fatal(err)
		}
		st = append(st, s)
	}
	one := st[0].Window()
	set, err := features.New(ctx, c, workload.Record6(one), store.WithPrefix(*prefix+"fx:"), store.WithBackend("nativehash-plain"))
	if err != nil {
		log.Fatal(err)
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Hour)
	base := st
	do := func(k string, i int) {
		st, set := st, set
		if *step >= 0 {
			at := t0.Add(time.Duration(i / *keys) * *step)
			st, set = []*store.Store{st[0].At(at), st[1].At(at), st[2].At(at)}, set.At(at)
		}
		var err error
		switch *op {
		case "add":
			_, err = st[0].Add(ctx, k, 1)
		case "addnosum":
			_, err = st[0].Record(ctx, store.Event{Key: k, Delta: 1, NoSum: true})
		case "allow":
			_, err = st[0].Allow(ctx, k, 1<<40, 1)
		case "allow3":
			_, err = store.AllowAll(ctx, 1, store.Quota{Store: st[0], Key: k, Limit: 1 << 40},
				store.Quota{Store: st[1], Key: k, Limit: 1 << 40}, store.Quota{Store: st[2], Key: k, Limit: 1 << 40})
		case "allow3x":
			_, err = store.AllowAll(ctx, 1, store.Quota{Store: st[0], Key: k, Limit: 1 << 40},
				store.Quota{Store: st[0], Key: "ip" + k, Limit: 1 << 40}, store.Quota{Store: st[0], Key: "dev" + k, Limit: 1 << 40})
		case "refuse3x":
			var d store.Decision
			d, err = store.AllowAll(ctx, 1, store.Quota{Store: st[0], Key: k, Limit: 1 << 40},
				store.Quota{Store: st[0], Key: "ip" + k, Limit: 1 << 40}, store.Quota{Store: st[0], Key: "dev" + k, Limit: 0})
			if err == nil && d.Allowed {
				err = fmt.Errorf("refuse3x: admitted")
			}
		case "refuse": // a limit of 1, held by the warm-up's admission
			var d store.Decision
			d, err = st[0].Allow(ctx, k, 1, 1)
			if err == nil && d.Allowed && i >= *keys {
				err = fmt.Errorf("refuse: admitted")
			}
		case "refuse3": // allow3 refused by its third policy (a limit of 1, as refuse)
			var d store.Decision
			d, err = store.AllowAll(ctx, 1, store.Quota{Store: st[0], Key: k, Limit: 1 << 40},
				store.Quota{Store: st[1], Key: k, Limit: 1 << 40}, store.Quota{Store: st[2], Key: k, Limit: 1})
			if err == nil && d.Allowed && i >= *keys {
				err = fmt.Errorf("refuse3: admitted")
			}
		case "sum": // a Sum of one key; the warm-up adds
			if i < *keys {
				_, err = st[0].Add(ctx, k, 1)
				break
			}
			_, err = st[0].Sum(ctx, k)
		case "summany": // a SumMany of every key, from this one on; the warm-up adds
			if i < *keys {
				_, err = st[0].Add(ctx, k, 1)
				break
			}
			n, _ := strconv.Atoi(k)
			ks := make([]string, *keys)
			for j := range ks {
				ks[j] = strconv.Itoa((n + j) % *keys)
			}
			_, err = st[0].SumMany(ctx, ks)
		case "distinct":
			_, err = st[0].RecordStat(ctx, store.StatEvent{Key: k, Stat: store.StatDistinct, Members: []string{strconv.Itoa(i * 7919 % 1000)}})
		case "refuseat": // the bench's: Allow at a limit of 10 of a window whose 10 buckets hold 11 (filled by the warm-up), refused
			for j := 9; j >= 0 && i < *keys; j-- {
				if _, err = base[0].At(t0.Add(-time.Duration(j)*time.Second)).Record(ctx, store.Event{Key: k, Delta: 1 + int64(1/(j+1)), NoSum: true}); err != nil {
					log.Fatal(err)
				}
			}
			_, err = st[0].Allow(ctx, k, 10, 1)
		case "observe": // the bench's: a window maximum
			_, err = st[0].RecordStat(ctx, store.StatEvent{Key: k, Stat: store.StatMax, Value: int64(i * 7919 % 1000)})
		case "naive":
			now := time.Now()
			if *step >= 0 {
				now = t0.Add(time.Duration(i / *keys) * *step)
			}
			err = baseline.Naive.Exec(ctx, c, []string{*prefix + "naive:" + k}, baseline.NaiveArgs(now, 10)).Error()
		case "record6":
			_, err = set.Record(ctx, features.Event{Entities: map[string]string{"user": k, "ip": "ip" + k}, Amount: 3})
		default:
			log.Fatalf("no operation %q", *op)
		}
		if err != nil {
			log.Fatal(err)
		}
	}
	for i := 0; i < *keys && *warm; i++ {
		do(strconv.Itoa(i), i)
	}
	if *pid != 0 {
		if err := exec.Command("callgrind_control", "-z", strconv.Itoa(*pid)).Run(); err != nil {
			log.Fatal(err)
		}
	}
	var prof *luaprof.Prof
	if *lp > 0 {
		if prof, err = luaprof.Hook(ctx, c); err != nil {
			log.Fatal(err)
		}
	}
	t1 := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < *conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < *n; i += *conc {
				do(strconv.Itoa(i%*keys), *keys+i)
			}
		}(g)
	}
	wg.Wait()
	if *pid != 0 {
		if err := exec.Command("callgrind_control", "-d", strconv.Itoa(*pid)).Run(); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Fprintf(os.Stderr, "cgprobe: %d %s in %v\n", *n, *op, time.Since(t1))
	if prof != nil {
		lines, err := prof.Lines(ctx)
		if err != nil {
			log.Fatal(err)
		}
		luaprof.Report(os.Stdout, lines, *n, *lp)
	}
}
