package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/windowstore/windowstore/internal/keyspace"
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
	st, err := store.New(ctx, client, e.g.storeWindow(), store.WithBackend(e.g.backend), store.WithPrefix(e.g.prefix))
	if err != nil {
		return err
	}
	return fn(ctx, &cli{st: st, client: client, p: e.p, prefix: e.g.prefix, backend: e.g.backend})
}

// commands is the table, in the order of the global usage. Each command is
// declared in its own file (cmd_NAME.go), next to what it does. The table is
// filled in init: help's and the usage errors' lookups read it.
var commands []*command

func init() {
	commands = []*command{detectCmd, addCmd, sumCmd, allowCmd, inspectCmd, distinctCmd, aggCmd, leaseCmd, demoCmd, versionCmd, helpCmd}
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

// checkKeys refuses keys that cannot name a counter (empty, or too long)
// before anything is sent, with the store's own rule.
func checkKeys(cmd string, keys []string) error {
	for _, k := range keys {
		if err := keyspace.Check(k); err != nil {
			var ie *keyspace.InvalidError
			if errors.As(err, &ie) {
				return cmdUsagef(cmd, "%s: %s", cmd, ie.Reason)
			}
			return cmdUsagef(cmd, "%s: %v", cmd, err)
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
