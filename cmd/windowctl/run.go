package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/windowstore/windowstore/store"
)

// The exit statuses (exitStatuses documents them in the usage).
const (
	exitOK      = 0
	exitError   = 1 // the server's, the connection's, or some keys of sum
	exitUsage   = 2 // bad usage: nothing was sent
	exitRefused = 3 // allow refused; the decision is printed
)

// usageError is bad input from the user: exit status 2. cmd names the command
// whose usage the message points to, "" for the global usage.
type usageError struct{ cmd, msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{"", fmt.Sprintf(format, a...)} }

func cmdUsagef(cmd, format string, a ...any) error {
	return usageError{cmd, fmt.Sprintf(format, a...)}
}

// run is the whole program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return exitCode(dispatch(args, stdout, stderr), stderr)
}

// exitCode reports err on stderr and returns its exit status.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errRefused):
		return exitRefused
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "windowctl: %v\n", err)
		help := "windowctl help"
		if ue.cmd != "" {
			help += " " + ue.cmd
		}
		fmt.Fprintf(stderr, "run '%s' for usage\n", help)
		return exitUsage
	case errors.Is(err, store.ErrInvalid):
		fmt.Fprintf(stderr, "windowctl: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "windowctl: %v\n", err)
		return exitError
	}
}

// dispatch parses the global flags, finds the command in the table, parses
// its flags and arguments, and runs it.
func dispatch(args []string, stdout, stderr io.Writer) error {
	g := defaultGlobals()
	fs := globalFlags(g)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, globalUsage())
			return err
		}
		return usagef("%v", err)
	}
	if g.version {
		return printVersion(&printer{stdout, g.json})
	}
	if fs.NArg() == 0 {
		return usagef("no command given")
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	cmd := lookup(name)
	if cmd == nil {
		return usagef("unknown command %q", name)
	}
	cfs := newFlagSet(name)
	g.register(cfs)
	check := cmd.setup(cfs)
	pos, err := parseInterspersed(cfs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, cmd.usage())
			return err
		}
		return cmdUsagef(name, "%s: %v", name, err)
	}
	if g.version {
		return printVersion(&printer{stdout, g.json})
	}
	if !cmd.local {
		if err := g.check(); err != nil {
			return err
		}
	}
	act, err := check(pos)
	if err != nil {
		return err
	}
	return act(&env{g: g, p: &printer{stdout, g.json}, stdout: stdout, stderr: stderr})
}
