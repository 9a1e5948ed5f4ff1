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
	ErrInvalid = errmsg.ErrInvalid
	// ErrWrongType reports a key that holds something other than a counter of
	// the store's backend: another Redis type (WRONGTYPE), or a hash whose
	// fields are not bucket codes. The key is left untouched.
	ErrWrongType = errmsg.ErrWrongType
	// ErrOverflow reports a bucket or a window sum that would leave the int64
	// range. Nothing is written: a write checks the new sum, exactly, before
	// it writes. A sum can also leave int64 when a bucket of the opposite sign
	// leaves the window; reading it then fails with ErrOverflow.
	ErrOverflow = errmsg.ErrOverflow
	// ErrUnavailable reports a backend that the server does not offer, asked
	// for with WithBackend.
	ErrUnavailable = errmsg.ErrUnavailable
	// ErrOutOfMemory reports a server at its maxmemory under the noeviction
	// policy: it refuses writes. Nothing is written.
	ErrOutOfMemory = errmsg.ErrOutOfMemory
	// ErrNoPermission reports an ACL that denies a command or a key the store
	// needs (see docs/acl.md for each backend's rules). Nothing is written.
	ErrNoPermission = errmsg.ErrNoPermission
	// ErrClock reports a server clock more than a year away from the client's.
	ErrClock = errmsg.ErrClock
	// ErrTooOld reports an event whose bucket has already left the window:
	// it cannot count any more. Nothing is written.
	ErrTooOld = errmsg.ErrTooOld
	// ErrFuture reports an event further ahead of the clock than the future
	// tolerance (WithFutureTolerance). Nothing is written.
	ErrFuture = errmsg.ErrFuture
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
// limit.ErrServerDown) and the cause; errors.As finds the cause's type, such
// as a *rueidis.RedisError.
type Error struct {
	Op     string // what was asked: "add", "sum", "allow", a policy's name, "record event ..."
	Key    string // the counter key, when there is one
	Kind   error  // a sentinel (ErrInvalid, ErrOverflow...), or nil
	Detail string // what went wrong, beyond the kind; may be empty
	Err    error  // the cause, or nil
	// Package is the package that reports it: "limit", "features",
	// "httplimit"; empty is "store".
	Package string
}

func (e *Error) Error() string {
	pkg := e.Package
	if pkg == "" {
		pkg = "store"
	}
	return errmsg.Format(pkg, e.Op, e.Key, e.Key != "", e.Kind, e.Detail)
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
	e.Kind, e.Detail = errmsg.Classify(sc)
	return e
}
