package main

import (
	"strings"
	"testing"
)

// TestCalls: the embedded calls parse, and windowstored's configuration gets
// algorithm: fixed on every limit of the embedded one, unlimited ones aside.
func TestCalls(t *testing.T) {
	cs, err := parseCalls(defaultRequests)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, c := range cs {
		if c.req != nil {
			n++
		}
	}
	if n < 50 {
		t.Fatalf("%d calls in testdata/requests.txt, want at least 50", n)
	}
	q, err := parseCall("d|user=u4,#=2;ip=i1|3")
	if err != nil || q.Domain != "d" || q.HitsAddend != 3 || len(q.Descriptors) != 2 ||
		q.Descriptors[0].GetHitsAddend().GetValue() != 2 || q.Descriptors[1].Entries[0].Value != "i1" {
		t.Fatalf("parseCall = %v, %v", q, err)
	}
	if _, err := parseCall("d"); err == nil {
		t.Fatal("a call without descriptors parsed")
	}
	fixed := perUnit.ReplaceAllString(defaultConfig, "$1, algorithm: fixed")
	if got, want := strings.Count(fixed, "algorithm: fixed"), strings.Count(defaultConfig, "requests_per_unit"); got != want || got == 0 {
		t.Fatalf("%d limits made fixed, want %d", got, want)
	}
}
