// Command wab compares two versions of limit.NewWindows' script (A/B) on one
// server, for tuning the script: each version is loaded as a script of its
// own (base.lua, then the version), and phases of the same traffic
// alternate between them, each version on keys of its own (under "wab:"),
// so that both see the machine as it is at nearly the same time. It prints
// each version's server CPU per operation (INFO cpu around each phase:
// median and range of its phases) and B/A: the median and range of the
// ratios of adjacent phases, and the ratio of the medians. On a shared
// machine, B/A of a version against itself (an A/A control) is worth
// running first: it shows the noise.
//
// Run it from the repository's root against a server of its own, pinned
// to a core the command does not run on (the names of the windows and of
// base.lua are the repository's):
//
//	git show HEAD~1:internal/limitlua/lua/windows.lua > /tmp/old.lua
//	taskset -c 0 go run ./tools/wab --addr 127.0.0.1:6379 --a /tmp/old.lua --b internal/limitlua/lua/windows.lua
//
// Every operation is an admitted cost of 1 (limits of 2^50) on a key drawn
// at random from --keys, --per operations per script call, from --callers
// concurrent callers. --windows gives the windows as bucket ms:buckets:
// fewer keys make a steady stream, more keys make keys idle between their
// operations (its marks move, buckets start).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/figures/render"
	"github.com/windowstore/windowstore/tools/internal/serverstat"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "server")
	base := flag.String("base", "internal/backend/lua/base.lua", "base.lua, loaded before each version")
	fa := flag.String("a", "", "version A of windows.lua (required)")
	fb := flag.String("b", "internal/limitlua/lua/windows.lua", "version B of windows.lua")
	nkeys := flag.Int("keys", 2000, "keys per variant")
	per := flag.Int("per", 8, "operations per script call")
	callers := flag.Int("callers", 32, "concurrent callers")
	phases := flag.Int("phases", 20, "phases (alternating A, B)")
	phase := flag.Duration("phase", 1500*time.Millisecond, "length of a phase")
	shape := flag.String("windows", "1000:10,10000:10,100000:10", "windows: bucket ms:buckets, ...")
	flag.Parse()
	if *fa == "" || *phases < 2 {
		log.Fatal("wab: --a names version A of windows.lua; --phases is at least 2")
	}
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*addr}, DisableCache: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			log.Fatal(err)
		}
		return string(b)
	}
	bs := read(*base)
	scripts := []*rueidis.Lua{rueidis.NewLuaScript(bs + "\n" + read(*fa)), rueidis.NewLuaScript(bs + "\n" + read(*fb) + "\n-- b")}
	var hdr []string
	ws := strings.Split(*shape, ",")
	longest := int64(0)
	for i, w := range ws {
		b, n, _ := strings.Cut(w, ":")
		bi, _ := strconv.ParseInt(b, 10, 64)
		ni, _ := strconv.ParseInt(n, 10, 64)
		longest = max(longest, bi*ni)
		k := strconv.Itoa(i + 1)
		hdr = append(hdr, b, n, strconv.FormatInt(1<<50, 10), "m"+k, "v"+k)
	}
	hdr = append([]string{"", strconv.FormatInt(max(1, longest/4), 10), strconv.Itoa(len(ws))}, hdr...)
	keys := func(v, i int) []string {
		first := fmt.Sprintf("wab:%c:{%d}", 'A'+v, i)
		ks := []string{first}
		for j := 2; j <= len(ws); j++ {
			ks = append(ks, first+":"+strconv.Itoa(j))
		}
		return ks
	}
	run := func(v int, d time.Duration) (ops int64, errs int64) {
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for g := 0; g < *callers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					var ks []string
					args := append([]string(nil), hdr...)
					for j := 0; j < *per; j++ {
						ks = append(ks, keys(v, rand.IntN(*nkeys))...)
						args = append(args, "1")
					}
					r, err := scripts[v].Exec(ctx, c, ks, args).ToArray()
					if err != nil {
						atomic.AddInt64(&errs, 1)
						continue
					}
					for _, x := range r {
						if x.Error() != nil {
							atomic.AddInt64(&errs, 1)
						}
					}
					atomic.AddInt64(&ops, int64(*per))
				}
			}()
		}
		wg.Wait()
		return
	}
	// Warm up both.
	run(0, *phase/2)
	run(1, *phase/2)
	us := [2][]float64{}
	var ratios []float64
	for p := 0; p < *phases; p++ {
		v := p % 2
		c0 := serverstat.CPU(ctx, c)
		ops, errs := run(v, *phase)
		c1 := serverstat.CPU(ctx, c)
		x := (c1 - c0) / float64(ops)
		us[v] = append(us[v], x)
		if errs > 0 {
			log.Printf("phase %d (%c): %d errors", p, 'A'+v, errs)
		}
		if v == 1 {
			ratios = append(ratios, x/us[0][len(us[0])-1])
		}
	}
	ma, la, ha := render.Median(us[0])
	mb, lb, hb := render.Median(us[1])
	mr, lr, hr := render.Median(ratios)
	fmt.Printf("A %.2f µs/op (%.2f-%.2f)  B %.2f (%.2f-%.2f)  B/A pairs %.3f (%.3f-%.3f)  medians %.3f\n",
		ma, la, ha, mb, lb, hb, mr, lr, hr, mb/ma)
}
