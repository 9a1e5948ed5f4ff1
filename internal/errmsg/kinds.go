package errmsg

import (
	"errors"
	"strings"

	"github.com/windowstore/windowstore/internal/backend"
)

// The kinds of store.Error, which package store documents; they live here so
// that every package of the module classifies a server's error the one way.
var (
	ErrInvalid      = errors.New("store: invalid argument")
	ErrWrongType    = errors.New("store: key holds a value that is not a counter")
	ErrOverflow     = errors.New("store: counter overflow")
	ErrUnavailable  = errors.New("store: backend not available on this server")
	ErrOutOfMemory  = errors.New("store: server out of memory (maxmemory)")
	ErrNoPermission = errors.New("store: the server's ACL denies this")
	ErrClock        = errors.New("store: server and client clocks disagree by more than a year")
	ErrTooOld       = errors.New("store: event older than the window")
	ErrFuture       = errors.New("store: event time too far ahead of the clock")
)

// Classify maps a script's error to a kind and the detail worth showing.
//
//lint:ignore ST1008 the kind is a value here, not the function's failure
func Classify(sc *backend.ScriptError) (error, string) {
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
