package main

import (
	"strings"
	"testing"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/windowstore/windowstore/store"
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

// FuzzRLSOverride: a descriptor's own limit (Envoy's override) of any unit
// and number either fails (an unknown unit, or a year: a window is at most
// 180 days, as in the configuration) or is a valid window of its unit
// with its number as the limit; it is fixed exactly when the configured limit
// it replaces counts in a fixed window, or replaces no counting limit under
// override_algorithm: fixed, and shares that limit's window when the unit is
// the same.
func FuzzRLSOverride(f *testing.F) {
	f.Add(int32(2), uint32(3), uint8(0), int32(2), false)
	f.Add(int32(4), uint32(0), uint8(1), int32(4), true)
	f.Add(int32(7), uint32(1<<31), uint8(2), int32(1), false)
	f.Add(int32(0), uint32(1), uint8(3), int32(5), true)
	f.Add(int32(99), uint32(1), uint8(4), int32(6), false)
	f.Add(int32(6), uint32(101), uint8(2), int32(6), true)
	f.Add(int32(3), uint32(7), uint8(1), int32(2), true)
	f.Add(int32(3), uint32(7), uint8(0), int32(2), true)
	f.Fuzz(func(t *testing.T, unit int32, n uint32, kind uint8, matchedUnit int32, fixedOverride bool) {
		var matched *rule
		if ml := unitLength(rlspb.RateLimitResponse_RateLimit_Unit(matchedUnit)); ml > 0 {
			r := &rule{limit: 5, unit: rlspb.RateLimitResponse_RateLimit_Unit(matchedUnit)}
			switch kind % 5 {
			case 0: // no configured limit
				r = nil
			case 1:
				r.window = store.Window{Length: ml, Bucket: defaultBucket(ml)}
			case 2:
				r.window = store.Window{Length: ml, Bucket: ml}
			case 3:
				r.gcra, r.burst, r.window = true, 1, store.Window{Length: ml, Bucket: ml}
			case 4:
				r.unlimited = true
			}
			matched = r
		}
		o := &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: typev3.RateLimitUnit(unit)}
		got, err := overrideRule("d", o, matched, fixedOverride)
		length := unitLength(rlspb.RateLimitResponse_RateLimit_Unit(unit))
		if length == 0 || (store.Window{Length: length, Bucket: length}).Validate() != nil {
			if err == nil {
				t.Fatalf("unit %d: taken", unit)
			}
			return
		}
		if err != nil {
			t.Fatalf("unit %d, %d: %v", unit, n, err)
		}
		if got.limit != int64(n) || got.unit != rlspb.RateLimitResponse_RateLimit_Unit(unit) || got.window.Length != length || got.gcra || got.unlimited {
			t.Fatalf("unit %d, %d: rule %+v", unit, n, got)
		}
		if err := got.window.Validate(); err != nil {
			t.Fatalf("unit %d: window %v: %v", unit, got.window, err)
		}
		counting := matched != nil && !matched.gcra && !matched.unlimited
		fixed := counting && matched.window.Bucket == matched.window.Length || !counting && fixedOverride
		if (got.window.Bucket == got.window.Length) != fixed {
			t.Fatalf("unit %d over %+v: window %v, want fixed %v", unit, matched, got.window, fixed)
		}
		if counting && matched.window.Length == length && got.window != matched.window {
			t.Fatalf("unit %d over %+v: window %v, not the configured limit's", unit, matched, got.window)
		}
	})
}
