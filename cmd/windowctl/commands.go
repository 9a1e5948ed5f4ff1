package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/windowstore/windowstore/store"
)

// command is one entry of windowctl's table of commands: the only place its
// usage is written. The global usage, `windowctl help NAME` and
// `windowctl NAME --help` are all made from it.
type command struct {
	name    string
	args    string // what follows the name in a synopsis: "KEY [DELTA]"
	summary string // one line, for the global usage
	details string // what `help NAME` adds: what it does, its output
	json    string // what --json prints; "" for text only (help)
	// local marks the commands that need no server and ignore the server
	// flags (help, version): their flags are not checked.
	local bool
	// setup adds the command's own flags to fs and returns check, which
	// checks the positional arguments and those flags once they are parsed,
	// and returns what the command does. Nothing is sent before check returns.
	setup func(fs *flag.FlagSet) (check func(pos []string) (action, error))
}

// action is a command with its arguments checked.
type action func(e *env) error

// env is what an action runs with.
type env struct {
	g      *globals
	p      *printer
	stdout io.Writer
	stderr io.Writer
}

// onStore runs fn on a store made from the global flags, under --timeout.
func (e *env) onStore(fn func(ctx context.Context, c *cli) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.g.timeout)
	defer cancel()
	client, err := connect(e.g)
	if err != nil {
		return err
	}
	defer client.Close()
	st, err := store.New(ctx, client, e.g.storeWindow(), store.WithBackend(store.Backend(e.g.backend)), store.WithPrefix(e.g.prefix))
	if err != nil {
		return err
	}
	return fn(ctx, &cli{st: st, p: e.p, prefix: e.g.prefix, backend: e.g.backend})
}

// commands is the table, in the order of the global usage.
var commands []*command

