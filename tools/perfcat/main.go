// Command perfcat sorts the samples of a Redis server's CPU profile into
// where a script call's time goes: the script's own Lua, the commands it
// calls (each by name), what redis.call costs around them, the FCALL's
// argument tables and reply, Lua's garbage collector, and the reading,
// writing and waiting every request pays. It reads `perf script` text (a
// profile recorded with call graphs, -g, of a redis-server built with
// symbols) on stdin:
//
//	perf script -i perf.data | go run ./tools/perfcat -us 6.72
//
// With -us (the server µs per operation that tools/bench measured over
// the same run) each share is also given in µs per operation. A sample is
// put in the first category, in the order below, whose frame it has: so a
// command called by the script counts as that command, not as Lua.
// scripts/profile.sh records and sorts a profile per operation.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// category names a share of the server's time.
const (
	catCommand  = "commands called by the script (bodies)"
	catDispatch = "redis.call: lookup, checks, call()"
	catConvert  = "redis.call: arguments and reply to and from Lua"
	catFcall    = "FCALL: KEYS/ARGV tables and reply"
	catGC       = "Lua garbage collector"
	catLua      = "Lua: the script's own code"
	catOther    = "other commands (FCALL, raw commands)"
	catRead     = "reading and parsing requests (syscalls included)"
	catWrite    = "writing replies (syscalls included)"
	catLoop     = "event loop, waiting, waking (kernel included)"
)

// classify puts one sample's stack (leaf first) in a category; for a command
// called by a script, cmd is the command's function (hmgetCommand).
func classify(stack []string) (cat, cmd string) {
	at := map[string]int{}
	for i, f := range stack {
		if _, ok := at[f]; !ok {
			at[f] = i
		}
	}
	has := func(f string) bool { _, ok := at[f]; return ok }
	switch {
	case has("scriptCall"):
		// call() under scriptCall runs the command: the frame below call is
		// the command's function.
		if i, ok := at["call"]; ok && i > 0 && i < at["scriptCall"] && strings.HasSuffix(stack[i-1], "Command") {
			return catCommand, stack[i-1]
		}
		return catDispatch, ""
	case has("luaRedisGenericCommand"):
		return catConvert, ""
	case has("luaCreateArray"), has("luaReplyToRedisReply"):
		return catFcall, ""
	case has("luaC_step"), has("lua_gc"), has("luaC_fullgc"):
		return catGC, ""
	case has("luaV_execute"), has("lua_pcall"):
		return catLua, ""
	case has("call"):
		return catOther, ""
	case has("processInputBuffer"), has("readQueryFromClient"):
		return catRead, ""
	case has("writeToClient"), has("handleClientsWithPendingWrites"):
		return catWrite, ""
	}
	return catLoop, ""
}

// profile is the samples counted by category and by called command.
type profile struct {
	total int
	cats  map[string]int
	cmds  map[string]int
}

// read parses perf script's text: a header line per sample, then one line
// per frame ("\taddress symbol+offset (object)"), then a blank line.
func read(r io.Reader) (*profile, error) {
	p := &profile{cats: map[string]int{}, cmds: map[string]int{}}
	var stack []string
	in := false
	flush := func() {
		if in && len(stack) > 0 {
			cat, cmd := classify(stack)
			p.total++
			p.cats[cat]++
			if cmd != "" {
				p.cmds[cmd]++
			}
		}
		stack, in = stack[:0], false
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] != ' ' && line[0] != '\t':
			flush()
			in = true
		default:
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			sym := f[1]
			if i := strings.LastIndex(sym, "+0x"); i > 0 {
				sym = sym[:i]
			}
			stack = append(stack, sym)
		}
	}
	flush()
	return p, sc.Err()
}

// print writes the table, largest share first.
func (p *profile) print(w io.Writer, us float64) {
	type row struct {
		name string
		n    int
	}
	sorted := func(m map[string]int) []row {
		var rs []row
		for k, v := range m {
			rs = append(rs, row{k, v})
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n || rs[i].n == rs[j].n && rs[i].name < rs[j].name })
		return rs
	}
	share := func(n int) string {
		s := fmt.Sprintf("%5.1f%%", 100*float64(n)/float64(p.total))
		if us > 0 {
			s += fmt.Sprintf("  %6.2f µs", us*float64(n)/float64(p.total))
		}
		return s
	}
	fmt.Fprintf(w, "%d samples\n", p.total)
	for _, r := range sorted(p.cats) {
		fmt.Fprintf(w, "  %s  %s\n", share(r.n), r.name)
		if r.name == catCommand {
			for _, c := range sorted(p.cmds) {
				fmt.Fprintf(w, "      %s    %s\n", share(c.n), c.name)
			}
		}
	}
}

func main() {
	us := flag.Float64("us", 0, "the server `µs` per operation over the profiled run, to give each share in µs")
	flag.Parse()
	p, err := read(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfcat:", err)
		os.Exit(1)
	}
	if p.total == 0 {
		fmt.Fprintln(os.Stderr, "perfcat: no samples on stdin (expected the text of perf script)")
		os.Exit(1)
	}
	p.print(os.Stdout, *us)
}
