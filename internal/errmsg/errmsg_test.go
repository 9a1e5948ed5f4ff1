package errmsg

import (
	"errors"
	"testing"
)

func TestFormat(t *testing.T) {
	kind := errors.New("store: counter overflow")
	for _, c := range []struct {
		subject, key string
		hasKey       bool
		kind         error
		detail, want string
	}{
		{"add", "user:42", true, kind, "nothing was written", `store: add "user:42": counter overflow: nothing was written`},
		{"new", "", false, kind, "", "store: new: counter overflow"},
		{"sum", "", true, nil, "timeout", `store: sum "": timeout`},
		{"inspect", "k", true, errors.New("other: kind"), "", `store: inspect "k": kind`},
	} {
		if got := Format("store", c.subject, c.key, c.hasKey, c.kind, c.detail); got != c.want {
			t.Errorf("Format(%q, %q) = %q, want %q", c.subject, c.key, got, c.want)
		}
	}
}

func TestUnwrap(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	if got := Unwrap(a, b); len(got) != 2 || got[0] != a || got[1] != b {
		t.Errorf("Unwrap(a, b) = %v", got)
	}
	if got := Unwrap(nil, b); len(got) != 1 || got[0] != b {
		t.Errorf("Unwrap(nil, b) = %v", got)
	}
	if got := Unwrap(nil, nil); len(got) != 0 {
		t.Errorf("Unwrap(nil, nil) = %v", got)
	}
}