func init() {
	commands = []*command{
		{
			name:    "detect",
			summary: "the server's backend, and why",
			details: "Connects, detects the best backend the server offers (or checks the one\n" +
				"--backend forces) and prints it with the server's name, version and modules.",
			json:  `{"backend":"nativehash-plain","field_ttl":false,"server":"redis","version":"7.0.15","modules":[],"reason":"…"}`,
			setup: noArgs("detect", func(ctx context.Context, c *cli) error { return c.detect(ctx) }),
		},
		{
			name:    "add",
			args:    "KEY [DELTA]",
			summary: "add DELTA (default 1) and print the window sum",
			details: "Adds DELTA (an integer, default 1; it may be negative) to the current bucket\n" +
				"of KEY and prints the window sum, in one round trip.\n" +
				"With --id, an event of that id seen within the window counts nothing: it\n" +
				"prints the sum now and \"duplicate\":true. With --at, the event counts in the\n" +
				"bucket of its own time: late events (inside the window) never delete newer\n" +
				"buckets; one older than the window, or more than 5s ahead of the clock, is\n" +
				"refused (exit 1) and nothing is written.\n" +
				"Text: KEY<TAB>SUM.",
			json: `{"key":K,"sum":N}; with --id or --at {"key":K,"sum":N,"duplicate":bool}`,
			setup: func(fs *flag.FlagSet) func([]string) (action, error) {
				id := fs.String("id", "", "the event's `ID`: a repeated ID within the window counts nothing")
				at := fs.String("at", "", "the event's `TIME` (RFC 3339), for a late or out-of-order event")
				return func(pos []string) (action, error) {
					if len(pos) < 1 || len(pos) > 2 {
						return nil, synopsisError("add")
					}
					if err := checkKeys("add", pos[:1]); err != nil {
						return nil, err
					}
					delta := int64(1)
					if len(pos) == 2 {
						d, err := strconv.ParseInt(pos[1], 10, 64)
						if err != nil {
							return nil, cmdUsagef("add", "add: DELTA %q is not an integer", pos[1])
						}
						delta = d
					}
					if *id == "" && *at == "" {
						return storeAction(func(ctx context.Context, c *cli) error { return c.add(ctx, pos[0], delta) }), nil
					}
					e := store.Event{Key: pos[0], Delta: delta, ID: *id}
					if *at != "" {
						t, err := time.Parse(time.RFC3339Nano, *at)
						if err != nil {
							return nil, cmdUsagef("add", "add: --at %q is not an RFC 3339 time (like 2026-11-23T10:04:05Z)", *at)
						}
						e.Time = t
					}
					return storeAction(func(ctx context.Context, c *cli) error { return c.addEvent(ctx, e) }), nil
				}
			},
		},
		{
			name:    "sum",
			args:    "KEY...",
			summary: "print the window sums, read in one round trip",
			details: "Prints the window sum of each KEY, in order, read in one round trip and\n" +
				"writing nothing. A key that fails (say, one that holds a string) gets an\n" +
				"error line instead and the others are still printed; the exit status is\n" +
				"then 1, with a count of the failed keys on stderr.\n" +
				"Text: KEY<TAB>SUM, or KEY<TAB>error: MESSAGE.",
			json: `{"key":K,"sum":N}, or {"key":K,"error":"key holds a value that is not a counter"}`,
			setup: func(fs *flag.FlagSet) func([]string) (action, error) {
				return func(pos []string) (action, error) {
					if len(pos) == 0 {
						return nil, synopsisError("sum")
					}
					if err := checkKeys("sum", pos); err != nil {
						return nil, err
					}
					return storeAction(func(ctx context.Context, c *cli) error { return c.sum(ctx, pos) }), nil
				}
			},
		},
		{
			name:    "allow",
			args:    "--limit N KEY [COST]",
			summary: "count COST (default 1) only if the sum stays <= N",
			details: "Counts COST (a non-negative integer, default 1) against KEY only if the\n" +
				"window sum stays <= N, atomically, and prints the decision. A refusal\n" +
				"exits with status 3 (the decision is still printed on stdout); retry_after_ms\n" +
				"says when enough of the window will have slid out, -1 when COST > N.\n" +
				"--limit N/WINDOW (such as 3/10s) sets a policy of its own window (in buckets\n" +
				"of --bucket, which must divide it); repeat it for several policies, decided\n" +
				"together, atomically: COST counts in every one or in none. The top-level\n" +
				"figures are the deciding policy's (the refusing one, or else the one with\n" +
				"the least remaining); \"policies\" lists each one's.\n" +
				"Text: KEY<TAB>allowed|refused, retry after D<TAB>sum N<TAB>remaining N.",
			json: `{"key":K,"allowed":bool,"sum":N,"remaining":N,"retry_after_ms":N}; with N/WINDOW limits also ` +
				`"policies":[{"limit":N,"window_ms":N,"sum":N,"remaining":N,"retry_after_ms":N},...]`,
			setup: func(fs *flag.FlagSet) func([]string) (action, error) {
				var limits limitsFlag
				fs.Var(&limits, "limit", "the limit `N` (required, >= 0), or N/WINDOW; repeatable")
				return func(pos []string) (action, error) {
					if len(limits.l) == 0 {
						return nil, cmdUsagef("allow", "allow: --limit N is required, with N >= 0")
					}
					if limits.err != nil {
						return nil, cmdUsagef("allow", "allow: %v", limits.err)
					}
					if len(pos) < 1 || len(pos) > 2 {
						return nil, synopsisError("allow")
					}
					if err := checkKeys("allow", pos[:1]); err != nil {
						return nil, err
					}
					cost := int64(1)
					if len(pos) == 2 {
						n, err := strconv.ParseInt(pos[1], 10, 64)
						if err != nil || n < 0 {
							return nil, cmdUsagef("allow", "allow: COST %q is not a non-negative integer", pos[1])
						}
						cost = n
					}
					if len(limits.l) == 1 && limits.l[0].window == 0 {
						return storeAction(func(ctx context.Context, c *cli) error { return c.allow(ctx, pos[0], limits.l[0].limit, cost) }), nil
					}
					return func(e *env) error {
						for i := range limits.l {
							if limits.l[i].window == 0 {
								limits.l[i].window = e.g.window
							}
							if err := (store.Window{Length: limits.l[i].window, Bucket: e.g.bucket}).Validate(); err != nil {
								return cmdUsagef("allow", "allow: --limit %s: %s", limits.l[i].text, err.(*store.Error).Detail)
							}
						}
						return e.onStore(func(ctx context.Context, c *cli) error {
							return c.allowAll(ctx, pos[0], cost, limits.l, e.g.bucket)
						})
					}, nil
				}
			},
		},
		{
			name:    "inspect",
			args:    "KEY",
			summary: "show every bucket of the counter",
			details: "Prints the counter's Redis key, backend and key TTL, its running total (plain\n" +
				"hash), and every bucket with its start, value and TTL. Reads only.",
			json: `{"key":K,"redis_key":"…","backend":"…","buckets":[{"field":"…","start":"RFC3339","value":N,"ttl_ms":N}],` +
				`"running_total":"N","running_total_mark_ms":"MS"}` + "\n(the running total fields only on the plain hash)",
			setup: func(fs *flag.FlagSet) func([]string) (action, error) {
				return func(pos []string) (action, error) {
					if len(pos) != 1 {
						return nil, synopsisError("inspect")
					}
					if err := checkKeys("inspect", pos); err != nil {
						return nil, err
					}
					return storeAction(func(ctx context.Context, c *cli) error { return c.inspect(ctx, pos[0]) }), nil
				}
			},
		},
		{
			name:    "distinct",
			args:    "add KEY MEMBER... | count KEY...",
			summary: "add members to a distinct count, or read distinct counts",
			details: "distinct add adds each MEMBER to KEY's distinct count (a HyperLogLog per\n" +
				"bucket; about 0.81% standard error) and prints the number of distinct members\n" +
				"in the window. distinct count prints each KEY's, in order, read in one round\n" +
				"trip; a key that fails gets an error line, as with sum.\n" +
				"Text: KEY<TAB>N.",
			json: `{"key":K,"distinct":N}, or {"key":K,"error":"…"}`,
			setup: func(fs *flag.FlagSet) func([]string) (action, error) {
				return func(pos []string) (action, error) {
					switch {
					case len(pos) >= 3 && pos[0] == "add":
						if err := checkKeys("distinct", pos[1:2]); err != nil {
							return nil, err
						}
						return storeAction(func(ctx context.Context, c *cli) error { return c.distinctAdd(ctx, pos[1], pos[2:]) }), nil
					case len(pos) >= 2 && pos[0] == "count":
						if err := checkKeys("distinct", pos[1:]); err != nil {
							return nil, err
						}
						return storeAction(func(ctx context.Context, c *cli) error { return c.distinctCount(ctx, pos[1:]) }), nil
					}
					return nil, synopsisError("distinct")
				}
			},
		},
		{
			name:    "demo",
			summary: "play a short risk-control scenario",
			details: "Plays a login guard (allow) and a card-spend total (add, sum) over a one-minute\n" +
				"window of 10 s buckets, on a simulated clock, as a table. With no --addr (and\n" +
				"no $WINDOWSTORE_ADDR) it runs on an embedded in-process server and says so.\n" +
				"Its window is fixed (--window, --bucket and --prefix do not apply); keys go\n" +
				"under a random prefix \"windowctl-demo:NNNNNN:\". With --json, stdout has only\n" +
				"the table's rows and the notes go to stderr.",
			json: `{"time_s":N,"event":"…","sum":N,"decision":"…"} per row of the table`,
			setup: func(fs *flag.FlagSet) func([]string) (action, error) {
				return func(pos []string) (action, error) {
					if len(pos) != 0 {
						return nil, noArgsError("demo")
					}
					return func(e *env) error { return demo(e) }, nil
				}
			},
		},
		{
			name:    "bench",
			args:    "[flags]",
			summary: "measure every operation against baselines",
			details: benchDetails,
			json:    `{"op":"add","buckets":N,"backend":"…","field_ttl":bool,"ops_per_sec":N,"p50_us":N,"p99_us":N,"vs_naive":N,"vs_raw_hincrby":N,"errors":N,"first_error":"…"} per op and window`,
			setup:   benchSetup,
		},
		{
			name:    "version",
			summary: "print the version of windowctl and of Go",
			details: "Prints the module's version (a release tag, a pseudo-version of the commit it\n" +
				"was built from, or (devel)), the Go version and the platform. Same as --version.",
			json:  `{"module":"…","version":"(devel)","go":"go1.x","os":"linux","arch":"amd64","commit":"…","dirty":bool}`,
			local: true,
			setup: func(fs *flag.FlagSet) func([]string) (action, error) {
				return func(pos []string) (action, error) {
					if len(pos) != 0 {
						return nil, noArgsError("version")
					}
					return func(e *env) error { return printVersion(e.p) }, nil
				}
			},
		},
		{
			name:    "help",
			args:    "[COMMAND]",
			summary: "print this usage, or a command's",
			details: "Prints the usage of windowctl, or of COMMAND (like COMMAND --help). Help is\n" +
				"always text, with or without --json.",
			local: true,
			setup: func(fs *flag.FlagSet) func([]string) (action, error) {
				return func(pos []string) (action, error) {
					switch {
					case len(pos) == 0:
						return printText(globalUsage()), nil
					case len(pos) > 1:
						return nil, synopsisError("help")
					}
					c := lookup(pos[0])
					if c == nil {
						return nil, usagef("unknown command %q", pos[0])
					}
					return printText(c.usage()), nil
				}
			},
		},
	}
}

