// Command windowctl reads and writes windowstore counters from the shell, and
// plays a demo.
//
// Usage:
//
//	windowctl [global flags] COMMAND [flags] [args]
//
// Global flags (they may also follow the command):
//
//	--addr URL       server: redis://, rediss:// or unix:// (default $WINDOWSTORE_ADDR,
//	                 else redis://127.0.0.1:6379)
//	--window DUR     window length (default 1m)
//	--bucket DUR     bucket length; must divide the window (default 1s)
//	--backend NAME   auto, tairhash, nativehash or nativehash-plain (default auto)
//	--prefix P       key prefix (default "ws:")
//	--timeout DUR    deadline for each command (default 5s)
//	--json           one JSON object per line
//	--tls-ca FILE    for rediss://: the CA that signed the server's certificate
//	--tls-cert FILE, --tls-key FILE
//	                 for rediss://: a client certificate and its key
//
// Commands:
//
//	detect                 the server's backend, and why
//	add KEY [DELTA]        add DELTA (default 1, may be negative); print the window sum
//	sum KEY...             the window sums of the keys, read in one round trip
//	allow --limit N KEY [COST]
//	                       count COST (default 1) only if the sum stays <= N
//	inspect KEY            every bucket of the counter, with its TTL
//	demo                   a short risk-control scenario; with no --addr (and no
//	                       $WINDOWSTORE_ADDR) it runs on an embedded in-process server
//	bench [flags]          throughput and latency of every operation, with
//	                       baselines measured in the same run (windowctl bench -h)
//
// Exit status: 0 on success, 2 for bad usage (with a message on stderr), 1 for
// a server error (with a message on stderr).
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
