package backend

import (
	"strconv"
	"sync/atomic"
)

// HeaderLen is the number of ARGV entries every counter script starts with
// (see Header): what changes only with the year or the options goes in one
// entry, as each entry costs the server a Lua string of its own.
const HeaderLen = 2

// Clock is the clock argument of a script. ServerClock makes the scripts read
// the server's TIME.
type Clock struct {
	ms     int64
	client bool
}

// ServerClock makes a script use the server's clock.
var ServerClock = Clock{}

// ClientClock makes a script use the given instant, in Unix ms.
func ClientClock(unixMs int64) Clock { return Clock{ms: unixMs, client: true} }

// IsClient reports whether c is a client clock.
func (c Clock) IsClient() bool { return c.client }

// Arg is the clock as a script argument, as ws_clock reads it: the Unix ms of
// a client clock, or "" for the server's.
func (c Clock) Arg() string {
	if !c.client {
		return ""
	}
	return strconv.FormatInt(c.ms, 10)
}

// Header builds the ARGV header of a counter script (live.lua reads it):
//
//	1  clock (Unix ms, or "" for the server's TIME)
//	2  the starts of the five years around now (fieldcodec.Codec.YearStarts),
//	   the future tolerance in ms, and a trace for tests (see Trace), separated
//	   by spaces: "y1 y2 y3 y4 y5 future", or "y1 y2 y3 y4 y5 future trace"
func Header(clock Clock, years [5]int64, futureMs int64, trace string) []string {
	b := make([]byte, 0, 96)
	for _, y := range years {
		b = strconv.AppendInt(b, y, 10)
		b = append(b, ' ')
	}
	b = strconv.AppendInt(b, futureMs, 10)
	if trace != "" {
		b = append(append(b, ' '), trace...)
	}
	return []string{clock.Arg(), string(b)}
}

// Trace is a header's trace, for tests: every path the write script's
// operations take is counted under tag (see OpPaths), and with general the
// operations take the event pipeline alone, never a backend's fast path.
func Trace(tag string, general bool) string {
	if general {
		return "g" + tag
	}
	return "t" + tag
}

// Shape is a window shape as a script argument: "bucketms:windowms".
func Shape(bucketMs, windowMs int64) string {
	return strconv.FormatInt(bucketMs, 10) + ":" + strconv.FormatInt(windowMs, 10)
}

// HeaderCache builds the same headers as Header, reusing the server-clock
// header while the years do not change: formatting them on every call is a
// measurable share of a call's client CPU. The zero value is ready to use; it
// is safe for concurrent use.
type HeaderCache struct {
	last atomic.Pointer[headerEntry]
}

type headerEntry struct {
	years    [5]int64
	futureMs int64
	trace    string
	server   []string
}

// Get returns Header(clock, years, futureMs, trace). With the server clock it returns
// the same slice for the same arguments until they change, so that callers
// can tell by identity which calls share a header. The slice must not be
// modified.
func (c *HeaderCache) Get(clock Clock, years [5]int64, futureMs int64, trace string) []string {
	e := c.last.Load()
	if e == nil || e.years != years || e.futureMs != futureMs || e.trace != trace {
		e = &headerEntry{years: years, futureMs: futureMs, trace: trace, server: Header(ServerClock, years, futureMs, trace)}
		c.last.Store(e)
	}
	if !clock.client {
		return e.server
	}
	a := make([]string, HeaderLen)
	copy(a, e.server)
	a[0] = clock.Arg()
	return a
}
