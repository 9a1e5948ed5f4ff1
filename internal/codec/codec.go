// Package codec is the implementation of package fieldcodec, with the parts
// the store and its backends need (live ranges, year starts, calendars for
// tests); fieldcodec exports what a user needs. See fieldcodec for the design.
package codec

import (
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

const (
	// MinBucket is the shortest bucket: codes count whole milliseconds.
	MinBucket = time.Millisecond
	// MaxWindow is the longest window (and so the longest bucket). Within it
	// every live code is unique and a field that was not cleaned up can never
	// be mistaken for a newer bucket with the same code: that needs a field
	// older than a year, and no field outlives twice the window.
	MaxWindow = 180 * 24 * time.Hour
	// MaxBuckets is the most buckets one window may have. The backends whose
	// buckets expire on their own read the whole counter on every operation
	// (and the plain hash when it rebuilds its running total), so their cost
	// grows with the bucket count; past 128 fields Redis also leaves the
	// compact listpack encoding (hash-max-listpack-entries).
	MaxBuckets = 10000
	// MaxCode is the largest code there is: the last millisecond of a leap year.
	MaxCode = 366*24*3600*1000 - 1
)

// ErrInvalid reports a bucket, window, lookback or field that the codec refuses.
var ErrInvalid = errors.New("fieldcodec: invalid argument")

// InvalidError is the error the codec returns for bad input: errors.Is sees
// ErrInvalid in it, and Reason says what is wrong without the package name,
// for callers that wrap it in messages of their own.
type InvalidError struct {
	Reason string // e.g. "bucket 3s does not divide window 10s"
}

func (e *InvalidError) Error() string { return "fieldcodec: invalid argument: " + e.Reason }

// Is reports whether target is ErrInvalid.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, a ...any) error { return &InvalidError{Reason: fmt.Sprintf(format, a...)} }

// CheckWindow reports whether a window of the given length, cut into buckets of
// the given length, is supported: 1 ms <= bucket <= length <= MaxWindow, both whole
// milliseconds, the bucket divides the length, and there are at most MaxBuckets.
func CheckWindow(length, bucket time.Duration) error {
	switch {
	case bucket < MinBucket:
		return invalidf("bucket %v is shorter than %v", bucket, MinBucket)
	case bucket%time.Millisecond != 0:
		return invalidf("bucket %v is not a whole number of milliseconds", bucket)
	case length <= 0:
		return invalidf("window length %v is not positive", length)
	case length > MaxWindow:
		return invalidf("window %v is longer than the maximum %v", length, MaxWindow)
	case length%bucket != 0:
		return invalidf("bucket %v does not divide window %v", bucket, length)
	case length/bucket > MaxBuckets:
		return invalidf("window %v has %d buckets of %v; the maximum is %d",
			length, length/bucket, bucket, MaxBuckets)
	}
	return nil
}

// Encode returns the field name of a code: its decimal digits.
func Encode(code int64) string { return strconv.FormatInt(code, 10) }

// Decode parses a field name written by Encode. It refuses anything Encode
// cannot produce: signs, leading zeros, spaces, and codes above MaxCode.
func Decode(field string) (int64, error) {
	if len(field) == 0 || len(field) > 11 || (len(field) > 1 && field[0] == '0') {
		return 0, invalidf("field %q is not a bucket code", field)
	}
	var n int64
	for i := 0; i < len(field); i++ {
		c := field[i]
		if c < '0' || c > '9' {
			return 0, invalidf("field %q is not a bucket code", field)
		}
		n = n*10 + int64(c-'0')
	}
	if n > MaxCode {
		return 0, invalidf("field %q is above the largest code", field)
	}
	return n, nil
}

// Codec computes the codes of buckets of one length. See the package doc.
type Codec struct {
	bucket int64 // milliseconds
	cal    Calendar
	years  atomic.Pointer[yearTable]
}

type yearTable struct {
	start, next int64    // the year the table was made for, ms
	starts      [5]int64 // starts of the years -2..+2 around it, ms
}

// New returns a codec for buckets of the given length. A nil calendar means UTC.
// The bucket must be a whole number of milliseconds, at least 1 ms and at most
// MaxWindow.
func New(bucket time.Duration, cal Calendar) (*Codec, error) {
	if err := CheckWindow(bucket, bucket); err != nil {
		return nil, err
	}
	if cal == nil {
		cal = UTC
	}
	return &Codec{bucket: bucket.Milliseconds(), cal: cal}, nil
}

// Bucket returns the bucket length.
func (c *Codec) Bucket() time.Duration { return time.Duration(c.bucket) * time.Millisecond }

func (c *Codec) year(now int64) (start, next int64) {
	s, n := c.cal.Year(time.UnixMilli(now))
	return s.UnixMilli(), n.UnixMilli()
}

// Code returns the code of the bucket that holds t.
func (c *Codec) Code(t time.Time) int64 {
	now := t.UnixMilli()
	start, _ := c.year(now)
	return (now - start) / c.bucket
}

// Field returns the field name of the bucket that holds t: Encode(Code(t)).
func (c *Codec) Field(t time.Time) string { return Encode(c.Code(t)) }

// Bounds returns the code of the bucket that holds t and the instants it starts
// and ends (exclusive). The last bucket of a year ends at the next year start.
func (c *Codec) Bounds(t time.Time) (code int64, start, end time.Time) {
	now := t.UnixMilli()
	ys, ny := c.year(now)
	code = (now - ys) / c.bucket
	s := ys + code*c.bucket
	e := min(s+c.bucket, ny)
	return code, time.UnixMilli(s), time.UnixMilli(e)
}

// Start returns the start of the most recent bucket with the given code that
// starts no later than ref: in ref's year, or else in the year before. It fails
// for a code that no bucket of either year has.
func (c *Codec) Start(code int64, ref time.Time) (time.Time, error) {
	now := ref.UnixMilli()
	ys, _ := c.year(now)
	if code >= 0 && ys+code*c.bucket <= now {
		return time.UnixMilli(ys + code*c.bucket), nil
	}
	py, _ := c.year(ys - 1)
	if code >= 0 && py+code*c.bucket < ys {
		return time.UnixMilli(py + code*c.bucket), nil
	}
	return time.Time{}, invalidf("code %d is no bucket of the year before %v", code, ref.UTC())
}

// Range is an inclusive range of codes. It is empty when Lo > Hi.
type Range struct{ Lo, Hi int64 }

// Contains reports whether code is in r.
func (r Range) Contains(code int64) bool { return r.Lo <= code && code <= r.Hi }

// Len returns the number of codes in r.
func (r Range) Len() int64 { return max(0, r.Hi-r.Lo+1) }

// Live describes the live buckets at one instant for one lookback.
type Live struct {
	Now       int64 // the instant, Unix ms
	Year      int64 // start of Now's year, Unix ms
	PrevYear  int64 // start of the year before, Unix ms
	NextYear  int64 // start of the year after, Unix ms
	Code      int64 // the code of the bucket that holds Now
	Current   Range // live codes of Now's year; always ends at Code
	Previous  Range // live codes of the year before; often empty
	BucketMs  int64 // bucket length, ms
	Lookback  int64 // lookback, ms
	Threshold int64 // Now - Lookback: live buckets start after it
}

// Live returns the live codes at t for the given lookback, which must be at
// least one bucket and at most MaxWindow. The lookback need not be a multiple of
// the bucket: a bucket is live when it starts after t - lookback.
func (c *Codec) Live(t time.Time, lookback time.Duration) (Live, error) {
	if lookback < c.Bucket() || lookback > MaxWindow {
		return Live{}, invalidf("lookback %v is not within [%v, %v]", lookback, c.Bucket(), MaxWindow)
	}
	now := t.UnixMilli()
	ys, ny := c.year(now)
	py, _ := c.year(ys - 1)
	l := Live{Now: now, Year: ys, PrevYear: py, NextYear: ny, BucketMs: c.bucket, Lookback: lookback.Milliseconds()}
	l.Code = (now - ys) / c.bucket
	l.Threshold = now - l.Lookback
	if l.Threshold >= ys {
		l.Current = Range{(l.Threshold-ys)/c.bucket + 1, l.Code}
		l.Previous = Range{1, 0}
	} else {
		l.Current = Range{0, l.Code}
		last := (ys-py+c.bucket-1)/c.bucket - 1
		l.Previous = Range{(l.Threshold-py)/c.bucket + 1, last}
	}
	return l, nil
}

// StartOf returns the start (Unix ms) of the live bucket with the given code, and
// false when no live bucket has it.
func (l Live) StartOf(code int64) (int64, bool) {
	switch {
	case l.Current.Contains(code):
		return l.Year + code*l.BucketMs, true
	case l.Previous.Contains(code):
		return l.PrevYear + code*l.BucketMs, true
	}
	return 0, false
}

// YearStarts returns the starts, in Unix ms, of the five years around t: two
// before t's year, t's year, and two after. Scripts that read the server's clock
// pick their year from this table, so the calendar lives in Go alone; the table
// covers a server clock up to a year away from t.
func (c *Codec) YearStarts(t time.Time) [5]int64 {
	now := t.UnixMilli()
	if y := c.years.Load(); y != nil && y.start <= now && now < y.next {
		return y.starts
	}
	ys, ny := c.year(now)
	pm1, _ := c.year(ys - 1)
	pm2, _ := c.year(pm1 - 1)
	_, np2 := c.year(ny)
	y := &yearTable{start: ys, next: ny, starts: [5]int64{pm2, pm1, ys, ny, np2}}
	c.years.Store(y)
	return y.starts
}
