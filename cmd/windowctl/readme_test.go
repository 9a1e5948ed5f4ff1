package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// readmeRows returns the rows of docs/windowctl.md's bad-input table: the
// example invocations (one row may give several, in backquotes,
// comma-separated), the message, and the exit status. Rows whose input is
// prose (a server's refusal) have no invocations.
func readmeRows(t *testing.T) []readmeRow {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "windowctl.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []readmeRow
	in := false
	code := regexp.MustCompile("`([^`]*)`")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| bad input | message (stderr) | exit |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(strings.ReplaceAll(line, `\|`, "\x00"), "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("bad row %q", line)
		}
		r := readmeRow{line: line}
		for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
			r.inputs = append(r.inputs, m[1])
		}
		msg := code.FindStringSubmatch(strings.ReplaceAll(cells[1], "\x00", "|"))
		if msg == nil {
			t.Fatalf("no message in %q", line)
		}
		r.msg = msg[1]
		r.exit, err = strconv.Atoi(strings.TrimSpace(cells[2]))
		if err != nil {
			t.Fatalf("bad exit in %q", line)
		}
		rows = append(rows, r)
	}
	if len(rows) < 10 {
		t.Fatalf("only %d rows: did the table move?", len(rows))
	}
	return rows
}

type readmeRow struct {
	line   string
	inputs []string
	msg    string
	exit   int
}

// args splits an example invocation as a shell would ("" is an empty word).
func args(s string) []string {
	var out []string
	for _, w := range strings.Fields(s) {
		if w == `""` {
			w = ""
		}
		out = append(out, w)
	}
	return out
}

// TestREADMEBadInput runs every invocation of docs/windowctl.md's bad-input
// table and checks its message, word for word, and its exit status; nothing
// is sent to a server (the address is one where nothing listens). The rows
// about a server's refusals run on real servers in the integration suite.
func TestREADMEBadInput(t *testing.T) {
	ran := 0
	for _, r := range readmeRows(t) {
		if r.exit != 2 {
			continue // a server's refusal: see TestREADMEServerErrors
		}
		for _, in := range r.inputs {
			out, errs, code := call(t, nil, append([]string{"--addr", "127.0.0.1:1"}, args(in)...)...)
			first, _, _ := strings.Cut(errs, "\n")
			if code != r.exit || first != "windowctl: "+r.msg || out != "" {
				t.Errorf("%s: exit %d, stderr %q, stdout %q; docs/windowctl.md says exit %d and %q", in, code, first, out, r.exit, r.msg)
			}
			ran++
		}
	}
	t.Logf("%d invocations", ran)
}
