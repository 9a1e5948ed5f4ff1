package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/rueidis"
)

// TestClassify: every error of a call to the server in one of the classes the
// store's retries and the limiters' breaker read.
func TestClassify(t *testing.T) {
	script := func(code string) error {
		return fmt.Errorf("store: add: %w", &ScriptError{Code: code, Message: "x"})
	}
	for _, tt := range []struct {
		err  error
		want Failure
		down bool
	}{
		{nil, NoVerdict, false},
		{errors.New("store: invalid argument"), NoVerdict, false},
		{context.Canceled, NoVerdict, false},
		{fmt.Errorf("x: %w", context.Canceled), NoVerdict, false},
		{script("WSOVERFLOW"), Answered, false},
		{script("NOPERM"), Answered, false},
		{script("OOM"), Answered, false},
		{script("WRONGTYPE"), Answered, false},
		{script("LOADING"), Busy, true},
		{script("BUSY"), Busy, true},
		{script("MASTERDOWN"), Busy, true},
		{script("CLUSTERDOWN"), Busy, true},
		{script("TRYAGAIN"), Busy, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), Lost, true},
		{fmt.Errorf("x: %w", os.ErrDeadlineExceeded), Lost, true},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, Lost, true},
		{fmt.Errorf("x: %w", syscall.ECONNREFUSED), Lost, true},
		{fmt.Errorf("x: %w", syscall.EPIPE), Lost, true},
		{fmt.Errorf("read: %w", io.EOF), Lost, true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), Lost, true},
		{fmt.Errorf("read: %w", errors.New("EOF")), NoVerdict, false},
		{fmt.Errorf("x: %w", rueidis.ErrNoSlot), Lost, true},
		{fmt.Errorf("x: %w", rueidis.ErrClosing), Closed, true},
	} {
		if got := Classify(tt.err); got != tt.want || got.Down() != tt.down {
			t.Errorf("Classify(%v) = %d (down %v), want %d (down %v)", tt.err, got, got.Down(), tt.want, tt.down)
		}
	}
	if code, ok := ReplyCode(script("TRYAGAIN")); !ok || code != "TRYAGAIN" {
		t.Errorf("ReplyCode = %q, %v", code, ok)
	}
	if _, ok := ReplyCode(context.Canceled); ok {
		t.Error("ReplyCode of a non-reply")
	}
}
