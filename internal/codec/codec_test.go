package codec

import (
	"errors"
	"sort"
	"testing"
	"time"
)

func ms(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func mustNew(t testing.TB, b time.Duration, cal Calendar) *Codec {
	t.Helper()
	c, err := New(b, cal)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCode(t *testing.T) {
	tests := []struct {
		name   string
		bucket time.Duration
		at     string
		code   int64
		start  string
		end    string
	}{
		{"year start", time.Minute, "2025-01-01T00:00:00Z", 0, "2025-01-01T00:00:00Z", "2025-01-01T00:01:00Z"},
		{"last ms of year", time.Minute, "2025-12-31T23:59:59.999Z", 525599, "2025-12-31T23:59:00Z", "2026-01-01T00:00:00Z"},
		{"leap day", time.Hour, "2024-02-29T12:30:00Z", 59*24 + 12, "2024-02-29T12:00:00Z", "2024-02-29T13:00:00Z"},
		{"leap year last bucket", time.Hour, "2024-12-31T23:00:00Z", 366*24 - 1, "2024-12-31T23:00:00Z", "2025-01-01T00:00:00Z"},
		{"non-leap March 1", time.Hour, "2025-03-01T00:00:00Z", 59 * 24, "2025-03-01T00:00:00Z", "2025-03-01T01:00:00Z"},
		// 7 days do not divide 365: the last bucket is 1 day long (2025) or 2 (2024).
		{"short last bucket", 7 * 24 * time.Hour, "2025-12-31T10:00:00Z", 52, "2025-12-31T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"short last bucket leap", 7 * 24 * time.Hour, "2024-12-30T10:00:00Z", 52, "2024-12-30T00:00:00Z", "2025-01-01T00:00:00Z"},
		{"1 ms bucket max code", time.Millisecond, "2024-12-31T23:59:59.999Z", MaxCode, "2024-12-31T23:59:59.999Z", "2025-01-01T00:00:00Z"},
		{"local zone ignored", time.Hour, "2026-01-01T01:30:00+02:00", 365*24 - 1, "2025-12-31T23:00:00Z", "2026-01-01T00:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, tt.bucket, nil)
			code, start, end := c.Bounds(ms(tt.at))
			if code != tt.code || !start.Equal(ms(tt.start)) || !end.Equal(ms(tt.end)) {
				t.Fatalf("Bounds(%s) = %d [%v, %v), want %d [%s, %s)", tt.at, code, start.UTC(), end.UTC(), tt.code, tt.start, tt.end)
			}
			if got := c.Code(ms(tt.at)); got != tt.code {
				t.Fatalf("Code = %d, want %d", got, tt.code)
			}
			back, err := c.Start(code, ms(tt.at))
			if err != nil || !back.Equal(start) {
				t.Fatalf("Start(%d) = %v, %v; want %v", code, back, err, start)
			}
		})
	}
}

func TestCheckWindow(t *testing.T) {
	tests := []struct {
		length, bucket time.Duration
		ok             bool
	}{
		{time.Minute, 6 * time.Second, true},
		{time.Minute, time.Minute, true},
		{MaxWindow, 24 * time.Hour, true},
		{MaxWindow + 24*time.Hour, 24 * time.Hour, false},
		{time.Minute, 7 * time.Second, false},
		{0, time.Second, false},
		{-time.Minute, time.Second, false},
		{time.Minute, 0, false},
		{time.Minute, -time.Second, false},
		{time.Second, 1500 * time.Microsecond, false},
		{time.Second, 2 * time.Second, false},
		{10 * time.Second, time.Millisecond, true},
		{11 * time.Second, time.Millisecond, false}, // 11,000 buckets
	}
	for _, tt := range tests {
		err := CheckWindow(tt.length, tt.bucket)
		if (err == nil) != tt.ok {
			t.Errorf("CheckWindow(%v, %v) = %v, want ok=%v", tt.length, tt.bucket, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckWindow(%v, %v) error %v does not wrap ErrInvalid", tt.length, tt.bucket, err)
		}
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"4852800", 4852800, true},
		{Encode(MaxCode), MaxCode, true},
		{"", 0, false},
		{"007", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{" 1", 0, false},
		{"1e3", 0, false},
		{"0x1A", 0, false},
		{"1.5", 0, false},
		{"31622400000", 0, false}, // MaxCode + 1
		{"999999999999", 0, false},
		{"١٢", 0, false},
	}
	for _, tt := range tests {
		got, err := Decode(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Decode(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestLiveYearEnd(t *testing.T) {
	c := mustNew(t, time.Minute, nil)
	// 2.5 minutes into 2025, a 10-minute lookback: codes 0..2 of 2025 (the
	// current one included) and the last 7 of 2024, a leap year.
	l, err := c.Live(ms("2025-01-01T00:02:30Z"), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	last2024 := int64(366*24*60 - 1)
	if l.Current != (Range{0, 2}) || l.Previous != (Range{last2024 - 6, last2024}) {
		t.Fatalf("live = %+v %+v", l.Current, l.Previous)
	}
	if got := l.Current.Len() + l.Previous.Len(); got != 10 {
		t.Fatalf("%d live buckets, want 10", got)
	}
	s, ok := l.StartOf(last2024)
	if !ok || !time.UnixMilli(s).Equal(ms("2024-12-31T23:59:00Z")) {
		t.Fatalf("StartOf(last) = %v %v", time.UnixMilli(s).UTC(), ok)
	}
	if _, ok := l.StartOf(3); ok {
		t.Fatal("code 3 must not be live")
	}
}

func TestLiveInvalid(t *testing.T) {
	c := mustNew(t, time.Minute, nil)
	for _, lb := range []time.Duration{0, time.Second, MaxWindow + time.Minute} {
		if _, err := c.Live(time.Now(), lb); !errors.Is(err, ErrInvalid) {
			t.Errorf("Live(lookback %v) error = %v", lb, err)
		}
	}
}

// bucket is one real interval of time, as a brute-force walk of the calendar sees it.
type bucket struct {
	code       int64
	start, end int64
}

// walk lists every bucket from the start of `from`'s year to the end of `to`'s year,
// by stepping through time one bucket at a time. It knows nothing of Live.
func walk(cal Calendar, b int64, from, to int) []bucket {
	var out []bucket
	for y := from; y <= to; y++ {
		ys, ny := cal.Year(time.Date(y, 6, 1, 0, 0, 0, 0, time.UTC))
		s, n := ys.UnixMilli(), ny.UnixMilli()
		for code := int64(0); s+code*b < n; code++ {
			out = append(out, bucket{code, s + code*b, min(s+(code+1)*b, n)})
		}
	}
	return out
}

// TestBruteForce checks Code, Bounds, Live and StartOf against a walk of whole
// years (2023 to 2025, so one leap year and two year ends), for bucket lengths that
// divide the year and lengths that do not, at every bucket edge and in between.
func TestBruteForce(t *testing.T) {
	cases := []struct {
		bucket   time.Duration
		lookback []time.Duration
	}{
		{time.Hour, []time.Duration{time.Hour, 3 * time.Hour, 24 * time.Hour, 5 * 24 * time.Hour}},
		{7 * time.Hour, []time.Duration{7 * time.Hour, 70 * time.Hour, 10 * time.Hour}},
		{7*time.Hour + 13*time.Minute + 17*time.Second + 3*time.Millisecond, []time.Duration{15 * 24 * time.Hour}},
		{24 * time.Hour, []time.Duration{24 * time.Hour, 7 * 24 * time.Hour, MaxWindow}},
		{6 * 24 * time.Hour, []time.Duration{6 * 24 * time.Hour, 60 * 24 * time.Hour}},
		{100 * 24 * time.Hour, []time.Duration{100 * 24 * time.Hour}},
	}
	if testing.Short() {
		cases = cases[3:]
	}
	for _, tc := range cases {
		c := mustNew(t, tc.bucket, nil)
		bs := walk(UTC, tc.bucket.Milliseconds(), 2022, 2026)
		for i, bk := range bs {
			if y := time.UnixMilli(bk.start).UTC().Year(); y < 2023 || y > 2025 {
				continue
			}
			for _, at := range []int64{bk.start, bk.start + 1, (bk.start + bk.end) / 2, bk.end - 1} {
				now := time.UnixMilli(at)
				code, s, e := c.Bounds(now)
				if code != bk.code || s.UnixMilli() != bk.start || e.UnixMilli() != bk.end {
					t.Fatalf("b=%v at %v: Bounds = %d [%v,%v) want %+v", tc.bucket, now.UTC(), code, s, e, bk)
				}
				for _, lb := range tc.lookback {
					l, err := c.Live(now, lb)
					if err != nil {
						t.Fatal(err)
					}
					// Brute force: walk back from the current bucket while starts are after now-lb.
					want := map[int64]int64{}
					for j := i; j >= 0 && bs[j].start > at-lb.Milliseconds(); j-- {
						if _, dup := want[bs[j].code]; dup {
							t.Fatalf("b=%v lb=%v at %v: code %d twice in the window", tc.bucket, lb, now.UTC(), bs[j].code)
						}
						want[bs[j].code] = bs[j].start
					}
					got := map[int64]int64{}
					for _, r := range []Range{l.Current, l.Previous} {
						for k := r.Lo; k <= r.Hi; k++ {
							st, ok := l.StartOf(k)
							if !ok {
								t.Fatalf("StartOf(%d) not live", k)
							}
							got[k] = st
						}
					}
					if len(got) != len(want) {
						t.Fatalf("b=%v lb=%v at %v: %d live, want %d (%+v %+v)", tc.bucket, lb, now.UTC(), len(got), len(want), l.Current, l.Previous)
					}
					for k, st := range want {
						if got[k] != st {
							t.Fatalf("b=%v lb=%v at %v: code %d starts %d, want %d", tc.bucket, lb, now.UTC(), k, got[k], st)
						}
					}
				}
			}
		}
	}
}

// TestShiftedWrap checks that a shifted calendar wraps codes where it says.
func TestShiftedWrap(t *testing.T) {
	boundary := ms("2026-11-21T12:00:05Z")
	_, next := UTC.Year(boundary)
	c := mustNew(t, time.Second, Shifted(boundary.Sub(next)))
	if got := c.Code(boundary); got != 0 {
		t.Fatalf("code at the shifted year start = %d", got)
	}
	before := c.Code(boundary.Add(-time.Millisecond))
	if before != 365*24*3600-1 { // the shifted year began in (shifted) 2025, 365 days long
		t.Fatalf("code just before = %d", before)
	}
	l, _ := c.Live(boundary.Add(2500*time.Millisecond), 10*time.Second)
	if l.Current != (Range{0, 2}) || l.Previous.Len() != 7 {
		t.Fatalf("live across shifted wrap = %+v %+v", l.Current, l.Previous)
	}
}

func TestYearStarts(t *testing.T) {
	c := mustNew(t, time.Hour, nil)
	got := c.YearStarts(ms("2024-07-01T00:00:00Z"))
	var want [5]int64
	for i, y := range []int{2022, 2023, 2024, 2025, 2026} {
		want[i] = time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	}
	if got != want {
		t.Fatalf("YearStarts = %v, want %v", got, want)
	}
	if !sort.SliceIsSorted(got[:], func(i, j int) bool { return got[i] < got[j] }) {
		t.Fatal("not sorted")
	}
	// A cached table must not leak into another year.
	if c.YearStarts(ms("2025-01-01T00:00:00Z"))[2] != want[3] {
		t.Fatal("stale year table")
	}
}

func FuzzRoundTrip(f *testing.F) {
	for _, s := range []int64{0, 1, 4852800, MaxCode} {
		f.Add(s, int64(60000), int64(1735689600000))
	}
	f.Fuzz(func(t *testing.T, code, bucketMs, atMs int64) {
		// Encode/Decode round trip for every code in range.
		if code >= 0 && code <= MaxCode {
			got, err := Decode(Encode(code))
			if err != nil || got != code {
				t.Fatalf("Decode(Encode(%d)) = %d, %v", code, got, err)
			}
		} else if _, err := Decode(Encode(code)); err == nil {
			t.Fatalf("Decode accepted out-of-range %d", code)
		}
		// Code/Start round trip for any instant in 1971..2200 and bucket.
		if bucketMs < 1 || bucketMs > MaxWindow.Milliseconds() || atMs < 31536000000 || atMs > 7258118400000 {
			return
		}
		c, err := New(time.Duration(bucketMs)*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		at := time.UnixMilli(atMs)
		k, s, e := c.Bounds(at)
		if s.After(at) || !e.After(at) {
			t.Fatalf("bucket [%v,%v) does not hold %v", s, e, at)
		}
		back, err := c.Start(k, at)
		if err != nil || !back.Equal(s) {
			t.Fatalf("Start(%d) = %v, %v; want %v", k, back, err, s)
		}
		dk, err := Decode(Encode(k))
		if err != nil || dk != k {
			t.Fatalf("field round trip %d: %d %v", k, dk, err)
		}
	})
}
