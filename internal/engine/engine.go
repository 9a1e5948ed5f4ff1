// Package engine runs the store's writes as events: an event is one or more
// groups, a group the items of one Redis Cluster slot (see
// internal/backend/lua/event.lua, the scripts' side). Package store plans
// its calls into groups; this package sends them and reads their replies,
// and is the one place that decides how an event of several groups is sent:
//
//   - one group: one script call (Group.Op);
//   - several groups on a server that is not a cluster: one script call
//     (backend.OpLink), whose every check of every group passes before
//     anything is written;
//   - several groups on a cluster: a check of every group (backend.OpCheck,
//     in parallel, nothing written), then a reservation per group
//     (backend.OpReserve, each deciding alone), and, when one refused or
//     failed, the admitted reservations taken back (backend.OpUndo).
//
// So an error of a check, or of a script call off a cluster, means that
// nothing was written, and the error says so (Error.Written is false).
package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
)

// Group is one group's script arguments and keys, as event.lua reads them
// after the operation's code: Args is the number of items, the event id, the
// id's time to live, the event time, then the items; Keys is the id's key
// (with an id), then the items' keys.
type Group struct {
	Args []string
	Keys []string
	// Retry reports that the group is safe to send again after a lost
	// reply: it has an event id (or is made of leases only).
	Retry bool
	// Writes reports that the group has writes, not only reads and limits.
	Writes bool
	// IDKey makes the key of an event id for the group (see SetID).
	IDKey func(id string) string
}

// HasID reports whether the group carries an event id.
func (g *Group) HasID() bool { return g.Args[1] != "" }

// SetID gives the group an event id, kept for ttl: a cluster's reservation
// needs one.
func (g *Group) SetID(id string, ttl time.Duration) {
	g.Args[1], g.Args[2] = id, strconv.FormatInt(ttl.Milliseconds(), 10)
	g.Keys = append([]string{g.IDKey(id)}, g.Keys...)
	g.Retry = true
}

// Op is the group's operation for a script call of its own or in a batch:
// a group of limits alone, without an event id or time, goes as one list
// (backend.OpLimits, which the scripts parse once and remember), any other
// as backend.OpGroup. Both answer the same.
func (g *Group) Op() []string {
	n, err := strconv.Atoi(g.Args[0])
	if err != nil || n < 1 || g.Args[1] != "" || g.Args[3] != "" || len(g.Args) != 4+4*n {
		return append([]string{backend.OpGroup}, g.Args...)
	}
	var b strings.Builder
	for j := 4; j < len(g.Args); j += 4 {
		if g.Args[j] != backend.ItemLimit {
			return append([]string{backend.OpGroup}, g.Args...)
		}
		if j > 4 {
			b.WriteByte(' ')
		}
		b.WriteString(g.Args[j+1] + " " + g.Args[j+2] + " " + g.Args[j+3])
	}
	return []string{backend.OpLimits, b.String()}
}

// Reply is a group's answer (see event.lua): its flags, its retry, and one
// answer per item.
type Reply struct {
	Flags   int64
	Retry   int64 // ms; -1: never
	Answers []Answer
}

// Answer is one item's answer: its values, and whether it is a write that
// could not count (its bucket had left its window: the values are the
// counter's now).
type Answer struct {
	Vals []rueidis.RedisMessage
	Late bool
}

// Allowed reports that the group's limits counted their costs (or that it
// has none).
func (r Reply) Allowed() bool { return r.Flags&1 == 1 }

// Duplicate reports that the group's event id was seen before: it wrote
// nothing.
func (r Reply) Duplicate() bool { return r.Flags&2 == 2 }

// Late reports that the group has writes and none of them could count:
// every one's bucket had left its window. It wrote nothing.
func (r Reply) Late() bool { return r.Flags&4 == 4 }

// ParseReply reads the reply of one group of n items: the values of its
// operation.
func ParseReply(v []rueidis.RedisMessage, n int) (Reply, error) {
	r, rest, err := parseGroup(v, n)
	if err == nil && len(rest) != 0 {
		err = errors.New("unexpected group reply")
	}
	return r, err
}

// parseGroup reads a group of n items from the front of a flat reply (see
// event.lua's ws_emit), and answers what follows it.
func parseGroup(v []rueidis.RedisMessage, n int) (Reply, []rueidis.RedisMessage, error) {
	bad := errors.New("unexpected group reply")
	if len(v) < 2 {
		return Reply{}, nil, bad
	}
	flags, err1 := v[0].AsInt64()
	retry, err2 := v[1].AsInt64()
	if errors.Join(err1, err2) != nil {
		return Reply{}, nil, bad
	}
	r := Reply{Flags: flags, Retry: retry, Answers: make([]Answer, n)}
	v = v[2:]
	for j := range n {
		if len(v) == 0 {
			return Reply{}, nil, bad
		}
		c, err := v[0].AsInt64()
		if err != nil {
			return Reply{}, nil, bad
		}
		a := Answer{Late: c < 0}
		if c < 0 {
			c = -c
		}
		if int64(len(v)-1) < c {
			return Reply{}, nil, bad
		}
		a.Vals, v = v[1:1+c], v[1+c:]
		r.Answers[j] = a
	}
	return r, v, nil
}

