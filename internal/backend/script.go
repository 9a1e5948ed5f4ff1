package backend

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Script is a Lua script assembled from fragments, run with EVALSHA and
// falling back to EVAL when the server does not have it cached (NOSCRIPT). It
// is safe for concurrent use.
type Script struct {
	name     string
	src, sha string
	readOnly bool
	lua      *rueidis.Lua
	segs     segments
	frags    []Fragment
	lib      *Library // nil unless NewLibrary took the script
	fn       string   // its function's name in lib
}

// segment is where a fragment lies in the assembled source.
type segment struct {
	file        string
	first, last int // lines of the assembled source, 1-based, inclusive
}

// segments maps the lines of an assembled source to its fragments.
type segments []segment

// locate maps a line of the assembled source to the file it comes from and
// the line in that file: "", 0 for a line outside every fragment.
func (ss segments) locate(line int) (file string, fileLine int) {
	for _, g := range ss {
		if line >= g.first && line <= g.last {
			return g.file, line - g.first + 1
		}
	}
	return "", 0
}

// assembler builds Lua source from fragments and glue text: the one place
// where scripts and libraries are assembled. Each fragment is preceded by a
// marker line "-- @file NAME", and its place is recorded, so that a server's
// error line can be traced back to the fragment's own file.
type assembler struct {
	b    strings.Builder
	line int // the line the next text starts on, 1-based
	segs segments
}

func newAssembler() *assembler { return &assembler{line: 1} }

// text appends glue text, whole lines.
func (a *assembler) text(s string) {
	a.b.WriteString(s)
	a.line += strings.Count(s, "\n")
}

// frag appends a fragment after its marker line.
func (a *assembler) frag(f Fragment) {
	src := strings.TrimRight(f.Src, "\n") + "\n"
	a.text("-- @file " + f.Name + "\n")
	a.segs = append(a.segs, segment{file: f.Name, first: a.line, last: a.line + strings.Count(src, "\n") - 1})
	a.text(src)
}

// NewScript assembles a script from fragments, each preceded by a marker line
// "-- @file NAME". name names the script in errors ("nativehash-plain write").
// A read-only script runs with EVALSHA_RO / EVAL_RO, so a replica can serve it.
//
// The last fragment, the script's body, runs as a function, as a library's
// body does (see NewLibrary): its locals are the function's, not the
// chunk's, and Lua allows a function 200 of them.
func NewScript(name string, readOnly bool, frags ...Fragment) *Script {
	a := newAssembler()
	for i, f := range frags {
		if i == len(frags)-1 && i > 0 {
			a.text("local function ws_main()\n")
			a.frag(f)
			a.text("end\nreturn ws_main()\n")
			continue
		}
		a.frag(f)
	}
	s := &Script{name: name, readOnly: readOnly, frags: frags, src: a.b.String(), segs: a.segs}
	h := sha1.Sum([]byte(s.src))
	s.sha = hex.EncodeToString(h[:])
	if readOnly {
		s.lua = rueidis.NewLuaScriptReadOnly(s.src)
	} else {
		s.lua = rueidis.NewLuaScript(s.src)
	}
	return s
}

// callRE matches a command call in Lua: redis.call or redis.pcall and the
// command's name, when it is a literal.
var callRE = regexp.MustCompile(`redis\.p?call\(\s*('([A-Za-z|]+)'|[^'\s])`)

// Commands lists the commands the script may call, upper case, sorted, once
// each: what an ACL rule must allow, besides EVALSHA and EVAL (EVALSHA_RO and
// EVAL_RO for a read-only script). A call whose command is not a literal is
// listed as "?": the scripts have none, and their tests check it.
func (s *Script) Commands() []string { return s.CommandsOutside() }

