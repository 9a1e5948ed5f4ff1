// Package luaprof counts the Lua VM instructions that windowstore's scripts
// run, line by line, on a Redis whose Lua keeps its debug library (stock
// Redis removes it; scripts/luaprof.sh builds one that keeps it). Hook
// replaces each of the store's loaded libraries by a copy of itself, under
// the same name (so the store goes on calling it), whose functions run under
// a count hook; Report reads the counts and maps each line back to its file
// by the library's "-- @file" markers. The count is the same from run to
// run, so it says what a change of a script moves.
package luaprof

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Prof is the libraries Hook replaced.
type Prof struct {
	c    rueidis.Client
	libs []*library
}

type library struct {
	name  string
	lines []string // the hooked source, line by line
}

// hookDef is appended to the line that declares KEYS and ARGV, so that the
// source keeps its line numbers: it counts each instruction by its line.
const hookDef = "; local ws__n = {}; local function ws__hook() local x = debug.getinfo(2, 'l').currentline; " +
	"ws__n[x] = (ws__n[x] or 0) + 1 end"

var callback = regexp.MustCompile(`return (ws_main_\d+)\(\) end`)

// Hook replaces every library whose name starts with "ws_" (the store's and
// the limiters' that a first call loaded) by its hooked copy, with a function
// NAME_prof that answers the counts and forgets them.
func Hook(ctx context.Context, c rueidis.Client) (*Prof, error) {
	list, err := c.Do(ctx, c.B().FunctionList().Withcode().Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("luaprof: FUNCTION LIST: %w", err)
	}
	p := &Prof{c: c}
	for _, l := range list {
		m, err := l.AsMap()
		if err != nil {
			return nil, fmt.Errorf("luaprof: FUNCTION LIST: %w", err)
		}
		nm, cm := m["library_name"], m["library_code"]
		name, _ := nm.ToString()
		code, _ := cm.ToString()
		if !strings.HasPrefix(name, "ws_") {
			continue
		}
		lines, ok := patch(name, code)
		if !ok {
			continue
		}
		src := strings.Join(lines, "\n")
		if err := c.Do(ctx, c.B().FunctionLoad().Replace().FunctionCode(src).Build()).Error(); err != nil {
			return nil, fmt.Errorf("luaprof: FUNCTION LOAD %s: %w", name, err)
		}
		p.libs = append(p.libs, &library{name: name, lines: lines})
	}
	if len(p.libs) == 0 {
		return nil, fmt.Errorf("luaprof: no windowstore library is loaded (run an operation first)")
	}
	return p, p.Reset(ctx)
}

// patch is a library's source, line by line, with the count hook: defined on
// the line that declares KEYS and ARGV (so that every line keeps its number),
// set around each function's body, and a function NAME_prof appended. ok is
// false for a source that declares no KEYS and ARGV.
func patch(name, code string) (lines []string, ok bool) {
	lines = strings.Split(code, "\n")
	for i, s := range lines {
		if strings.HasPrefix(s, "local KEYS, ARGV") {
			lines[i], ok = s+hookDef, true
		}
		lines[i] = callback.ReplaceAllString(lines[i], "debug.sethook(ws__hook, '', 1) "+
			"local ok, r = pcall(${1}) debug.sethook() if not ok then error(r, 0) end return r end")
	}
	lines = append(lines, "redis.register_function{function_name = '"+name+"_prof', callback = function(k, a) "+
		"if type(debug) ~= 'table' then return redis.error_reply('no debug library') end "+
		"local o = {} for x, n in pairs(ws__n) do o[#o + 1] = x .. ' ' .. n end ws__n = {} return o end}")
	return lines, ok
}

// locate is the file and the line within it of line ln (from 1) of a
// library: by the last "-- @file" marker before it (the marker's line is 0).
func locate(lines []string, ln int) (string, int) {
	if ln >= 1 && ln <= len(lines) && strings.HasPrefix(lines[ln-1], "redis.register_function") {
		return "(the function's call, with the hook)", 0
	}
	for i := min(ln, len(lines)) - 1; i >= 0; i-- {
		if f, ok := strings.CutPrefix(lines[i], "-- @file "); ok {
			return strings.TrimSpace(f), ln - (i + 1)
		}
	}
	return "?", ln
}

// counts reads and forgets each library's counts, by line (from 1).
func (p *Prof) counts(ctx context.Context, l *library) (map[int]int64, error) {
	rows, err := p.c.Do(ctx, p.c.B().Fcall().Function(l.name+"_prof").Numkeys(0).Build()).AsStrSlice()
	if err != nil {
		if strings.Contains(err.Error(), "no debug library") || strings.Contains(err.Error(), "nonexistent global variable 'debug'") {
			return nil, fmt.Errorf("luaprof: this server's Lua has no debug library: profile on the Redis that scripts/luaprof.sh builds")
		}
		return nil, fmt.Errorf("luaprof: %w", err)
	}
	out := map[int]int64{}
	for _, r := range rows {
		a, b, _ := strings.Cut(r, " ")
		line, err1 := strconv.Atoi(a)
		n, err2 := strconv.ParseInt(b, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("luaprof: a count %q", r)
		}
		out[line] += n
	}
	return out, nil
}

// Reset forgets the counts so far (a warm-up's).
func (p *Prof) Reset(ctx context.Context) error {
	for _, l := range p.libs {
		if _, err := p.counts(ctx, l); err != nil {
			return err
		}
	}
	return nil
}

// A Line is one source line's count.
type Line struct {
	File  string // the fragment's file, as its "-- @file" marker names it
	Line  int    // within the file (from 1, the marker's line being 0)
	Text  string
	Count int64
}

// Lines reads the counts since the last Reset (or Lines), of every library,
// the most first.
func (p *Prof) Lines(ctx context.Context) ([]Line, error) {
	var out []Line
	for _, l := range p.libs {
		n, err := p.counts(ctx, l)
		if err != nil {
			return nil, err
		}
		for ln, c := range n {
			file, at := locate(l.lines, ln)
			text := ""
			if ln >= 1 && ln <= len(l.lines) {
				text = strings.TrimSpace(l.lines[ln-1])
			}
			out = append(out, Line{File: file, Line: at, Text: text, Count: c})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].File < out[j].File || out[i].File == out[j].File && out[i].Line < out[j].Line
	})
	return out, nil
}

// Report writes the counts since the last Reset per operation (ops of them):
// the total, each file's, and the top lines.
func Report(w io.Writer, lines []Line, ops, top int) {
	var total int64
	files := map[string]int64{}
	for _, l := range lines {
		total += l.Count
		files[l.File] += l.Count
	}
	per := func(n int64) float64 { return float64(n) / float64(max(ops, 1)) }
	fmt.Fprintf(w, "Lua instructions per operation: %.1f (%d operations)\n\nby file:\n", per(total), ops)
	var names []string
	for f := range files {
		names = append(names, f)
	}
	sort.Slice(names, func(i, j int) bool { return files[names[i]] > files[names[j]] })
	for _, f := range names {
		fmt.Fprintf(w, "%9.1f  %s\n", per(files[f]), f)
	}
	fmt.Fprintf(w, "\nby line:\n")
	for i, l := range lines {
		if i == top {
			break
		}
		text := l.Text
		if len(text) > 90 {
			text = text[:90] + "..."
		}
		fmt.Fprintf(w, "%9.1f  %s:%d  %s\n", per(l.Count), l.File, l.Line, text)
	}
}
