// Package fieldcodec names the buckets of a sliding window with compact,
// "year-stripped" hash field codes.
//
// A bucket of length b that starts at time t has the code
//
//	floor((t - start of t's year) / b)
//
// where years are UTC calendar years. Codes restart at 0 on January 1st, so
// they stay short (at most 11 digits, for 1 ms buckets) and need no year in
// them. When b does not divide the year, the year's last bucket is short: it
// ends at the next year start, and the next year's bucket 0 starts there.
//
//	            year Y-1                 |               year Y
//	... | K-2  | K-1  |  K  |K+1 (short)| 0    | 1    | 2    | ...
//	                                     ^ next year start: codes wrap to 0
//	               <------------ lookback ------------>
//	                 live buckets: start > now - lookback     ^ now
//
// # Which buckets are live
//
// A bucket is live at instant now, for a lookback L, when it starts after
// now - L and no later than now. With buckets that divide L, that is exactly
// the L/b buckets up to and including the current one; across a year end it
// may be one more, because the last bucket of a year is short. The live codes
// form at most two ranges, one in now's year and one in the year before.
// Codes are unique among live buckets as long as L is at most
// 180 days, which is far less than a year.
//
// # Encoding
//
// A code is written as its decimal digits, with no sign and no leading zero
// (Encode). Redis stores a small hash (listpack) field that is a decimal
// integer as an integer, so decimal digits are the most compact of the
// encodings compared (docs/backends.md, "Field encoding"), and they cost the
// scripts nothing: it is what Lua's tostring writes, and it reads plainly in
// redis-cli. What a counter written by the store costs on each backend,
// measured by the integration tests on every run, is in the memory table of
// docs/backends.md.
//
// The zero value of [Codec] is not usable; create one with [New]. A Codec is
// immutable and safe for concurrent use.
package fieldcodec

import (
	"time"

	"github.com/windowstore/windowstore/internal/codec"
)

// ErrInvalid reports a bucket length or a field name that the codec refuses.
var ErrInvalid = codec.ErrInvalid

// Codec computes the codes of buckets of one length, in UTC years.
type Codec struct{ c *codec.Codec }

// New returns a codec for buckets of the given length: a whole number of
// milliseconds, from 1 ms to 180 days. Its errors wrap ErrInvalid.
func New(bucket time.Duration) (*Codec, error) {
	c, err := codec.New(bucket, nil)
	if err != nil {
		return nil, err
	}
	return &Codec{c}, nil
}

// Code returns the code of the bucket that holds t.
func (c *Codec) Code(t time.Time) int64 { return c.c.Code(t) }

// Field returns the field name of the bucket that holds t: Encode(Code(t)).
func (c *Codec) Field(t time.Time) string { return c.c.Field(t) }

// Start returns the start of the most recent bucket with the given code that
// starts no later than ref: in ref's year, or else in the year before. It fails
// for a code that no bucket of either year has.
func (c *Codec) Start(code int64, ref time.Time) (time.Time, error) { return c.c.Start(code, ref) }

// Encode returns the field name of a code: its decimal digits.
func Encode(code int64) string { return codec.Encode(code) }

// Decode parses a field name written by Encode. It refuses anything Encode
// cannot produce: signs, leading zeros, spaces, and codes above the largest
// (the last millisecond of a leap year). Its errors wrap ErrInvalid.
func Decode(field string) (int64, error) { return codec.Decode(field) }
