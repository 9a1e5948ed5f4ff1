package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/windowstore/windowstore/store"
)

func load(t *testing.T, yaml string) (*config, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadConfig(f)
}

// TestConfigErrors: every configuration windowstored refuses, and why.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"", "the file holds no YAML document"},
		{"# a comment alone\n", "the file holds no YAML document"},
		{"windowstored: {}\n", "nothing to serve"},
		{"domain: d\n---\n", "empty document"},
		{"domain: d\nbogus: 1\n", "c.yaml: line 2: field bogus is not a field of a document"},
		{"domain: d\ndescriptors:\n  - key: k\n    unit: minute\n", "line 4: field unit is not a field of a descriptor"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n      shadow_mode: true\n",
			"line 7: field shadow_mode is not a field of a rate_limit"},
		{"feature_set: f\nfeatures:\n  - {name: a, entity: u, kind: limit, windows: [1m/1s], limits: [-3]}\n",
			"c.yaml:3: feature_set f, feature 1 (a): limit 1 (of window 1m/1s) is -3: a limit is at least 1"},
		{"feature_set: f\nfeatures:\n  - {name: a, entity: u, kind: count, windows: [1m/1s]}\n  - {name: b, entity: u, kind: limit, windows: [1m/1s, 1h/1m], limits: [5, 0]}\n",
			"c.yaml:4: feature_set f, feature 2 (b): limit 2 (of window 1h/1m) is 0"},
		{"feature_set: f\nfeatures: [{name: a, entity: u, kind: limit, windows: [1m/1s]}]\n", "0 limits for 1 windows"},
		{"feature_set: f\nfeatures: [{name: a, entity: u, kind: count, windows: [1m/1s], limits: [3]}]\n", "limits are for kind limit"},
		{"feature_set: f\nfeatures: [{name: a, entity: u, kind: sum, windows: [1m/1s], spend_amount: true}]\n", "spend_amount is for kind limit"},
		{"feature_set: f\nfeatures: [{name: a, entity: u, kind: count, windows: [1m/7s]}]\n", "c.yaml:2: feature_set f, feature 1 (a): window \"1m/7s\""},
		{"feature_set: f\nfeatures: [{name: a, entity: u, kind: count, windows: [1m/1s], colour: red}]\n", "field colour is not a field of a feature"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "c.yaml:4: d.k: requests_per_unit -1"},
		{"domain: d\ndescriptors:\n  - value: v\n", "a descriptor has an empty key"},
		{"domain: d\ndescriptors:\n  - key: k\n  - key: k\n", "d.k: the descriptor is configured twice"},
		{"domain: d\n---\ndomain: d\n", `domain "d" is configured twice`},
		{"descriptors:\n  - key: k\n", "need a domain name"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `unit "fortnight"`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n", "no requests_per_unit"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "requests_per_unit -1"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "an unlimited rate_limit has no unit"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}\n", `replaces its own name "a"`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", "a replaces entry has no name"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1}\n", "longer than the maximum"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, bucket: 7s}\n", "does not divide"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, bucket: soon}\n", `bucket "soon"`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed, bucket: 1s}\n", "a fixed window has no bucket"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: leaky}\n", `algorithm "leaky"`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, burst: 5}\n", "burst is for algorithm gcra"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra, bucket: 1s}\n", "a gcra rate_limit has no bucket"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 0, algorithm: gcra}\n", "needs requests_per_unit of at least 1"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, algorithm: gcra, burst: 60000000}\n", "burst 60000000: want 1 to 52124995"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra, burst: 0}\n", "burst 0: want 1 to"},
		{"domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n", "quota_mode is not supported"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: a*\n    share_threshold: true\n", "share_threshold is not supported"},
		{"windowstored: {on_error: maybe}\n", `on_error "maybe"`},
		{"windowstored: {response_headers: all}\n", `response_headers "all"`},
		{"windowstored: {override_algorithm: gcra}\n", `override_algorithm "gcra": want sliding or fixed`},
		{"windowstored: {prefix: a, feature_prefix: a}\n", "need prefixes of their own"},
		{"windowstored: {}\n---\nwindowstored: {}\n", "settings are already given"},
		{"domain: d\nfeature_set: f\n", "one of them"},
		{"feature_set: f\n", "has no features"},
		{"features: [{name: a}]\n", "need a feature_set name"},
		{"feature_set: a/b\nfeatures: [{name: a}]\n", "URL path segment"},
		{"feature_set: f\nfeatures: [{name: a, kind: median}]\n", `kind "median"`},
		{"feature_set: f\nfeatures: [{name: a, kind: count, windows: [1m]}]\n", `window "1m": want LENGTH/BUCKET`},
	} {
		_, err := load(t, c.yaml)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error with %q", c.yaml, err, c.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "windowstored: config ") {
			t.Errorf("%q: %v does not say it is about the config", c.yaml, err)
		}
	}
}