// CommandsOutside is Commands without the calls of the fragments of the
// given files ("backend/lua/distinct.lua"): for checks that concern one kind
// of key, such as a backend's counters but not the distinct counts'
// HyperLogLogs, which are core Redis keys on every backend.
func (s *Script) CommandsOutside(files ...string) []string {
	seen := map[string]bool{}
	var out []string
	for i, line := range strings.Split(s.src, "\n") {
		if f, _ := s.Locate(i + 1); slices.Contains(files, f) {
			continue
		}
		for _, m := range callRE.FindAllStringSubmatch(line, -1) {
			c := strings.ToUpper(m[2])
			if m[2] == "" {
				c = "?"
			}
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Function returns the name of the script's function in its Library ("" when
// it has none), as FCALL takes it.
func (s *Script) Function() string { return s.fn }

// Library returns the Functions library the script belongs to, nil when it
// has none.
func (s *Script) Library() *Library { return s.lib }

// Name returns the script's name.
func (s *Script) Name() string { return s.name }

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.src }

// SHA1 returns the script's SHA-1, as SCRIPT LOAD would answer it.
func (s *Script) SHA1() string { return s.sha }

// ReadOnly reports whether the script runs with EVALSHA_RO.
func (s *Script) ReadOnly() bool { return s.readOnly }

// Locate maps a line of the assembled source (as a server reports it,
// "user_script:LINE") to the file it comes from and the line in that file. It
// answers "", 0 for a line outside every fragment.
func (s *Script) Locate(line int) (file string, fileLine int) { return s.segs.locate(line) }

// Exec runs the script on one key: one round trip, or two the first time a
// server sees the script. Errors are *ScriptError where the server answered
// with one.
func (s *Script) Exec(ctx context.Context, c rueidis.Client, keys, args []string) rueidis.RedisResult {
	return s.lua.Exec(ctx, c, keys, args)
}

// Call is one run of a script in ExecMulti.
type Call struct {
	Keys []string
	Args []string
}

// ExecMulti runs the script once per call in one pipelined batch (on a cluster
// client, one batch per node, sent in parallel). Calls that meet a server that
// lacks the script are sent again, as EVAL, in a second batch; so a warm server
// costs one round trip. Unlike rueidis.Lua.ExecMulti it does not SCRIPT LOAD on
// every node first.
func (s *Script) ExecMulti(ctx context.Context, c rueidis.Client, calls []Call) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(calls))
	for i, k := range calls {
		cmds[i] = s.evalsha(c, k)
	}
	res := c.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range res {
		if e, ok := rueidis.IsRedisErr(r.Error()); ok && e.IsNoScript() {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return res
	}
	cmds = cmds[:0]
	for _, i := range again {
		cmds = append(cmds, s.eval(c, calls[i]))
	}
	for j, r := range c.DoMulti(ctx, cmds...) {
		res[again[j]] = r
	}
	return res
}

func (s *Script) evalsha(c rueidis.Client, k Call) rueidis.Completed {
	if s.readOnly {
		return c.B().EvalshaRo().Sha1(s.sha).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
	}
	return c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
}

func (s *Script) eval(c rueidis.Client, k Call) rueidis.Completed {
	if s.readOnly {
		return c.B().EvalRo().Script(s.src).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
	}
	return c.B().Eval().Script(s.src).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
}

// ScriptError is an error reply that came out of a script, split into what a
// caller needs (Code, Message) and what a developer needs to find where it was
// raised (Script, SHA, File, Line). Its Error() is "CODE message", with no
// script location.
type ScriptError struct {
	Code    string // the reply's first word: "WSOVERFLOW", "WRONGTYPE", "ERR", ...
	Message string // the rest, without the location and without "windowstore: "
	Script  string // the script's name, e.g. "nativehash-plain write"
	SHA     string // the script's SHA-1, when the server named it
	Func    string // the function's name, when it ran as one (FCALL)
	File    string // the Lua file where it was raised, when the server gave a line
	Line    int    // the line in File
	Raw     string // the reply as the server sent it
}

func (e *ScriptError) Error() string { return strings.TrimSpace(e.Code + " " + e.Message) }

var (
	// " script: <sha>, on @user_script:<line>." that Redis 7+ appends to a
	// script's errors; " script: <function>, on @user_function:<line>." to a
	// function's.
	scriptSuffix = regexp.MustCompile(`\s*script: ([0-9a-zA-Z_]+), on @user_(script|function):(\d+)\.?\s*$`)
	// The code an error reply starts with: WRONGTYPE, NOPERM, WSOVERFLOW...
	errorCode = regexp.MustCompile(`^[A-Z][A-Z_]+$`)
	// "user_script:<line>: " that Lua puts before a runtime error.
	userScript = regexp.MustCompile(`@?user_(?:script|function):(\d+):\s*`)
)

// AsScriptError turns a server's error reply from this script into a
// *ScriptError. Other errors (network, context) are returned as they are.
func (s *Script) AsScriptError(err error) error {
	if err == nil {
		return nil
	}
	var se *ScriptError
	if errors.As(err, &se) {
		return err
	}
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return err
	}
	return s.parse(re.Error())
}

func (s *Script) parse(raw string) *ScriptError {
	e := &ScriptError{Script: s.name, Raw: raw}
	msg := raw
	line, function := 0, false
	if m := scriptSuffix.FindStringSubmatchIndex(msg); m != nil {
		function = msg[m[4]:m[5]] == "function"
		if function {
			e.Func = msg[m[2]:m[3]]
		} else {
			e.SHA = msg[m[2]:m[3]]
		}
		line, _ = strconv.Atoi(msg[m[6]:m[7]])
		msg = msg[:m[0]]
	}
	if m := userScript.FindStringSubmatchIndex(msg); m != nil {
		line, _ = strconv.Atoi(msg[m[2]:m[3]])
		msg = msg[:m[0]] + msg[m[1]:]
	}
	if line > 0 {
		if function && s.lib != nil {
			e.File, e.Line = s.lib.Locate(line)
		} else if !function {
			e.File, e.Line = s.Locate(line)
		}
	}
	msg = strings.TrimSpace(msg)
	e.Code = "ERR" // rueidis drops the ERR of a plain error reply
	if code, rest, ok := strings.Cut(msg, " "); ok && errorCode.MatchString(code) {
		e.Code, msg = code, rest
	}
	e.Message = strings.TrimPrefix(strings.TrimSpace(msg), "windowstore: ")
	return e
}
