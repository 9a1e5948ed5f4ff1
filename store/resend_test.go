package store

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/windowstore/windowstore/internal/backend"
)

// TestResend: any write is sent again after TRYAGAIN (nothing ran); a write
// with an event id also after a lost reply; nothing else is.
func TestResend(t *testing.T) {
	tryAgain := &backend.ScriptError{Code: "TRYAGAIN", Message: "slot moving"}
	lost := fmt.Errorf("read: %w", syscall.ECONNRESET)
	for _, tt := range []struct {
		err         error
		retry, want bool
	}{
		{tryAgain, false, true},
		{tryAgain, true, true},
		{lost, true, true},
		{lost, false, false},
		{&backend.ScriptError{Code: "LOADING"}, true, false},
		{&backend.ScriptError{Code: "WSOVERFLOW"}, true, false},
		{errors.New("unknown"), true, false},
	} {
		if got := resend(tt.err, tt.retry); got != tt.want {
			t.Errorf("resend(%v, %v) = %v, want %v", tt.err, tt.retry, got, tt.want)
		}
	}
}
