// Package acldoc checks the ACL rules the packages declare (each backend's
// Spec.ACL, the store's StoreExtras, the limiters' rules) against the commands
// their scripts call, and docs/acl.md, which documents them, against the
// declarations.
package acldoc

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/windowstore/windowstore/internal/backend"
)

// Parse returns the commands each rule allows, by label, upper case, without
// their "+". Key patterns and category rules (~ws:*, -@all) are left out.
func Parse(rules ...backend.ACLRule) map[string][]string {
	out := map[string][]string{}
	for _, r := range rules {
		if _, ok := out[r.Label]; ok {
			continue // the store's extras, declared once per backend
		}
		out[r.Label] = []string{}
		for _, f := range strings.Fields(r.Rule) {
			if strings.HasPrefix(f, "+") {
				out[r.Label] = append(out[r.Label], strings.ToUpper(f[1:]))
			}
		}
	}
	return out
}

// Doc reads the ACL block of a Markdown file (docs/acl.md): the fenced block
// after the line that starts with "**ACL.**", one "label: rule" per line. It
// is for the test that checks the documentation against the declarations.
func Doc(path string) ([]backend.ACLRule, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	_, after, ok := strings.Cut(string(b), "\n**ACL.**")
	if !ok {
		return nil, fmt.Errorf("acldoc: no **ACL.** paragraph in %s", path)
	}
	_, after, ok = strings.Cut(after, "\n```\n")
	if !ok {
		return nil, fmt.Errorf("acldoc: no block after **ACL.** in %s", path)
	}
	block, _, _ := strings.Cut(after, "\n```")
	var out []backend.ACLRule
	for _, line := range strings.Split(block, "\n") {
		label, rule, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("acldoc: no label in %q", line)
		}
		out = append(out, backend.ACLRule{Label: strings.TrimSpace(label), Rule: strings.Join(strings.Fields(rule), " ")})
	}
	return out, nil
}

// connection lists the rules a client needs that no script calls: the
// connection's handshake and detection, and the script commands themselves
// (the functions rule's too).
var connection = map[string]bool{"HELLO": true, "PING": true, "COMMAND|INFO": true,
	"EVALSHA": true, "EVAL": true, "EVALSHA_RO": true, "EVAL_RO": true,
	"FCALL": true, "FCALL_RO": true, "FUNCTION|LOAD": true}

// Check compares the rules of label, together with those of the labels in
// extra (optional features: "event ids"), with the commands the scripts call
// (backend.Script.Commands). It reports a command called but not allowed, and
// a command of label's own rule that no script calls: the rule is to be the
// least that works.
func Check(rules map[string][]string, label string, extra []string, scripts ...*backend.Script) error {
	own, ok := rules[label]
	if !ok {
		return fmt.Errorf("acldoc: no rule %q", label)
	}
	allowed := map[string]bool{}
	for _, l := range append([]string{label}, extra...) {
		for _, c := range rules[l] {
			allowed[c] = true
		}
	}
	called := map[string]bool{}
	var errs []string
	for _, s := range scripts {
		for _, c := range s.Commands() {
			called[c] = true
			if !allowed[c] {
				errs = append(errs, fmt.Sprintf("%s calls %s, which rule %q does not allow", s.Name(), c, label))
				allowed[c] = true
			}
		}
	}
	for _, c := range own {
		if !called[c] && !connection[c] {
			errs = append(errs, fmt.Sprintf("rule %q allows %s, which no script calls", label, c))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Rule is the rule of label as an ACL SETUSER takes it, without its key
// patterns: "+hello +ping ...".
func Rule(rules map[string][]string, label string) string {
	out := make([]string, len(rules[label]))
	for i, c := range rules[label] {
		out[i] = "+" + strings.ToLower(c)
	}
	return strings.Join(out, " ")
}
