// Command testreport reads `go test -json` on stdin and prints what a person
// needs: each package's result, the full output of every failed test, every
// skipped test with its reason (grouped by reason), the output of the packages themselves (the
// integration suite's report of its areas), and the slowest tests. With -v it
// prints every line of output as it comes, like `go test -v`.
//
//	go test -json ./... | go run ./harness/cmd/testreport
//
// It exits 1 when a test or a package failed (scripts/test.sh also takes go
// test's own exit status, with pipefail).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	verbose := flag.Bool("v", false, "print every line of output as it comes")
	slowest := flag.Int("slowest", 10, "how many of the slowest tests to list")
	flag.Parse()
	os.Exit(run(os.Stdin, os.Stdout, *verbose, *slowest))
}

type result struct {
	name    string
	action  string
	elapsed float64
}

func run(in io.Reader, out io.Writer, verbose bool, slowest int) int {
	outputs := map[string][]string{} // package/test -> output lines
	var results []result
	var pkgLines []string
	skips := map[string][]string{} // reason -> tests
	var whys []string
	failed := false
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			fmt.Fprintln(out, string(line)) // not JSON: a build error, say
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(out, e.Output)
		case "build-fail":
			failed = true
		case "output":
			if verbose {
				fmt.Fprint(out, e.Output)
			}
			if e.Test == "" {
				if !verbose && !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "--- ") {
					pkgLines = append(pkgLines, e.Output)
				}
				continue
			}
			outputs[key] = append(outputs[key], e.Output)
		case "pass", "fail", "skip":
			if e.Test == "" {
				if e.Action == "fail" {
					failed = true
				}
				if !verbose {
					for _, l := range pkgLines {
						fmt.Fprint(out, l)
					}
				}
				pkgLines = nil
				continue
			}
			results = append(results, result{e.Test, e.Action, e.Elapsed})
			switch {
			case e.Action == "fail":
				failed = true
				if !verbose {
					for _, l := range outputs[key] {
						if !strings.HasPrefix(l, "=== PAUSE") && !strings.HasPrefix(l, "=== CONT") {
							fmt.Fprint(out, l)
						}
					}
				}
			case e.Action == "skip":
				why := reason(outputs[key])
				if skips[why] == nil {
					whys = append(whys, why)
				}
				skips[why] = append(skips[why], e.Test)
			}
			delete(outputs, key)
		}
	}
	for _, why := range whys {
		fmt.Fprintf(out, "--- SKIP (%d tests): %s\n      %s\n", len(skips[why]), why, strings.Join(skips[why], " "))
	}
	if slowest > 0 && len(results) > 0 {
		sort.Slice(results, func(i, j int) bool { return results[i].elapsed > results[j].elapsed })
		fmt.Fprintf(out, "== the %d slowest tests (parallel tests overlap)\n", min(slowest, len(results)))
		for _, r := range results[:min(slowest, len(results))] {
			fmt.Fprintf(out, "  %8s  %s\n", time.Duration(r.elapsed*float64(time.Second)).Round(10*time.Millisecond), r.name)
		}
	}
	if failed {
		return 1
	}
	return 0
}

// reason picks the skip message out of a skipped test's output.
func reason(lines []string) string {
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") || l == "" {
			continue
		}
		if _, msg, ok := strings.Cut(l, ": "); ok && strings.Contains(l, "_test.go:") {
			return msg
		}
		return l
	}
	return "(no reason given)"
}
