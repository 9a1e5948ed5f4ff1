package refusal

import (
	"testing"
	"time"

	"github.com/windowstore/windowstore/store"
)

func refusal(retry time.Duration) store.Decision {
	return store.Decision{Limit: 5, RetryAfter: retry, ResetAfter: 2 * retry, Policy: "p"}
}

func TestCache(t *testing.T) {
	c := New(0)
	t0 := time.Now()
	c.Remember("k", 1, t0, t0, refusal(time.Second))
	d, ok := c.Refused("k", 1, t0.Add(300*time.Millisecond))
	if !ok || d.RetryAfter != 700*time.Millisecond || d.ResetAfter != 1700*time.Millisecond || d.Policy != "p" {
		t.Fatalf("counted down: %+v %v", d, ok)
	}
	if _, ok := c.Refused("k", 2, t0); ok {
		t.Fatal("another cost must ask the server")
	}
	if _, ok := c.Refused("k", 1, t0.Add(time.Second)); ok {
		t.Fatal("answered at its retry time")
	}
	if c.Hits() != 1 || c.Len() != 0 {
		t.Fatalf("hits %d, len %d", c.Hits(), c.Len())
	}
	for _, d := range []store.Decision{{Allowed: true, RetryAfter: time.Second}, {Degraded: true, RetryAfter: time.Second},
		{WouldRefuse: true, RetryAfter: time.Second}, {RetryAfter: -1}, {}} {
		c.Remember("k", 1, t0, t0, d)
		if c.Len() != 0 {
			t.Fatalf("kept %+v", d)
		}
	}
}

// TestForgetOutlivesRacingRefusal: a refusal asked before a Forget (of any
// key) is not kept, since it may have been decided before cost was given
// back; one asked after it is.
func TestForgetOutlivesRacingRefusal(t *testing.T) {
	c := New(0)
	asked := time.Now()
	c.Forget("k")
	c.Remember("k", 1, asked, time.Now(), refusal(time.Second))
	if c.Len() != 0 {
		t.Fatal("a refusal asked before the Forget was kept")
	}
	asked = time.Now()
	c.Remember("k", 1, asked, time.Now(), refusal(time.Second))
	if c.Len() != 1 {
		t.Fatal("a refusal asked after the Forget was not kept")
	}
}

// TestForgetAll: ForgetAll drops every key, and keeps no refusal asked
// before it.
func TestForgetAll(t *testing.T) {
	c := New(0)
	asked := time.Now()
	c.Remember("a", 1, asked, asked, refusal(time.Second))
	c.Remember("b", 1, asked, asked, refusal(time.Second))
	c.ForgetAll()
	if c.Len() != 0 {
		t.Fatalf("%d keys kept", c.Len())
	}
	c.Remember("c", 1, asked, time.Now(), refusal(time.Second))
	if c.Len() != 0 {
		t.Fatal("a refusal asked before ForgetAll was kept")
	}
}

func TestCacheBounded(t *testing.T) {
	c := New(3)
	t0 := time.Now()
	c.Remember("old", 1, t0.Add(-2*time.Second), t0, refusal(time.Second)) // expired by t0
	c.Remember("a", 1, t0, t0, refusal(time.Hour))
	c.Remember("b", 1, t0, t0, refusal(time.Hour))
	c.Remember("c", 1, t0, t0, refusal(time.Hour))
	if c.Len() != 3 {
		t.Fatalf("len %d", c.Len())
	}
	if _, ok := c.Refused("c", 1, t0); !ok {
		t.Fatal("the newest refusal was not kept")
	}
	c.Remember("d", 1, t0, t0, refusal(time.Hour))
	if c.Len() != 3 {
		t.Fatalf("len %d after a fourth live key", c.Len())
	}
	if _, ok := c.Refused("d", 1, t0); !ok {
		t.Fatal("a new key is kept when full")
	}
}

// TestRememberOnAnyClock: with no Forget yet, a refusal is kept whatever
// clock its times come from (a caller's, say, in the past).
func TestRememberOnAnyClock(t *testing.T) {
	c := New(0)
	past := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	c.Remember("k", 1, past, past, refusal(time.Second))
	if _, ok := c.Refused("k", 1, past.Add(time.Millisecond)); !ok {
		t.Fatal("a refusal on a clock in the past was not kept")
	}
}