// Sender sends one write operation of a store: its keys and its arguments
// after the header, with the store's resends (retry: safe to send again
// after a lost reply).
type Sender interface {
	Send(ctx context.Context, keys []string, retry bool, args ...string) ([]rueidis.RedisMessage, error)
}

// Part is one group of an event and the store that sends it.
type Part struct {
	Group *Group
	Via   Sender
	// Items is the number of items of the group, for its reply.
	Items int
}

// Error is the error of a part of an event. Written reports that other
// parts of the event may have written: a cluster's reservation that failed
// after every check had passed (the server's memory full between the two, a
// lost reply). Checked reports that the event failed its checks: it wrote
// nothing. (A script's error reply means the same of the call that raised
// it: every write comes after every check.)
type Error struct {
	Part    int // the index of the part that failed
	Err     error
	Written bool
	Checked bool
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// nonce makes a reservation's nonce: random, so that an undo takes back only
// the reservation of its own call.
func nonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// BeforeUndo, a test's hook, is nil in production. When set, it is called
// before a cluster's (or several clients') refused decision takes its
// reservations back, with the decision's context: a test that waits there
// moves the undo past the reservation's bucket.
var BeforeUndo func(ctx context.Context)

// Run runs the parts of one event. oneCall reports that every part can go
// in one script call (a server that is not a cluster, one client, one clock:
// the first part's Sender sends it). It answers every part's reply; on an
// error, nil and the *Error of the part that failed.
func Run(ctx context.Context, parts []Part, oneCall bool) ([]Reply, error) {
	switch {
	case len(parts) == 1:
		p := parts[0]
		vals, err := p.Via.Send(ctx, p.Group.Keys, p.Group.Retry, p.Group.Op()...)
		if err != nil {
			return nil, &Error{Err: err}
		}
		r, err := ParseReply(vals, p.Items)
		if err != nil {
			return nil, &Error{Err: err}
		}
		return []Reply{r}, nil
	case oneCall:
		return link(ctx, parts)
	}
	return reserve(ctx, parts)
}

// link sends every part in one script call (backend.OpLink).
func link(ctx context.Context, parts []Part) ([]Reply, error) {
	args := []string{backend.OpLink, strconv.Itoa(len(parts))}
	var keys []string
	retry := true
	for _, p := range parts {
		args = append(args, p.Group.Args...)
		keys = append(keys, p.Group.Keys...)
		retry = retry && p.Group.Retry
	}
	vs, err := parts[0].Via.Send(ctx, keys, retry, args...)
	if err != nil {
		return nil, partError(err)
	}
	out := make([]Reply, len(parts))
	for i, p := range parts {
		if out[i], vs, err = parseGroup(vs, p.Items); err != nil {
			return nil, &Error{Part: i, Err: errors.New("unexpected event reply")}
		}
	}
	if len(vs) != 0 {
		return nil, &Error{Err: errors.New("unexpected event reply")}
	}
	return out, nil
}

// partError finds the part an error of a script call of several groups
// names ("group 2: ..."), and takes the words off the message.
func partError(err error) *Error {
	var se *backend.ScriptError
	if errors.As(err, &se) {
		if rest, ok := strings.CutPrefix(se.Message, "group "); ok {
			if n, msg, ok := strings.Cut(rest, ": "); ok {
				if q, err := strconv.Atoi(n); err == nil && q >= 1 {
					c := *se
					c.Message = msg
					return &Error{Part: q - 1, Err: &c}
				}
			}
		}
	}
	return &Error{Err: err}
}

// each sends op to every part at once and hands each reply to do.
func each(ctx context.Context, parts []Part, which func(i int) bool, op, nonce string,
	do func(i int, vals []rueidis.RedisMessage, err error)) {
	done := make(chan struct{})
	n := 0
	for i, p := range parts {
		if !which(i) {
			continue
		}
		n++
		go func() {
			args := []string{op}
			if nonce != "" {
				args = append(args, nonce)
			}
			vals, err := p.Via.Send(ctx, p.Group.Keys, p.Group.Retry || op == backend.OpCheck, append(args, p.Group.Args...)...)
			do(i, vals, err)
			done <- struct{}{}
		}()
	}
	for range n {
		<-done
	}
}

// pendingWait bounds how long a check waits for another call's reservation
// of the same event id to settle (the scripts take it for stale 5 s after
// it was made, WS_STALE).
const pendingWait = 6 * time.Second

// settle is how long the id of a reserved part without an event id of its
// own is kept, for its undo to find: an undo that comes later (past the
// store's retries) does nothing, and the cost stays counted until its bucket
// leaves the window.
const settle = 10 * time.Second

// reserve runs the parts on a cluster: every part checked, then reserved,
// then, when one refused, the admitted ones taken back; when every part
// admitted, the reservations of the parts with an event id of their own are
// settled, so that a later call of the event (a replay) answers them as
// duplicates and never takes them back.
func reserve(ctx context.Context, parts []Part) ([]Reply, error) {
	all := func(int) bool { return true }
	errs := make([]error, len(parts))
	// The checks; a part whose id another call is recording (WSPENDING)
	// waits for it to settle, up to pendingWait (past it the reservation is
	// stale: this call takes it over).
	for wait, start := 5*time.Millisecond, time.Now(); ; wait = min(2*wait, 100*time.Millisecond) {
		each(ctx, parts, all, backend.OpCheck, "", func(i int, _ []rueidis.RedisMessage, err error) { errs[i] = err })
		pending := false
		for i, err := range errs {
			if code, _ := backend.ReplyCode(err); code == backend.CodePending {
				pending = true
			} else if err != nil {
				return nil, &Error{Part: i, Err: err, Checked: true}
			}
		}
		if !pending {
			break
		}
		if time.Since(start) > pendingWait {
			for i, err := range errs {
				if err != nil {
					return nil, &Error{Part: i, Err: err, Checked: true}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, &Error{Err: ctx.Err(), Checked: true}
		case <-time.After(wait):
		}
	}
	nonce := nonce()
	ids := make([]bool, len(parts)) // the part has an event id of its own
	for i, p := range parts {
		if ids[i] = p.Group.HasID(); !ids[i] {
			p.Group.SetID("~"+nonce, settle)
		}
	}
	out := make([]Reply, len(parts))
	each(ctx, parts, all, backend.OpReserve, nonce, func(i int, vals []rueidis.RedisMessage, err error) {
		if err == nil {
			out[i], err = ParseReply(vals, parts[i].Items)
		}
		errs[i] = err
	})
	failed, refused := -1, false
	for i := range parts {
		if errs[i] != nil && failed < 0 {
			failed = i
		}
		if errs[i] == nil && out[i].Flags&16 != 0 {
			// This call's reservation (resent, or taken over from an earlier
			// call of the event that never finished): not a duplicate.
			out[i].Flags &^= 2 | 16
		}
		if errs[i] == nil && !out[i].Allowed() {
			refused = true
		}
	}
	if failed < 0 && !refused {
		each(ctx, parts, func(i int) bool { return ids[i] && !out[i].Duplicate() }, backend.OpSettle, nonce,
			func(int, []rueidis.RedisMessage, error) {}) // (unsettled, a reservation stays counted: never taken back but by a refused call of the event)
		return out, nil
	}
	// Take back every reservation that may have been made: the admitted
	// parts', and the failed ones' (whose reply may have been lost; an undo
	// of a part that reserved nothing does nothing). A true duplicate's
	// record is its first call's, settled or another call's: its undo does
	// nothing.
	if BeforeUndo != nil {
		BeforeUndo(ctx)
	}
	uerrs := make([]error, len(parts))
	each(ctx, parts, func(i int) bool { return errs[i] != nil || (out[i].Allowed() && !out[i].Duplicate()) }, backend.OpUndo,
		nonce, func(i int, _ []rueidis.RedisMessage, err error) { uerrs[i] = err })
	if failed >= 0 {
		written := false
		for i := range parts {
			if i != failed && errs[i] == nil && !out[i].Duplicate() && (parts[i].Group.Writes || out[i].Allowed()) {
				written = true
			}
		}
		return nil, &Error{Part: failed, Err: errs[failed], Written: written}
	}
	for i := range parts {
		if uerrs[i] != nil {
			return nil, &Error{Part: i, Written: true,
				Err: errors.New("the refused decision's undo failed (its cost stays counted until its bucket leaves the window): " + uerrs[i].Error())}
		}
		if out[i].Allowed() {
			out[i].Flags &^= 1
			if !out[i].Duplicate() {
				out[i].Flags |= 8 // taken back: its answers include the cost
			}
		}
	}
	return out, nil
}

// Undone reports that the reply's group was admitted on its own and taken
// back, because another part of its event refused (a cluster's
// reservation): its limits' answers include the cost.
func (r Reply) Undone() bool { return r.Flags&8 == 8 }
