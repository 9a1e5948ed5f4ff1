package main

import (
	"testing"
	"time"

	"github.com/windowstore/windowstore/store"
)

// TestFixedEnd: a fixed window ends at the next multiple of its unit within
// the UTC year, and a year's last bucket (a week's, here) ends with the year.
func TestFixedEnd(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	week := 7 * 24 * time.Hour
	for _, c := range []struct {
		w    store.Window
		now  string
		want time.Duration
	}{
		{store.Window{Length: time.Minute, Bucket: time.Minute}, "2026-12-07T08:10:20.250Z", 39*time.Second + 750*time.Millisecond},
		{store.Window{Length: time.Hour, Bucket: time.Hour}, "2026-12-07T08:00:00Z", time.Hour},
		{store.Window{Length: 24 * time.Hour, Bucket: 24 * time.Hour}, "2026-12-31T23:00:00Z", time.Hour},
		{store.Window{Length: week, Bucket: week}, "2026-12-30T00:00:00Z", 24 * time.Hour}, // the 52nd week ends on Dec 31
		{store.Window{Length: week, Bucket: week}, "2026-12-31T06:00:00Z", 18 * time.Hour},
	} {
		if got := fixedEnd(c.w, at(c.now)); got != c.want {
			t.Errorf("fixedEnd(%v, %s) = %v, want %v", c.w, c.now, got, c.want)
		}
	}
}
