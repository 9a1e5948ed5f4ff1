package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// ACL rules: the least each backend needs, as the README documents them.
const (
	aclConnect    = "+hello +ping +command|info"
	aclScripts    = "+evalsha +eval +evalsha_ro +eval_ro +time +pttl"
	aclPlain      = aclConnect + " " + aclScripts + " +hgetall +hmget +hset +hincrby +pexpireat +hdel"
	aclFieldTTL   = aclPlain + " +hpexpireat +hpttl"
	aclTairHash   = aclConnect + " " + aclScripts + " +exhgetall +exhincrby +exhpexpireat +exhdel +exhpttl"
	aclSecret     = "s3cret-pass-word"
	aclKeyPattern = "~acl:*"
)

// aclClient creates (or resets) an ACL user with exactly rule, limited to the
// acl: key pattern, and returns a client logged in as it. setRule changes the
// user's rule later.
func aclClient(t *testing.T, admin rueidis.Client, addr, user, rule string) (c rueidis.Client, setRule func(string)) {
	t.Helper()
	setRule = func(r string) {
		args := append([]string{"SETUSER", user, "reset", "on", ">" + aclSecret, aclKeyPattern, "-@all"}, strings.Fields(r)...)
		require.NoError(t, admin.Do(context.Background(), admin.B().Arbitrary("ACL").Args(args...).Build()).Error())
	}
	setRule(rule)
	t.Cleanup(func() {
		_ = admin.Do(context.Background(), admin.B().Arbitrary("ACL", "DELUSER").Args(user).Build()).Error()
	})
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: user, Password: aclSecret,
		DisableCache: true, ForceSingleClient: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c, setRule
}

// TestACLMinimal runs every operation as a user restricted to exactly the
// documented rules, on every backend, and checks that a rule less fails.
func TestACLMinimal(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		rules := map[string]string{"nativehash/false": aclPlain, "nativehash/true": aclFieldTTL, "tairhash/true": aclTairHash}
		key := tg.wantBackend + "/" + map[bool]string{true: "true", false: "false"}[tg.wantFieldTTL]
		rule := rules[key]
		srv := harness.Shared(t, tg.kind)
		admin := srv.Client(t)
		ctx := ctxT(t)
		c, setUser := aclClient(t, admin, srv.Addr, "ws-"+strings.ReplaceAll(tg.name, "/", "-"), rule)
		s, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix("acl:"), store.WithBackend(tg.backend))
		require.NoError(t, err)
		require.Equal(t, tg.wantBackend, s.Detection().Backend, s.Detection().Reason)
		require.Equal(t, tg.wantFieldTTL, s.Detection().FieldTTL, s.Detection().Reason)
		k := harness.Prefix(t)
		at := time.Now().Add(-30 * time.Second)
		_, err = s.AddAt(ctx, at, k, 2) // a bucket that is stale 31 s later, for HDEL
		require.NoError(t, err)
		n, err := s.Add(ctx, k, 3)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
		n, err = s.SumAt(ctx, at.Add(61*time.Second), k)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		_, err = s.SumMany(ctx, []string{k, k + "x"})
		require.NoError(t, err)
		r, err := s.Allow(ctx, k, 10, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		// A write once the first bucket is stale deletes it (HDEL).
		n, err = s.AddAt(ctx, at.Add(61*time.Second), k, 0)
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
		_, err = s.Inspect(ctx, k)
		require.NoError(t, err)
		// Outside the key pattern: refused.
		other, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix("other:"), store.WithBackend(tg.backend))
		require.NoError(t, err)
		_, err = other.Add(ctx, k, 1)
		require.ErrorIs(t, err, store.ErrNoPermission)
		require.NotContains(t, err.Error(), aclSecret)
		// One rule less (the first write command): refused, and the key untouched.
		write := map[string]string{"nativehash/false": "+hset", "nativehash/true": "+hincrby", "tairhash/true": "+exhincrby"}[key]
		setUser(strings.Replace(rule, write, "", 1))
		_, err = s.Add(ctx, k, 1)
		require.ErrorIs(t, err, store.ErrNoPermission)
		n, err = s.Sum(ctx, k)
		require.NoError(t, err)
		require.EqualValues(t, 4, n, "a refused add changed the counter")
	})
}

// TestACLLimiters runs the log and fixed-window limiters as users restricted
// to the rules the README gives for them.
func TestACLLimiters(t *testing.T) {
	srv := harness.Shared(t, harness.Redis70)
	admin := srv.Client(t)
	ctx := ctxT(t)
	base := aclConnect + " +evalsha +eval +time +pexpireat"
	for _, tc := range []struct {
		name, rule string
		make       func(c rueidis.Client) (limit.Limiter, error)
	}{
		{"log", base + " +zremrangebyscore +zcard +zadd +zrange", func(c rueidis.Client) (limit.Limiter, error) {
			return limit.NewLog(c, "log", "acl:", 2, time.Minute)
		}},
		{"fixed", base + " +hmget +hset +hincrby", func(c rueidis.Client) (limit.Limiter, error) {
			return limit.NewFixedWindow(c, "fixed", "acl:", 2, time.Minute)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := aclClient(t, admin, srv.Addr, "ws-lim-"+tc.name, tc.rule)
			l, err := tc.make(c)
			require.NoError(t, err)
			k := harness.Prefix(t)
			for i, want := range []bool{true, true, false} {
				d, err := l.Allow(ctx, k, 1)
				require.NoError(t, err, "call %d", i)
				require.Equal(t, want, d.Allowed, "call %d", i)
			}
		})
	}
}
