package store

import (
	"errors"
	"time"

	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/keyspace"
)

// Window is the shape of a sliding window: its length, cut into buckets.
//
//	Window{Length: time.Minute, Bucket: 10 * time.Second}
//
//	        B0     B1     B2     B3     B4     B5     B0'
//	     |------|------|------|------|------|------|------|
//	 12:00:00  :10    :20    :30    :40    :50  12:01:00
//	               |<---------- Length ---------->|
//	                                          now ^ (12:00:55)
//
// A bucket is live while it starts after now - Length. At 12:00:55 that is
// 11:59:55, so B0 (12:00:00) to B5 are live and the sum adds them up; at
// 12:01:05 B0 has left and B0' (12:01:00) has come in.
// Every event younger than Length - Bucket is counted, none older than Length:
// the window never over-counts, and it may miss at most the oldest bucket's
// share of its last Bucket of time.
//
// The zero value is not a valid window. Length and Bucket must be whole
// milliseconds, Bucket must divide Length, and Length is at most
// codec.MaxWindow (180 days) with at most codec.MaxBuckets buckets.
//
// The window's shape is part of every counter's Redis key ("ws:{user:42}:10m/1m"),
// so stores of different shapes never share a counter, even under one prefix
// and key: a counter always has the shape it was written with.
type Window struct {
	Length time.Duration // how far back the window reaches, e.g. 10 * time.Minute
	Bucket time.Duration // the granularity, e.g. time.Minute; must divide Length
}

// Validate reports whether w is a supported window. Its errors wrap ErrInvalid
// (and codec.ErrInvalid).
func (w Window) Validate() error {
	if err := codec.CheckWindow(w.Length, w.Bucket); err != nil {
		e := &Error{Op: "window", Key: "", Kind: ErrInvalid, Detail: err.Error(), Err: err}
		var ie *codec.InvalidError
		if errors.As(err, &ie) {
			e.Detail = ie.Reason
		}
		return e
	}
	return nil
}

// String returns "10m0s/1m0s" (length/bucket).
func (w Window) String() string { return w.Length.String() + "/" + w.Bucket.String() }

// tag returns the window's shape as its counters' Redis keys carry it: the
// length and the bucket in their largest whole unit, "10m/1m", "1d/1h",
// "1500ms/500ms".
func (w Window) tag() string { return keyspace.Shape(w.Length, w.Bucket) }
