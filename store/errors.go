package store

import (
	"errors"
	"strings"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/errmsg"
)

var (
	// ErrInvalid reports bad input from the caller: a window, key, limit, cost
	// or lookback that the store refuses. Nothing is sent to the server.
	ErrInvalid = errors.New("store: invalid argument")
	// ErrWrongType reports a key that holds something other than a counter of
	// the store's backend: another Redis type (WRONGTYPE), or a hash whose
	// fields are not bucket codes. The key is left untouched.
	ErrWrongType = errors.New("store: key holds a value that is not a counter")
	// ErrOverflow reports a bucket or a window sum that would leave the int64
	// range. Nothing is written: a write checks the new sum, exactly, before
	// it writes. A sum can also leave int64 when a bucket of the opposite sign
	// leaves the window; reading it then fails with ErrOverflow.
	ErrOverflow = errors.New("store: counter overflow")
	// ErrUnavailable reports a backend that the server does not offer, asked
	// for with WithBackend.
	ErrUnavailable = errors.New("store: backend not available on this server")
	// ErrOutOfMemory reports a server at its maxmemory under the noeviction
	// policy: it refuses writes. Nothing is written.
	ErrOutOfMemory = errors.New("store: server out of memory (maxmemory)")
	// ErrNoPermission reports an ACL that denies a command or a key the store
	// needs (see docs/acl.md for each backend's rules). Nothing is written.
	ErrNoPermission = errors.New("store: the server's ACL denies this")
	// ErrClock reports a server clock more than a year away from the client's.
	ErrClock = errors.New("store: server and client clocks disagree by more than a year")
	// ErrTooOld reports an event whose bucket has already left the window:
	// it cannot count any more. Nothing is written.
	ErrTooOld = errors.New("store: event older than the window")
	// ErrFuture reports an event further ahead of the clock than the future
	// tolerance (WithFutureTolerance). Nothing is written.
	ErrFuture = errors.New("store: event time too far ahead of the clock")
)

// Error is the one error type of windowstore: the store's, and that of
// packages limit, features and httplimit. Its message names its package once,
// what was asked (an operation, a limiter's policy, a feature set's event, a
// middleware rule) and the key, the kind of error, and what went wrong, in the
// caller's words:
//
//	store: add "user:42": counter overflow: the window sum would leave the int64 range; nothing was written
//	limit: perminute "ip:1.2.3.4": invalid argument: cost 1001 is not within [0, 1000]
//	features: record event "evt-9": entity card:c1: wrong type: ...
//	httplimit: rule api: invalid argument: no key function
//
// errors.Is sees the kind (one of this package's Err... sentinels, or
// limit.ErrUnavailable) and the cause; errors.As finds the cause's type, such
// as a *rueidis.RedisError.
type Error struct {
	Op     string // what was asked: "add", "sum", "allow", a policy's name, "record event ..."
	Key    string // the counter key, when there is one
	Kind   error  // a sentinel (ErrInvalid, ErrOverflow...), or nil
	Detail string // what went wrong, beyond the kind; may be empty
	Err    error  // the cause, or nil

	pkg   string // the package that reports it; "" is "store"
	keyed bool   // the key is shown even when empty
}

func (e *Error) Error() string {
	pkg := e.pkg
	if pkg == "" {
		pkg = "store"
	}
	return errmsg.Format(pkg, e.Op, e.Key, e.Key != "" || e.keyed, e.Kind, e.Detail)
}

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error { return errmsg.Unwrap(e.Kind, e.Err) }

// invalid is an ErrInvalid error of an operation.
func invalid(op, key, detail string) error {
	return &Error{Op: op, Key: key, Kind: ErrInvalid, Detail: detail}
}

// fail turns the error of a script call into an *Error: the server's error
// replies become a *backend.ScriptError and, where one fits, a sentinel.
func fail(op, key string, script *backend.Script, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) {
		return err
	}
	e := &Error{Op: op, Key: key, Err: err}
	if script != nil {
		e.Err = script.AsScriptError(err)
	}
	var sc *backend.ScriptError
	if !errors.As(e.Err, &sc) {
		e.Detail = strings.TrimSpace(err.Error())
		if re, ok := rueidis.IsRedisErr(err); ok {
			e.Detail = re.Error()
		}
		return e
	}
	e.Kind, e.Detail = classify(sc)
	return e
}

// classify maps a script's error to a sentinel and the detail worth showing.
//
//lint:ignore ST1008 the sentinel is a value here, not the function's failure
func classify(sc *backend.ScriptError) (error, string) {
	msg, full := sc.Message, sc.Error()
	switch sc.Code {
	case backend.CodeNotCounter:
		return ErrWrongType, msg
	case "WRONGTYPE":
		return ErrWrongType, ""
	case backend.CodeOverflow:
		return ErrOverflow, msg
	case backend.CodeClock:
		return ErrClock, msg
	case backend.CodeTooOld:
		return ErrTooOld, msg
	case backend.CodeFuture:
		return ErrFuture, msg
	case "OOM":
		return ErrOutOfMemory, ""
	case "NOPERM":
		return ErrNoPermission, msg
	}
	switch msg = full; {
	case strings.Contains(msg, "would overflow"):
		return ErrOverflow, "a bucket would leave the int64 range; nothing was written"
	case strings.Contains(msg, "hash value is not an integer"):
		return ErrWrongType, "a hash whose values are not all integers"
	case strings.Contains(msg, "ACL failure"), strings.Contains(msg, "user executing the script can't"),
		strings.Contains(msg, "No permissions"), strings.Contains(msg, "NOPERM"):
		return ErrNoPermission, msg
	case strings.HasPrefix(msg, "OOM"), strings.Contains(msg, "command not allowed when used memory"):
		return ErrOutOfMemory, ""
	case strings.HasPrefix(msg, "WRONGTYPE"):
		return ErrWrongType, ""
	}
	return nil, sc.Error()
}
