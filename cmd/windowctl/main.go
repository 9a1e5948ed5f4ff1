// Command windowctl reads and writes windowstore counters from the shell, and
// plays a demo.
//
//	windowctl [flags] COMMAND [args]
//
// Its commands are detect, add, sum, allow, inspect, distinct, demo, version
// and help, each declared in its own file (cmd_NAME.go) and listed in the
// table in commands.go. `windowctl help` prints the whole usage (the global
// flags and the exit statuses) and `windowctl help COMMAND` a command's; both
// are made from the table. The benchmark is not here: it is tools/bench.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