// lookup finds a command by name.
func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func storeAction(fn func(ctx context.Context, c *cli) error) action {
	return func(e *env) error { return e.onStore(fn) }
}

func printText(s string) action {
	return func(e *env) error {
		_, err := io.WriteString(e.stdout, s)
		return err
	}
}

// noArgs is the setup of a store command without flags or arguments.
func noArgs(name string, fn func(ctx context.Context, c *cli) error) func(*flag.FlagSet) func([]string) (action, error) {
	return func(*flag.FlagSet) func([]string) (action, error) {
		return func(pos []string) (action, error) {
			if len(pos) != 0 {
				return nil, noArgsError(name)
			}
			return storeAction(fn), nil
		}
	}
}

func noArgsError(name string) error { return cmdUsagef(name, "%s takes no arguments", name) }

// synopsisError is the error for a wrong number of arguments: the synopsis.
func synopsisError(name string) error {
	return cmdUsagef(name, "usage: %s %s", name, lookup(name).args)
}

func checkKeys(cmd string, keys []string) error {
	for _, k := range keys {
		if err := store.CheckKey(k); err != nil {
			return cmdUsagef(cmd, "%s: %s", cmd, err.(*store.Error).Detail)
		}
	}
	return nil
}

// synopsis is the command's first usage line.
func (c *command) synopsis() string {
	s := "windowctl [flags] " + c.name
	if c.args != "" {
		s += " " + c.args
	}
	return s
}

