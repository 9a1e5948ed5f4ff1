package main

import (
	"strings"
	"testing"
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
