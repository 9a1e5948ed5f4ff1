// Package tests is windowstore's integration suite: every test here runs
// against real servers (see package harness).
package tests

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/codec"
	"github.com/windowstore/windowstore/internal/hook"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/figures"
	"github.com/windowstore/windowstore/store"
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

// allowAllAt is store.AllowAll at instant at: its policies' stores as At views.
func allowAllAt(ctx context.Context, at time.Time, cost int64, ps ...store.Quota) (store.Decision, error) {
	vs := make([]store.Quota, len(ps))
	for i, p := range ps {
		vs[i] = p
		vs[i].Store = p.Store.At(at)
	}
	return store.AllowAll(ctx, cost, vs...)
}

// applyAt is store.Apply at instant at: its ops' stores as At views.
func applyAt(ctx context.Context, at time.Time, batches ...store.Batch) ([]store.BatchResult, error) {
	vs := make([]store.Batch, len(batches))
	for i, b := range batches {
		vs[i] = b
		vs[i].Ops = make([]store.Op, len(b.Ops))
		for j, o := range b.Ops {
			vs[i].Ops[j] = o
			vs[i].Ops[j].Store = o.Store.At(at)
		}
	}
	return store.Apply(ctx, vs...)
}

// refusedBy is the index in d.Policies of the policy whose refusal decides
// (0 for a decision of one policy); -1 when allowed.
func refusedBy(d store.Decision) int {
	if d.Allowed {
		return -1
	}
	for i, p := range d.Policies {
		if !p.Allowed && p.Policy == d.Policy {
			return i
		}
	}
	return 0
}

// clientOf is the client a store was made with.
func clientOf(st *store.Store) rueidis.Client { return hook.Client(st).(rueidis.Client) }

// addDistinct adds members to key's distinct count and answers the count
// (RecordStat of StatDistinct).
func addDistinct(ctx context.Context, s *store.Store, key string, members ...string) (int64, error) {
	v, err := s.RecordStat(ctx, store.StatEvent{Key: key, Stat: store.StatDistinct, Members: members})
	return v.Value, err
}

// countDistinct reads key's distinct count (ReadStat of StatDistinct).
func countDistinct(ctx context.Context, s *store.Store, key string) (int64, error) {
	v, err := s.ReadStat(ctx, key, store.StatDistinct)
	return v.Value, err
}

// countDistinctMany reads the distinct counts of keys, in order.
func countDistinctMany(ctx context.Context, s *store.Store, keys []string) ([]int64, error) {
	vs, err := s.ReadStatMany(ctx, keys, store.StatDistinct)
	if vs == nil {
		return nil, err
	}
	ns := make([]int64, len(vs))
	for i, v := range vs {
		ns[i] = v.Value
	}
	return ns, err
}

// counterKeys are the Redis keys that hold a store's counter key: its
// buckets' hash, then, on the plain hash, the key's head (see package
// nativehash).
func counterKeys(t testing.TB, s *store.Store, key string) []string {
	t.Helper()
	ks, err := hook.CounterKeys(s, key)
	require.NoError(t, err)
	return ks
}

// counterKey is the Redis key that holds a store's counter key's buckets.
func counterKey(t testing.TB, s *store.Store, key string) string { return counterKeys(t, s, key)[0] }

// counterLife is a counter's remaining life as Inspect reports it: the
// longest PTTL of its keys (-2 when none exists, -1 when one has no expiry).
func counterLife(t testing.TB, ctx context.Context, c rueidis.Client, s *store.Store, key string) int64 {
	t.Helper()
	life := int64(-2)
	for _, k := range counterKeys(t, s, key) {
		p, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
		require.NoError(t, err)
		if p == -1 || life == -1 {
			life = -1
		} else if p > life {
			life = p
		}
	}
	return life
}

// cliCounterKeys are the Redis keys that may hold the buckets of the
// counter whose Redis key (the name its ids and distinct counts start with)
// is rk, whatever the backend: rk itself, and the plain hash's rk + ":b".
// A test that plants a key of another type where windowctl will look plants
// it at both.
func cliCounterKeys(rk string) []string { return []string{rk, rk + ":b"} }

// counterNames are the Redis keys that may hold the counter whose Redis key
// (the name its ids and distinct counts start with) is rk, whatever the
// backend: rk itself, and the plain hash's buckets' hash (rk + ":b") and
// head (rk less its shape, + "h").
func counterNames(rk string) []string {
	return append(cliCounterKeys(rk), rk[:strings.LastIndexByte(rk, ':')+1]+"h")
}

// policyStores makes one store per window under one prefix: their counters
// of one key share the key's slot.
func policyStores(t *testing.T, tg target, ws ...store.Window) []*store.Store {
	t.Helper()
	s0, _ := newStore(t, tg, ws[0])
	out := []*store.Store{s0}
	for _, w := range ws[1:] {
		s, err := store.New(ctxT(t), clientOf(s0), w, store.WithPrefix(prefixOf(t, s0)), store.WithBackend(tg.backend))
		require.NoError(t, err)
		out = append(out, s)
	}
	return out
}

// prefixOf recovers a store's prefix from one of its keys.
func prefixOf(t *testing.T, s *store.Store) string {
	rk, err := hook.RedisKey(s, "x")
	require.NoError(t, err)
	return rk[:len(rk)-len("{x}:")-len(hook.WindowTag(s.Window()))]
}

// dump is every key's DUMP, to see that nothing was written.
func dump(t *testing.T, c rueidis.Client, keys ...string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		v, err := c.Do(ctxT(t), c.B().Dump().Key(k).Build()).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			require.NoError(t, err)
		}
		out[i] = v
	}
	return out
}

func mustCodec(t *testing.T, b time.Duration) *codec.Codec {
	c, err := codec.New(b, nil)
	require.NoError(t, err)
	return c
}

// parallelKeys runs fn for keys 0..n-1 from 64 goroutines, so that the store
// coalesces the writes.
func parallelKeys(t *testing.T, n int, fn func(k int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := g; k < n; k += 64 {
				if err := fn(k); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func encoding(t *testing.T, c rueidis.Client, key string) string {
	e, err := c.Do(ctxT(t), c.B().ObjectEncoding().Key(key).Build()).ToString()
	require.NoError(t, err)
	return e
}

// callCounter is an observer of the store's script calls: how many there were
// (calls) and the most operations one call carried (most), of every script or
// of script alone ("sum", "write").
type callCounter struct {
	script      string
	calls, most atomic.Int64
}

func (c *callCounter) Start(ctx context.Context, _ string) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (c *callCounter) Call(script string, ops int, _ time.Duration, _ error) {
	if c.script != "" && script != c.script {
		return
	}
	c.calls.Add(1)
	for cur := c.most.Load(); int64(ops) > cur && !c.most.CompareAndSwap(cur, int64(ops)); cur = c.most.Load() {
	}
}