// usage is the text of `windowctl help NAME` and `windowctl NAME --help`.
func (c *command) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n\n%s\n", c.synopsis(), c.details)
	fs := newFlagSet(c.name)
	c.setup(fs)
	if own := flagUsage(fs); own != "" {
		fmt.Fprintf(&b, "\nflags:\n%s", own)
	}
	if c.json != "" {
		fmt.Fprintf(&b, "\n--json prints one object per line:\n  %s\n", strings.ReplaceAll(c.json, "\n", "\n  "))
	}
	if !c.local {
		b.WriteString("\nThe global flags (--addr, --json, --window, ...) may come before or after\nthe command: see 'windowctl help'.\n")
	}
	return b.String()
}

// exitStatuses documents run's exit statuses, in the global usage.
const exitStatuses = `exit status:
  0  success
  1  an error: the server's, the connection's, or some keys of sum (message on stderr)
  2  bad usage (message on stderr; nothing was sent)
  3  allow refused (the decision is on stdout)
`

// globalFlags makes the flag set that dispatch parses before the command.
func globalFlags(g *globals) *flag.FlagSet {
	fs := newFlagSet("windowctl")
	g.register(fs)
	return fs
}

// globalUsage is the text of `windowctl help`, -h and --help.
func globalUsage() string {
	var b strings.Builder
	b.WriteString("usage: windowctl [flags] COMMAND [args]\n\n")
	b.WriteString("Reads and writes windowstore's sliding-window counters on a Redis-compatible\nserver, and plays a demo.\n\ncommands:\n")
	for _, c := range commands {
		head := strings.TrimSpace(c.name + " " + c.args)
		fmt.Fprintf(&b, "  %-26s  %s\n", head, c.summary)
	}
	b.WriteString("\nflags (before or after the command; \"--\" ends the flags):\n")
	b.WriteString(flagUsage(globalFlags(defaultGlobals())))
	fmt.Fprintf(&b, "%-22s  %s\n", "  -h, --help", "print this usage; COMMAND --help prints the command's")
	b.WriteString("\n" + exitStatuses)
	b.WriteString("\nRun 'windowctl help COMMAND' for a command's flags, output and details.\n")
	return b.String()
}

// limitFlag is one --limit of allow: N, or N/WINDOW (window 0: --window).
type limitFlag struct {
	limit  int64
	window time.Duration
	text   string
}

// limitsFlag collects the --limit flags; a bad one is reported by check.
type limitsFlag struct {
	l   []limitFlag
	err error
}

func (f *limitsFlag) String() string { return "" }

func (f *limitsFlag) Set(s string) error {
	n, w, slash := strings.Cut(s, "/")
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil || v < 0 {
		f.err = errors.New("--limit N is required, with N >= 0")
		f.l = append(f.l, limitFlag{text: s})
		return nil
	}
	l := limitFlag{limit: v, text: s}
	if slash {
		d, err := time.ParseDuration(w)
		if err != nil || d <= 0 {
			f.err = fmt.Errorf("--limit %s: want N/WINDOW, such as 3/10s", s)
		}
		l.window = d
	}
	f.l = append(f.l, l)
	return nil
}
