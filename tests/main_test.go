// Package tests is windowstore's integration suite: every test here runs
// against real servers (see package harness).
package tests

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/figures"
	"github.com/windowstore/windowstore/tests/harness"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	harness.StopAll()
	if err := figures.Save(); err != nil { // with WINDOWSTORE_FIGURES=update
		fmt.Println("FAIL: figures:", err)
		code = 1
	}
	// Which areas ran, and which were skipped and why. With the whole suite
	// run, an area that WINDOWSTORE_REQUIRE names and no test ran fails the
	// run: a green run means every required area ran.
	filtered := false
	for _, f := range []string{"test.run", "test.skip", "test.bench", "test.fuzz"} {
		if fl := flag.Lookup(f); fl != nil && fl.Value.String() != "" {
			filtered = true
		}
	}
	if missing := harness.Report(os.Stdout, filtered); len(missing) > 0 {
		fmt.Printf("FAIL: WINDOWSTORE_REQUIRE names %v, but no test ran there\n", missing)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// target is one backend on one kind of server.
type target struct {
	name    string
	kind    harness.Kind
	backend string
	// want is the backend and mode the store must pick.
	wantBackend  string
	wantFieldTTL bool
}

// targets lists every backend on every server that supports it.
var targets = []target{
	{"redis70/auto", harness.Redis70, "auto", "nativehash-plain", false},
	{"redis80/auto", harness.Redis80, "auto", "nativehash-fieldttl", true},
	{"redis80/plain", harness.Redis80, "nativehash-plain", "nativehash-plain", false},
	{"valkey81/auto", harness.Valkey, "auto", "nativehash-plain", false},
	{"valkey9/auto", harness.Valkey9, "auto", "nativehash-fieldttl", true},
	{"tairhash/auto", harness.TairHash, "auto", "tairhash", true},
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// ctxLong is ctxT for the tests that make hundreds of thousands of calls
// (the memory figures, the long windows): under CI's load they have taken
// more than ctxT's two minutes, so they get eight.
func ctxLong(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newStore makes a store on the target's shared server, with a prefix of the test's own.
func newStore(t testing.TB, tg target, w store.Window, opts ...store.Option) (*store.Store, *harness.Server) {
	t.Helper()
	srv := harness.Shared(t, tg.kind)
	c := srv.Client(t)
	opts = append([]store.Option{store.WithPrefix(harness.Prefix(t)), store.WithBackend(tg.backend)}, opts...)
	s, err := store.New(ctxT(t), c, w, opts...)
	require.NoError(t, err)
	d := s.Detection()
	require.Equal(t, tg.wantBackend, d.Backend, "backend on %s (%s): %s", tg.kind, srv.How, d.Reason)
	require.Equal(t, tg.wantFieldTTL, d.FieldTTL, "field TTL on %s: %s", tg.kind, d.Reason)
	return s, srv
}

// forEach runs fn once per target, each as a parallel subtest (targets on
// one server keep apart by key prefix).
func forEach(t *testing.T, fn func(t *testing.T, tg target)) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			fn(t, tg)
		})
	}
}
