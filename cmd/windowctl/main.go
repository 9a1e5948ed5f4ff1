// Command windowctl reads and writes windowstore counters from the shell, and
// plays a demo.
//
//	windowctl [flags] COMMAND [args]
//
// Its commands are detect, add, sum, allow, inspect, demo, bench, version and
// help. `windowctl help` prints the whole usage (the global flags and the exit
// statuses) and `windowctl help COMMAND` a command's; both are made from the
// table of commands in commands.go.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
