package backend

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// A Library is scripts that share their leading fragments, as one Redis
// Functions library (Redis >= 7.0, Valkey): FUNCTION LOAD defines the shared
// Lua once per server, and each script becomes a function that FCALL runs.
// EVALSHA, by contrast, runs a script's whole source on every call, every
// definition included: a hundred closures made, and collected, per call.
//
// The library's source is the scripts' shared fragments, once, then each
// script's last fragment (its body) as a function of its own:
//
//	#!lua name=ws_nativehash_plain_<hash>
//	local KEYS, ARGV                 set by each function from its arguments
//	-- @file backend/constants ...   the shared fragments, in order
//	local function ws_main_1()       a script's body, as it runs under EVALSHA
//	-- @file backend/lua/write.lua
//	...
//	end
//	redis.register_function{function_name = 'ws_..._write', callback = ...}
//
// The name holds a hash of the source, so that two versions of windowstore
// load two libraries side by side rather than replace each other's.
type Library struct {
	name, src string
	segs      segments
}

var fnName = regexp.MustCompile(`[^a-zA-Z0-9_]+`)

// NewLibrary makes a library of scripts, named after prefix (letters, digits
// and underscores are kept): each script's last fragment is its body, the
// others are shared, and every script must have the same ones, in the same
// order. Each script's function is named after the last word of its name
// ("nativehash-plain write": ..._write). A script belongs to one library.
func NewLibrary(prefix string, scripts ...*Script) *Library {
	shared := scripts[0].frags[:len(scripts[0].frags)-1]
	for _, s := range scripts[1:] {
		f := s.frags[:len(s.frags)-1]
		if len(f) != len(shared) {
			panic("backend: the scripts of a library must share their leading fragments")
		}
		for i := range f {
			if f[i].Name != shared[i].Name {
				panic("backend: the scripts of a library must share their leading fragments")
			}
		}
	}
	// The name holds a hash of the body: the source after the shebang line.
	a := newAssembler()
	a.text("local KEYS, ARGV\n")
	for _, f := range shared {
		a.frag(f)
	}
	for i, s := range scripts {
		a.text(fmt.Sprintf("local function ws_main_%d()\n", i+1))
		a.frag(s.frags[len(s.frags)-1])
		a.text("end\n")
	}
	h := sha1.Sum([]byte(a.b.String()))
	name := fnName.ReplaceAllString(prefix, "_") + "_" + hex.EncodeToString(h[:6])
	l := &Library{name: name}
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	b.WriteString(a.b.String())
	for i, s := range scripts {
		words := strings.Fields(s.name)
		s.fn = name + "_" + fnName.ReplaceAllString(words[len(words)-1], "_")
		flags := ""
		if s.readOnly {
			flags = ", flags = {'no-writes'}"
		}
		fmt.Fprintf(&b, "redis.register_function{function_name = '%s', callback = function(k, a) KEYS, ARGV = k, a return ws_main_%d() end%s}\n", s.fn, i+1, flags)
		s.lib = l
	}
	l.src = b.String()
	// The shebang line comes first: the segments move down by one.
	for _, g := range a.segs {
		l.segs = append(l.segs, segment{file: g.file, first: g.first + 1, last: g.last + 1})
	}
	return l
}

// Name returns the library's name, as FUNCTION LIST shows it.
func (l *Library) Name() string { return l.name }

// Source returns the library's source, as FUNCTION LOAD takes it.
func (l *Library) Source() string { return l.src }

// Locate maps a line of the library's source to the fragment's own file and
// line, as Script.Locate does for a script's.
func (l *Library) Locate(line int) (file string, fileLine int) { return l.segs.locate(line) }

// A Runner runs scripts on one client: as functions (FCALL, FCALL_RO) when
// the script belongs to a Library and the server takes functions, else with
// EVALSHA (and EVAL when the server lacks the script). The first call that
// finds its library missing (a new server, a restart, a new cluster node)
// loads it on every node (FUNCTION LOAD), and runs again. A server that
// refuses functions (an ACL without +fcall, +fcall_ro or +function|load, a
// proxy that does not know FCALL) makes the Runner use EVALSHA from then on.
//
// A Runner is safe for concurrent use. Its zero value is not usable; create
// one with NewRunner.
type Runner struct {
	c       rueidis.Client
	scripts atomic.Bool // functions were refused: EVALSHA for good
	mu      sync.Mutex  // serializes loads
}

