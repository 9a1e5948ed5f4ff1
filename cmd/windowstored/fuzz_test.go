package main

import (
	"strings"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// FuzzParseEvent: no feature API body makes the parser panic, and a body it
// takes is an event the API documents: at least one entity, none empty, an
// id and a time only when given.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []string{
		`{"id":"e1","time":"2026-11-25T10:00:00Z","entities":{"user":"42","card":"c"},"amount":9223372036854775807}`,
		`{"entities":{"user":"42"},"amount":"-12"}`, `{"entities":{"user":""}}`, `{"amount":null}`, `{"id":""}`,
		`[]`, `null`, `{"entities":{"a":1}}`, `{"entities":{}} {}`, `{"amount":"12abc","entities":{"u":"1"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		e, err := parseEvent(strings.NewReader(body))
		if err != nil {
			if strings.Contains(err.Error(), "json:") {
				t.Fatalf("%q: Go's words in the message: %v", body, err)
			}
			return
		}
		if len(e.Entities) == 0 {
			t.Fatalf("%q: taken with no entity", body)
		}
		for k, v := range e.Entities {
			if v == "" {
				t.Fatalf("%q: taken with entity %q empty", body, k)
			}
		}
		if e.hasID != (e.ID != "") || (!e.hasTime && !e.Time.IsZero()) || (!e.hasAmount && e.Amount != 0) {
			t.Fatalf("%q: taken as %+v", body, e)
		}
	})
}

// FuzzParseConfig: no configuration file makes the loader panic; one it
// takes serves something, and its feature limits are at least 1.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
		"feature_set: f\nfeatures:\n  - {name: a, entity: u, kind: limit, windows: [1m/1s], limits: [5]}\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: v*\n    descriptors:\n      - key: m\n        rate_limit: {unit: second, requests_per_unit: 2, bucket: 500ms}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra, burst: 3}\n",
		"windowstored: {on_error: allow}\n---\ndomain: d\ndescriptors: [{key: k, rate_limit: {unlimited: true}}]\n",
		"# nothing\n", "feature_set: f\nfeatures: [{name: a, kind: limit, limits: [-3]}]\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := parseConfig("c.yaml", []configFile{{name: "c.yaml", data: []byte(text)}}, "digest")
		if err != nil {
			return
		}
		if len(c.domains) == 0 && len(c.sets) == 0 {
			t.Fatalf("%q: taken, and serves nothing", text)
		}
		for name, fs := range c.sets {
			for _, ft := range fs {
				for _, l := range ft.Limits {
					if l < 1 {
						t.Fatalf("%q: set %s feature %s takes limit %d", text, name, ft.Name, l)
					}
				}
			}
		}
	})
}

// FuzzRLSMapping: no descriptor's entries make the mapping panic: the match
// against a domain's tree, and the counter key, which names each entry list
// once (a key of other entries is another key).
func FuzzRLSMapping(f *testing.F) {
	c, err := parseConfig("c.yaml", []configFile{{name: "c.yaml", data: []byte(
		"domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n" +
			"  - key: api\n    value: v1*\n    descriptors:\n      - key: method\n        rate_limit: {unit: second, requests_per_unit: 2}\n" +
			"  - key: path\n    value: /free\n    rate_limit: {unlimited: true}\n")}}, "digest")
	if err != nil {
		f.Fatal(err)
	}
	root := c.domains["d"]
	f.Add("user", "42", "", "", "api", "v1x")
	f.Add("api", "v1", "method", "GET", "", "")
	f.Add("a|b", "c=d", "\\", "|", "user", "=")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		entries := func(kv ...string) []*ratelimitpb.RateLimitDescriptor_Entry {
			var out []*ratelimitpb.RateLimitDescriptor_Entry
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] != "" {
					out = append(out, &ratelimitpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
				}
			}
			return out
		}
		a, b := entries(k1, v1, k2, v2), entries(k1, v1, k3, v3)
		root.match(a)
		root.match(b)
		same := len(a) == len(b)
		for i := 0; same && i < len(a); i++ {
			same = a[i].Key == b[i].Key && a[i].Value == b[i].Value
		}
		if ka, kb := counterKey("d", a), counterKey("d", b); (ka == kb) != same {
			t.Fatalf("entries %v and %v: keys %q and %q", a, b, ka, kb)
		}
	})
}
