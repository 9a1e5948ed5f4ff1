package tests

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/backend"
	"github.com/windowstore/windowstore/fieldcodec"
	"github.com/windowstore/windowstore/nativehash"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tairhash"
	"go.uber.org/mock/gomock"
)

// These tests check the exact command tokens the store sends, without a
// server, as rueidis's own tests do. They prove the wire format, not behaviour:
// behaviour is proven by the suites that run on real servers.

func detectReplies(fieldTTL bool) []rueidis.RedisResult {
	hpex := mock.RedisNil()
	if fieldTTL {
		hpex = mock.RedisArray(mock.RedisString("hpexpireat"))
	}
	return []rueidis.RedisResult{
		mock.Result(mock.RedisBlobString("# Server\r\nredis_version:8.0.2\r\n")),
		mock.Result(mock.RedisArray(mock.RedisNil(), hpex)),
		mock.Result(mock.RedisArray()),
	}
}

func mockStore(t *testing.T, fieldTTL bool, opts ...store.Option) (*store.Store, *mock.Client) {
	ctrl := gomock.NewController(t)
	c := mock.NewClient(ctrl)
	c.EXPECT().Mode().Return(rueidis.ClientModeStandalone).AnyTimes()
	c.EXPECT().DoMulti(gomock.Any(),
		mock.Match("INFO", "server"),
		mock.Match("COMMAND", "INFO", "exhincrby", "hpexpireat"),
		mock.Match("MODULE", "LIST"),
	).Return(detectReplies(fieldTTL))
	s, err := store.New(context.Background(), c, store.Window{Length: 10 * time.Second, Bucket: time.Second}, opts...)
	require.NoError(t, err)
	return s, c
}

func yearArgs(t time.Time) []string {
	c, _ := fieldcodec.New(time.Second, nil)
	var out []string
	for _, y := range c.YearStarts(t) {
		out = append(out, strconv.FormatInt(y, 10))
	}
	return out
}

func TestTokensDetect(t *testing.T) {
	s, _ := mockStore(t, true)
	require.Equal(t, "nativehash", s.Detection().Backend)
	require.True(t, s.Detection().FieldTTL)
	require.Equal(t, "8.0.2", s.Detection().Version)
}

func TestTokensAddServerClock(t *testing.T) {
	s, c := mockStore(t, false, store.WithPrefix("p:"))
	want := append([]string{"EVALSHA", nativehash.Plain.Write.SHA1(), "1", "p:user42", "", "1000", "10000", "10000"}, yearArgs(time.Now())...)
	want = append(want, backend.OpAdd, "-7")
	c.EXPECT().DoMulti(gomock.Any(), mock.Match(want...)).Return([]rueidis.RedisResult{mock.Result(mock.RedisArray(mock.RedisInt64(3)))})
	n, err := s.Add(context.Background(), "user42", -7)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}

func TestTokensAllowClientClock(t *testing.T) {
	s, c := mockStore(t, true)
	at := time.Date(2024, 12, 31, 23, 59, 59, 500e6, time.UTC)
	want := append([]string{"EVALSHA", nativehash.FieldTTL.Write.SHA1(), "1", "ws:k", strconv.FormatInt(at.UnixMilli(), 10), "1000", "10000", "10000"}, yearArgs(at)...)
	want = append(want, backend.OpAllow, "5", "2")
	c.EXPECT().DoMulti(gomock.Any(), mock.Match(want...)).Return([]rueidis.RedisResult{mock.Result(mock.RedisArray(mock.RedisArray(
		mock.RedisInt64(0), mock.RedisInt64(4), mock.RedisInt64(1500), mock.RedisInt64(9000))))})
	r, err := s.AllowAt(context.Background(), at, "k", 5, 2)
	require.NoError(t, err)
	require.Equal(t, store.Result{Allowed: false, Limit: 5, Sum: 4, Remaining: 1, RetryAfter: 1500 * time.Millisecond, ResetAfter: 9 * time.Second}, r)
}

