package codec

import "time"

// A Calendar says where years begin. Field codes count buckets from the start of
// the year that holds the bucket, so the calendar decides where codes wrap to 0.
//
// Implementations must be safe for concurrent use, and Year must be consistent:
// for every t, start <= t < next, and Year(next) starts at next.
type Calendar interface {
	// Year returns the start of the year that holds t and the start of the next year.
	Year(t time.Time) (start, next time.Time)
}

// UTC is the calendar of UTC calendar years, with their leap days. It is the default.
var UTC Calendar = utcCalendar{}

type utcCalendar struct{}

func (utcCalendar) Year(t time.Time) (start, next time.Time) {
	y := t.UTC().Year()
	return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(y+1, 1, 1, 0, 0, 0, 0, time.UTC)
}

// Shifted returns UTC years moved by offset: each year starts offset after the
// UTC year start. It exists for tests that must see codes wrap at an instant of
// their choosing, for example a few seconds from now:
//
//	_, next := codec.UTC.Year(time.Now())
//	cal := codec.Shifted(time.Until(next) * -1 + 5*time.Second)
//
// Production code has no reason to use it.
func Shifted(offset time.Duration) Calendar { return shifted{offset} }

type shifted struct{ off time.Duration }

func (s shifted) Year(t time.Time) (start, next time.Time) {
	start, next = UTC.Year(t.Add(-s.off))
	return start.Add(s.off), next.Add(s.off)
}
