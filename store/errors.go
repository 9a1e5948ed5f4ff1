package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"
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
	// range (or, for Allow, the 2^53 range its decision is exact in). Nothing
	// is written: Add checks the new sum, exactly, before it writes.
	ErrOverflow = errors.New("store: counter overflow")
	// ErrUnavailable reports a backend that the server does not offer, asked
	// for with WithBackend.
	ErrUnavailable = errors.New("store: backend not available on this server")
	// ErrOutOfMemory reports a server at its maxmemory under the noeviction
	// policy: it refuses writes. Nothing is written.
	ErrOutOfMemory = errors.New("store: server out of memory (maxmemory)")
	// ErrNoPermission reports an ACL that denies a command or a key the store
	// needs (see the README for each backend's rules). Nothing is written.
	ErrNoPermission = errors.New("store: the server's ACL denies this")
	// ErrClock reports a server clock more than a year away from the client's.
	ErrClock = errors.New("store: server and client clocks disagree by more than a year")
)

// wrap turns a script's error into a store error: a sentinel where one fits,
// wrapped with %w together with the server's own error.
func wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	var sentinel error
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		switch {
		case strings.HasPrefix(msg, "WRONGTYPE"), strings.HasPrefix(msg, "WSNOTCOUNTER"),
			strings.Contains(msg, "value is not an integer"):
			sentinel = ErrWrongType
		case strings.HasPrefix(msg, "WSOVERFLOW"), strings.Contains(msg, "would overflow"):
			sentinel = ErrOverflow
		case strings.HasPrefix(msg, "WSCLOCK"):
			sentinel = ErrClock
		case strings.HasPrefix(msg, "OOM"):
			sentinel = ErrOutOfMemory
		case strings.HasPrefix(msg, "NOPERM"), strings.Contains(msg, "ACL failure"),
			strings.Contains(msg, "user executing the script can't"):
			sentinel = ErrNoPermission
		}
	}
	if sentinel != nil {
		return fmt.Errorf("store: %s %q: %w: %w", op, key, sentinel, err)
	}
	return fmt.Errorf("store: %s %q: %w", op, key, err)
}