// TestConfigEnvoyExample: envoyproxy/ratelimit's own example configuration
// loads, with its statistics fields, and its descriptors match as there.
func TestConfigEnvoyExample(t *testing.T) {
	c, err := load(t, `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    detailed_metric: true
    rate_limit:
      unit: SECOND
      requests_per_unit: 500
  - key: remote_address
    rate_limit:
      unit: day
      requests_per_unit: 10
    descriptors:
      - key: path
        value: /login
        metadata: {owner: team-a}
        rate_limit: {unit: minute, requests_per_unit: 5, name: login}
`)
	if err != nil {
		t.Fatal(err)
	}
	root := c.domains["mongo_cps"]
	e := func(kv ...string) []*ratelimitpb.RateLimitDescriptor_Entry {
		var es []*ratelimitpb.RateLimitDescriptor_Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return es
	}
	for _, m := range []struct {
		entries []*ratelimitpb.RateLimitDescriptor_Entry
		path    string
	}{
		{e("database", "users"), "mongo_cps.database_users"},
		{e("database", "other"), ""},
		{e("remote_address", "1.2.3.4"), "mongo_cps.remote_address"},
		{e("remote_address", "1.2.3.4", "path", "/login"), "mongo_cps.remote_address.path_/login"},
		{e("remote_address", "1.2.3.4", "path", "/other"), ""},
		{e("remote_address", "1.2.3.4", "path", "/login", "x", "y"), ""},
	} {
		r := root.match(m.entries)
		if got := ""; r != nil {
			got = r.path
			if got != m.path {
				t.Errorf("%v matched %s, want %q", m.entries, got, m.path)
			}
		} else if m.path != "" {
			t.Errorf("%v matched nothing, want %s", m.entries, m.path)
		}
	}
	want := []store.Window{{Length: time.Second, Bucket: 100 * time.Millisecond}, {Length: time.Minute, Bucket: time.Second}, {Length: 24 * time.Hour, Bucket: 24 * time.Minute}}
	if got := c.shapes(); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("shapes %v, want %v", got, want)
	}
}

// TestWildcard: '*' stands for any run of characters, anywhere.
func TestWildcard(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"k_a*", "k_a", true}, {"k_a*", "k_abc", true}, {"k_a*", "k_b", false},
		{"k_a*z", "k_az", true}, {"k_a*z", "k_abz", true}, {"k_a*z", "k_abzy", false},
		{"k_*b*d", "k_abcd", true}, {"k_*b*d", "k_acd", false}, {"k_a*a", "k_a", false},
	} {
		w := wildcard{key: c.pattern, parts: strings.Split(c.pattern, "*")}
		if got := w.matches(c.s); got != c.want {
			t.Errorf("%q matches %q = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// TestCounterKey: no two descriptors share a counter.
func TestCounterKey(t *testing.T) {
	e := func(k, v string) *ratelimitpb.RateLimitDescriptor_Entry {
		return &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	seen := map[string]string{}
	for i, es := range [][]*ratelimitpb.RateLimitDescriptor_Entry{
		{e("a", "b|c=d")}, {e("a", "b"), e("c", "d")}, {e("a=b", "")}, {e("a", "=b")}, {e("a", "b\\")}, {e("a", "b"), e("", "")},
	} {
		k := counterKey("d", es)
		if prev, dup := seen[k]; dup {
			t.Errorf("descriptors %d and %s share the key %q", i, prev, k)
		}
		seen[k] = string(rune('0' + i))
	}
}

// TestSettle: a change of the files is loaded only once two checks in a row
// read it; files still being written (read differently at every check) are
// never loaded.
func TestSettle(t *testing.T) {
	var w settle
	for i, c := range []struct {
		read, inForce string
		want          bool
	}{
		{"A", "A", true},   // unchanged: the load finds nothing to do
		{"B", "A", false},  // changed: wait for the next check
		{"B1", "A", false}, // still changing
		{"B2", "A", false},
		{"B2", "A", true}, // the same twice: load it
		{"B2", "B2", true},
		{"C", "B2", false},
		{"B2", "B2", true}, // written back before it settled
		{"error: gone", "B2", false},
		{"error: gone", "B2", true}, // a lasting error is loaded, and refused with a log line
	} {
		if got := w.ready(c.read, c.inForce); got != c.want {
			t.Fatalf("check %d: read %q with %q in force: ready %v, want %v", i, c.read, c.inForce, got, c.want)
		}
	}
}

// TestConfigDocExamples: every whole configuration of docs/windowstored.md
// (a YAML block that starts with a document's field) loads as it is
// written, its settings included.
func TestConfigDocExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "windowstored.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, block := range strings.Split(string(doc), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.HasPrefix(block, "domain:") && !strings.HasPrefix(block, "feature_set:") && !strings.HasPrefix(block, "windowstored:") {
			continue // a fragment: descriptors, or Envoy's own configuration
		}
		n++
		if _, err := load(t, block); err != nil {
			t.Errorf("docs/windowstored.md, YAML block %d: %v", i+1, err)
		}
	}
	if n == 0 {
		t.Fatal("docs/windowstored.md has no whole configuration")
	}
}