// NewRunner returns a Runner on c. With functions false it always uses
// EVALSHA.
func NewRunner(c rueidis.Client, functions bool) *Runner {
	r := &Runner{c: c}
	r.scripts.Store(!functions)
	return r
}

// Functions reports whether the Runner still runs scripts as functions: false
// once a server refused them, or when it was made without.
func (r *Runner) Functions() bool { return !r.scripts.Load() }

// Exec runs s on one key set: one round trip, or two the first time a server
// meets the script or its library.
func (r *Runner) Exec(ctx context.Context, s *Script, keys, args []string) rueidis.RedisResult {
	return r.ExecMulti(ctx, s, []Call{{Keys: keys, Args: args}})[0]
}

// ExecMulti runs s once per call in one pipelined batch (on a cluster client,
// one batch per node, sent in parallel), as Script.ExecMulti does.
func (r *Runner) ExecMulti(ctx context.Context, s *Script, calls []Call) []rueidis.RedisResult {
	if s.lib == nil || r.scripts.Load() {
		return s.ExecMulti(ctx, r.c, calls)
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, k := range calls {
		cmds[i] = s.fcall(r.c, k)
	}
	res := r.c.DoMulti(ctx, cmds...)
	var missing, refused []int
	for i, x := range res {
		switch fcallError(x.Error()) {
		case fnMissing:
			missing = append(missing, i)
		case fnRefused:
			refused = append(refused, i)
		}
	}
	if len(refused) > 0 {
		r.scripts.Store(true)
		missing = append(missing, refused...)
	}
	if len(missing) == 0 {
		return res
	}
	if !r.scripts.Load() {
		if err := r.load(ctx, s.lib); err != nil {
			for _, i := range missing {
				res[i] = rueidis.NewErrorResult(err)
			}
			return res
		}
	}
	again := make([]Call, len(missing))
	for j, i := range missing {
		again[j] = calls[i]
	}
	var second []rueidis.RedisResult
	if r.scripts.Load() {
		second = s.ExecMulti(ctx, r.c, again)
	} else {
		cmds = cmds[:0]
		for _, k := range again {
			cmds = append(cmds, s.fcall(r.c, k))
		}
		second = r.c.DoMulti(ctx, cmds...)
	}
	for j, i := range missing {
		res[i] = second[j]
	}
	return res
}

// load loads l on every node of the client. A node that already has it, or
// a replica (which gets it from its primary), is fine. A refusal switches
// the Runner to EVALSHA and is not an error; a network error is.
func (r *Runner) load(ctx context.Context, l *Library) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.scripts.Load() {
		return nil
	}
	nodes := r.c.Nodes()
	var errs []error
	for _, n := range nodes {
		err := n.Do(ctx, n.B().FunctionLoad().FunctionCode(l.src).Build()).Error()
		if err == nil {
			continue
		}
		re, ok := rueidis.IsRedisErr(err)
		switch {
		case !ok:
			errs = append(errs, err)
		case strings.Contains(re.Error(), "already exists"), strings.HasPrefix(re.Error(), "READONLY"):
		default:
			// NOPERM, an unknown command, functions disabled: scripts then.
			r.scripts.Store(true)
			return nil
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("backend: loading library %s: %w", l.name, errors.Join(errs...))
	}
	return nil
}

type fnErr int

const (
	fnOK      fnErr = iota
	fnMissing       // the server lacks the library: load it
	fnRefused       // the server refuses functions: use EVALSHA
)

// fcallError tells the errors of FCALL itself from those of the function.
func fcallError(err error) fnErr {
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return fnOK
	}
	msg := re.Error()
	switch {
	case strings.Contains(msg, "Function not found"):
		return fnMissing
	case strings.HasPrefix(msg, "NOPERM") && (strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'fcall_ro'")),
		strings.Contains(msg, "unknown command") && strings.Contains(strings.ToLower(msg), "fcall"):
		return fnRefused
	}
	return fnOK
}

func (s *Script) fcall(c rueidis.Client, k Call) rueidis.Completed {
	if s.readOnly {
		return c.B().FcallRo().Function(s.fn).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
	}
	return c.B().Fcall().Function(s.fn).Numkeys(int64(len(k.Keys))).Key(k.Keys...).Arg(k.Args...).Build()
}
