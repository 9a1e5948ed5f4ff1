package main

import "flag"

var helpCmd = &command{
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
}
