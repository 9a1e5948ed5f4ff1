package backend

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/rueidis"
)

// Failure is what an error of a call to the server says about the server and
// about the call. It is the one classification of such errors: the store's
// retries (a write with an event id is sent again after Lost) and the
// limiters' breaker (Busy, Lost and Closed count as a server down) both read
// it.
type Failure int

const (
	// NoVerdict: nil, or an error that says nothing of the server (bad input
	// caught before sending, the caller's cancellation, an unknown error).
	NoVerdict Failure = iota
	// Answered: the server is up and replied with an error (a script's error,
	// WRONGTYPE, NOPERM, OOM...). The command ran as far as it went.
	Answered
	// Busy: the server is up but cannot serve now, and did not run the
	// command: LOADING, BUSY (a script is running), MASTERDOWN, CLUSTERDOWN,
	// TRYAGAIN (a cluster slot is moving).
	Busy
	// Lost: no reply. The connection failed or timed out, or no node serves
	// the slot; the command may have run or not.
	Lost
	// Closed: the client was closed. Nothing was sent.
	Closed
)

// Down reports a server that did not serve the call: Busy, Lost or Closed.
func (f Failure) Down() bool { return f == Busy || f == Lost || f == Closed }

// busyCodes are the error replies of a server that cannot serve now but
// will (see Busy).
var busyCodes = map[string]bool{"LOADING": true, "BUSY": true, "MASTERDOWN": true, "CLUSTERDOWN": true, "TRYAGAIN": true}

// Classify says what err means (see Failure).
func Classify(err error) Failure {
	if err == nil {
		return NoVerdict
	}
	if code, ok := ReplyCode(err); ok {
		if busyCodes[code] {
			return Busy
		}
		return Answered
	}
	if errors.Is(err, context.Canceled) {
		return NoVerdict
	}
	if errors.Is(err, rueidis.ErrClosing) {
		return Closed
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, rueidis.ErrNoSlot) {
		return Lost
	}
	return NoVerdict
}

// ReplyCode returns the code of a server's error reply in err's chain: the
// reply's first word ("TRYAGAIN", "WRONGTYPE", a script's "WSOVERFLOW").
func ReplyCode(err error) (string, bool) {
	var se *ScriptError
	if errors.As(err, &se) {
		return se.Code, true
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) && !re.IsNil() {
		code, _, _ := strings.Cut(re.Error(), " ")
		return code, true
	}
	return "", false
}