// TestTokensBatch checks that writes queued while a script call is in flight
// go out together, as one EVALSHA over their keys, each with its own
// operation, and that each caller gets its own answer (an error for one does
// not fail the other).
func TestTokensBatch(t *testing.T) {
	s, c := mockStore(t, false, store.WithBatching(64, 1))
	hdr := append([]string{"", "1000", "10000", "10000"}, yearArgs(time.Now())...)
	first := append(append([]string{"EVALSHA", nativehash.Plain.Write.SHA1(), "1", "ws:a"}, hdr...), backend.OpAdd, "1")
	both := append([]string{"EVALSHA", nativehash.Plain.Write.SHA1(), "2", "ws:b", "ws:c"}, hdr...)
	both = append(both, backend.OpAddNoSum, "2", backend.OpAllow, "10", "3")
	inFlight, release := make(chan struct{}), make(chan struct{})
	c.EXPECT().DoMulti(gomock.Any(), mock.Match(first...)).DoAndReturn(func(context.Context, ...rueidis.Completed) []rueidis.RedisResult {
		close(inFlight)
		<-release
		return []rueidis.RedisResult{mock.Result(mock.RedisArray(mock.RedisInt64(1)))}
	})
	c.EXPECT().DoMulti(gomock.Any(), mock.Match(both...)).Return([]rueidis.RedisResult{mock.Result(mock.RedisArray(
		mock.RedisError("WRONGTYPE Operation against a key holding the wrong kind of value"),
		mock.RedisArray(mock.RedisInt64(1), mock.RedisInt64(3), mock.RedisInt64(0), mock.RedisInt64(10000))))})
	ctx := context.Background()
	done := make(chan error, 3)
	go func() { _, err := s.Add(ctx, "a", 1); done <- err }()
	<-inFlight
	var wrong error
	var allowed store.Result
	queued := make(chan struct{}, 2)
	go func() { queued <- struct{}{}; wrong = s.AddNoSum(ctx, "b", 2); done <- nil }()
	<-queued
	time.Sleep(50 * time.Millisecond) // b queues first, then c
	go func() { queued <- struct{}{}; var err error; allowed, err = s.Allow(ctx, "c", 10, 3); done <- err }()
	<-queued
	time.Sleep(50 * time.Millisecond)
	close(release)
	for range 3 {
		require.NoError(t, <-done)
	}
	require.ErrorIs(t, wrong, store.ErrWrongType)
	require.True(t, allowed.Allowed)
	require.EqualValues(t, 3, allowed.Sum)
}

func TestTokensSumManyOneBatch(t *testing.T) {
	s, c := mockStore(t, false)
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	args := append([]string{strconv.FormatInt(at.UnixMilli(), 10), "1000", "10000", "10000"}, yearArgs(at)...)
	sha := nativehash.Plain.Sum.SHA1()
	// One read-only script call over both keys; a server that lacks the
	// script gets it again as EVAL_RO.
	c.EXPECT().DoMulti(gomock.Any(), mock.Match(append([]string{"EVALSHA_RO", sha, "2", "ws:a", "ws:b"}, args...)...)).
		Return([]rueidis.RedisResult{mock.Result(mock.RedisError("NOSCRIPT No matching script"))})
	c.EXPECT().DoMulti(gomock.Any(), mock.Match(append([]string{"EVAL_RO", nativehash.Plain.Sum.Source(), "2", "ws:a", "ws:b"}, args...)...)).
		Return([]rueidis.RedisResult{mock.Result(mock.RedisArray(mock.RedisInt64(1), mock.RedisInt64(2)))})
	sums, err := s.SumManyAt(context.Background(), at, []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2}, sums)
}

func TestTokensArgsLayout(t *testing.T) {
	got := backend.Args(backend.ClientClock(42), 1000, 60000, 30000, [5]int64{1, 2, 3, 4, 5}, "x", "y")
	require.Equal(t, []string{"42", "1000", "60000", "30000", "1", "2", "3", "4", "5", "x", "y"}, got)
	got = backend.Args(backend.ServerClock, 1, 2, 2, [5]int64{}, "d")
	require.Equal(t, []string{"", "1", "2", "2", "0", "0", "0", "0", "0", "d"}, got)
}

func TestTokensArgsCache(t *testing.T) {
	var c backend.ArgsCache
	years := [5]int64{1, 2, 3, 4, 5}
	for _, tc := range []struct {
		clock    backend.Clock
		b, w, lb int64
		years    [5]int64
		extra    []string
	}{
		{backend.ServerClock, 1000, 60000, 60000, years, []string{"5"}},
		{backend.ClientClock(42), 1000, 60000, 60000, years, []string{"7", "1"}},
		{backend.ClientClock(43), 1000, 60000, 30000, years, nil},
		{backend.ServerClock, 1000, 60000, 30000, [5]int64{2, 3, 4, 5, 6}, []string{"x"}},
	} {
		require.Equal(t, backend.Args(tc.clock, tc.b, tc.w, tc.lb, tc.years, tc.extra...), c.Build(tc.clock, tc.b, tc.w, tc.lb, tc.years, tc.extra...))
	}
}

// TestTokensTairHash checks the TairHash command tokens and that its write is
// the replica-safe form: EXHINCRBY with no TTL argument, then EXHPEXPIREAT with
// an absolute time, and no key-level expiry.
func TestTokensTairHash(t *testing.T) {
	c := mock.NewClient(gomock.NewController(t))
	cmd := tairhash.FieldPTTLCommand(c, "k", "f")
	require.Equal(t, []string{"EXHPTTL", "k", "f"}, cmd.Commands())
	for _, sc := range []*backend.Script{tairhash.Backend.Write} {
		src := sc.Source()
		incr := strings.Index(src, "redis.call('EXHINCRBY', key, L.field, delta)")
		exp := strings.Index(src, "redis.call('EXHPEXPIREAT', key, L.field, at)")
		require.True(t, incr > 0 && exp > incr, "EXHINCRBY then EXHPEXPIREAT")
		for _, bad := range []string{"PXAT", "KEEPTTL", "'EXHPEXPIRE'", "'PEXPIREAT', key", "'PEXPIRE'"} {
			require.NotContains(t, src, bad)
		}
	}
}
