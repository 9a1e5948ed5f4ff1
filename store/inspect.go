package store

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/windowstore/windowstore/internal/codec"
)

// Snapshot is what Inspect saw of one counter.
type Snapshot struct {
	Key      string        // the counter key, as given
	RedisKey string        // the Redis key that holds its buckets
	Head     string        // the Redis key of the key's head, where the backend keeps one (the plain hash: the current bucket and the running total); "" on other backends
	Backend  string        // the backend's name
	Now      time.Time     // the instant the snapshot was taken (the script's clock)
	KeyTTL   time.Duration // the counter's remaining life (with a head, the longer of its two keys'); -1: no expiry; -2: no key
	Buckets  []Bucket      // every bucket field of the key, live or not, oldest first (with a head, the current bucket as the head holds it)
	// Meta holds the backend's own state that is not in the buckets: the
	// plain hash's running total "t" and its mark "m" (the start, in Unix
	// ms, of the oldest bucket the total covers, as of the last write), from
	// its head. It is empty on other backends.
	Meta map[string]string
}

// Bucket is one field of a counter.
type Bucket struct {
	Field string        // the field name: the bucket's code
	Start time.Time     // when the bucket starts; zero if Field is not a code
	Value int64         // the amount counted in it
	TTL   time.Duration // the field's remaining life as the server keeps it; -1: none
	Live  bool          // whether the bucket is inside the window now
}

// Inspect returns every field of key as the server holds it, for operators. It
// is read-only (FCALL_RO, or EVALSHA_RO): it deletes nothing, not even stale buckets. A key
// that holds something other than a counter is refused with ErrWrongType, as
// Add refuses it.
func (s *Store) Inspect(ctx context.Context, key string) (_ Snapshot, err error) {
	ctx, end := s.start(ctx, "inspect")
	defer func() { end(err) }()
	rk, err := s.redisKey(key, s.tag)
	if err != nil {
		return Snapshot{}, rename(err, "inspect")
	}
	ck := s.counterKeys(rk, s.tag)
	snap := Snapshot{Key: key, RedisKey: ck[0], Backend: s.be.Name, Meta: map[string]string{}}
	if len(ck) > 1 {
		snap.Head = ck[1]
	}
	args := append(append([]string(nil), s.header()...), s.shape)
	vals, err := s.runner.Exec(ctx, s.be.Inspect, ck, args).ToArray()
	if err != nil {
		return snap, fail("inspect", key, s.be.Inspect, err)
	}
	if len(vals) < 2 || (len(vals)-2)%3 != 0 {
		return snap, &Error{Op: "inspect", Key: key, Detail: "unexpected reply of " + strconv.Itoa(len(vals)) + " elements"}
	}
	now, _ := vals[0].AsInt64()
	pttl, _ := vals[1].AsInt64()
	snap.Now = time.UnixMilli(now)
	snap.KeyTTL = ttl(pttl)
	live, err := s.codec.Live(snap.Now, s.win.Length)
	if err != nil {
		return snap, &Error{Op: "inspect", Key: key, Detail: err.Error(), Err: err}
	}
	for i := 2; i+2 < len(vals); i += 3 {
		var b Bucket
		b.Field, _ = vals[i].ToString()
		v, _ := vals[i+1].ToString()
		if s.be.IsReserved(b.Field) {
			snap.Meta[b.Field] = v
			continue
		}
		b.Value, _ = strconv.ParseInt(v, 10, 64)
		t, _ := vals[i+2].AsInt64()
		b.TTL = ttl(t)
		if code, err := codec.Decode(b.Field); err == nil {
			b.Start, b.Live = s.bucketStart(live, code)
		}
		snap.Buckets = append(snap.Buckets, b)
	}
	slices.SortStableFunc(snap.Buckets, func(x, y Bucket) int { return x.Start.Compare(y.Start) })
	return snap, nil
}

// bucketStart is when the bucket with code starts, as the scripts see it at
// live.Now: a live bucket (inside the window, or ahead of the clock by at
// most the future tolerance, as a client whose clock is a little ahead
// writes it), or else the most recent bucket of that code before now. The
// zero time for a code no bucket has.
func (s *Store) bucketStart(live codec.Live, code int64) (time.Time, bool) {
	if st, ok := live.StartOf(code); ok {
		return time.UnixMilli(st), true
	}
	top := live.Now + s.futureMs
	if st := live.Year + code*live.BucketMs; code > live.Code && st <= top && st < live.NextYear {
		return time.UnixMilli(st), true
	}
	if st := live.NextYear + code*live.BucketMs; code >= 0 && st <= top {
		return time.UnixMilli(st), true
	}
	if st, err := s.codec.Start(code, time.UnixMilli(live.Now)); err == nil {
		return st, false
	}
	return time.Time{}, false
}

func ttl(ms int64) time.Duration {
	if ms < 0 {
		return time.Duration(ms)
	}
	return time.Duration(ms) * time.Millisecond
}
