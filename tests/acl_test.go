package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/acldoc"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/internal/limitlua"
	"github.com/windowstore/windowstore/limit"
	_ "github.com/windowstore/windowstore/nativehash"
	"github.com/windowstore/windowstore/store"
	_ "github.com/windowstore/windowstore/tairhash"
	"github.com/windowstore/windowstore/tests/harness"
)

// ACL rules: the least each backend and limiter needs, as the packages
// declare them (docs/acl.md documents them; package acldoc's tests check it).
var aclRules = acldoc.Parse(append(append(append(backend.Named(backend.NamePlain).ACLRules(), backend.Named(backend.NameFieldTTL).ACLRules()...),
	backend.Named(backend.NameTairHash).ACLRules()...), limitlua.ACL...)...)

func aclRule(label string) string { return acldoc.Rule(aclRules, label) }

const (
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
	t.Parallel()
	forEach(t, func(t *testing.T, tg target) {
		labels := map[string]string{"nativehash-plain": "plain hash", "nativehash-fieldttl": "field TTL", "tairhash": "TairHash"}
		key := tg.wantBackend
		rule := aclRule(labels[key])
		require.NotEmpty(t, rule, "no ACL rule for %s in docs/acl.md", key)
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
		_, err = s.At(at).Add(ctx, k, 2) // a bucket that is stale 31 s later, for HDEL
		require.NoError(t, err)
		n, err := s.Add(ctx, k, 3)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
		n, err = s.At(at.Add(61*time.Second)).Sum(ctx, k)
		require.NoError(t, err)
		require.EqualValues(t, 3, n)
		_, err = s.SumMany(ctx, []string{k, k + "x"})
		require.NoError(t, err)
		r, err := s.Allow(ctx, k, 10, 1)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		// A write once the first bucket is stale deletes it (HDEL).
		n, err = s.At(at.Add(61*time.Second)).Add(ctx, k, 0)
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
		_, err = s.Inspect(ctx, k)
		require.NoError(t, err)
		// The rule has no +fcall: the store fell back to EVALSHA by itself.
		require.False(t, hook.Functions(s), "functions in use without +fcall")
		// With the functions rule, a store runs FCALL and FCALL_RO.
		setUser(rule + " " + aclRule("functions"))
		fs, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix("acl:"), store.WithBackend(tg.backend))
		require.NoError(t, err)
		fcalls := func() int64 {
			info := srv.Cmd(t, "INFO", "commandstats")
			return statField(t, info, "cmdstat_fcall", "calls") + statField(t, info, "cmdstat_fcall_ro", "calls")
		}
		before := fcalls()
		n, err = fs.Add(ctx, k, 1)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
		n, err = fs.Sum(ctx, k)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
		require.True(t, hook.Functions(fs), "the functions rule did not suffice")
		require.GreaterOrEqual(t, fcalls()-before, int64(2), "no FCALL or FCALL_RO reached the server")
		n, err = fs.Add(ctx, k, -1)
		require.NoError(t, err)
		require.EqualValues(t, 4, n)
		// Event ids, several windows at once (a group, with a write that
		// answers no sum) and distinct counts: with the rules docs/acl.md adds
		// for them.
		setUser(rule + " " + aclRule("event ids") + " " + aclRule("distinct counts"))
		tiers, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix("acl:"),
			store.WithBackend(tg.backend), store.WithTiers(store.Window{Length: time.Hour, Bucket: time.Minute}))
		require.NoError(t, err)
		for i := 0; i < 2; i++ {
			a, err := tiers.Record(ctx, store.Event{ID: "e1", Key: k + "t", Delta: 2})
			require.NoError(t, err)
			require.Equal(t, i == 1, a.Duplicate)
			require.EqualValues(t, 2+i, a.Sum, "a duplicate answers the state now")
			_, err = tiers.Record(ctx, store.Event{ID: "e2", Key: k + "t", Delta: 1, NoSum: true})
			require.NoError(t, err)
		}
		ar, err := tiers.Record(ctx, store.Event{ID: "e3", Key: k + "t", Delta: 1, Limit: 10})
		require.NoError(t, err)
		require.True(t, ar.Allowed)
		require.EqualValues(t, 4, ar.Sum)
		for i := 0; i < 2; i++ {
			d, err := addDistinct(ctx, s, k+"d", "card-1", "card-2")
			require.NoError(t, err)
			require.EqualValues(t, 2, d)
		}
		d, err := countDistinct(ctx, s, k+"d")
		require.NoError(t, err)
		require.EqualValues(t, 2, d)
		// A linked decision with an event id, refused by one entity: the
		// other's reservation is taken back and its id deleted (event ids).
		setUser(rule + " " + aclRule("event ids"))
		res0, err := store.ApplyAll(ctx,
			store.Batch{ID: "acl-link", Ops: []store.Op{{Store: s.Entity("a"), Key: k, Kind: store.OpLimit, Limit: 5, Delta: 1}}},
			store.Batch{ID: "acl-link", Ops: []store.Op{{Store: s.Entity("b"), Key: k, Kind: store.OpLimit, Limit: 0, Delta: 1}}})
		require.NoError(t, err)
		require.False(t, res0[0].Allowed)
		// Leases, with their rule (and a rate limit decided with one).
		setUser(rule + " " + aclRule("leases"))
		cc, err := limit.NewConcurrency(s, "acl", 1, time.Minute)
		require.NoError(t, err)
		l, err := cc.Acquire(ctx, k)
		require.NoError(t, err)
		require.True(t, l.Allowed)
		ok, err := cc.Refresh(ctx, k, l.ID)
		require.NoError(t, err)
		require.True(t, ok)
		res, err := store.Apply(ctx, store.Batch{Ops: []store.Op{cc.Op(k, ""), {Store: s, Key: k, Kind: store.OpLimit, Limit: 5, Delta: 1}}})
		require.NoError(t, err)
		require.False(t, res[0].Allowed, "the lease is held")
		ok, err = cc.Release(ctx, k, l.ID)
		require.NoError(t, err)
		require.True(t, ok)
		setUser(rule)
		// Outside the key pattern: refused.
		other, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix("other:"), store.WithBackend(tg.backend))
		require.NoError(t, err)
		_, err = other.Add(ctx, k, 1)
		require.ErrorIs(t, err, store.ErrNoPermission)
		require.NotContains(t, err.Error(), aclSecret)
		// One rule less (the first write command): refused, and the key untouched.
		write := map[string]string{"nativehash-plain": "+set", "nativehash-fieldttl": "+hincrby", "tairhash": "+exhincrby"}[key]
		setUser(strings.Replace(rule, write, "", 1))
		_, err = s.Add(ctx, k, 1)
		require.ErrorIs(t, err, store.ErrNoPermission)
		n, err = s.Sum(ctx, k)
		require.NoError(t, err)
		require.EqualValues(t, 4, n, "a refused add changed the counter")
	})
}

// TestACLLimiters runs the log, fixed-window, GCRA and windows limiters as users restricted
// to the rules docs/acl.md gives for them: with EVALSHA (the rule alone), and
// as functions (the functions rule, without EVALSHA).
func TestACLLimiters(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	admin := srv.Client(t)
	ctx := ctxT(t)
	for _, tc := range []struct {
		name, rule string
		make       func(c rueidis.Client) (limit.Limiter, error)
	}{
		{"log", aclRule("log"), func(c rueidis.Client) (limit.Limiter, error) {
			return limit.NewLog(c, "log", 2, time.Minute, limit.WithPrefix("acl:"))
		}},
		{"fixed", aclRule("fixed window"), func(c rueidis.Client) (limit.Limiter, error) {
			return limit.NewFixedWindow(c, "fixed", 2, time.Minute, limit.WithPrefix("acl:"))
		}},
		{"gcra", aclRule("gcra"), func(c rueidis.Client) (limit.Limiter, error) {
			return limit.NewGCRA(c, "gcra", 2, time.Minute, 2, limit.WithPrefix("acl:"))
		}},
		{"windows", aclRule("windows"), func(c rueidis.Client) (limit.Limiter, error) {
			return limit.NewWindows(c, "windows", []limit.WindowLimit{
				{Name: "persec", Limit: 5, Window: store.Window{Length: time.Second, Bucket: 100 * time.Millisecond}},
				{Name: "permin", Limit: 2, Window: store.Window{Length: time.Minute, Bucket: time.Second}},
			}, limit.WithPrefix("acl:"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, setUser := aclClient(t, admin, srv.Addr, "ws-lim-"+tc.name, tc.rule)
			l, err := tc.make(c)
			require.NoError(t, err)
			k := harness.Prefix(t)
			// One instant of the client's clock for every call: on the
			// server's clock a minute's edge could reset the fixed window.
			at := windowStart(time.Minute)
			for i, want := range []bool{true, true, false} {
				d, err := l.AllowAt(ctx, at, k, 1)
				require.NoError(t, err, "call %d", i)
				require.Equal(t, want, d.Allowed, "call %d", i)
			}
			// With the functions rule and without EVALSHA, a limiter
			// runs as a function (FCALL; FUNCTION LOAD where the server
			// lacks the library): nothing else would be allowed.
			setUser(strings.Replace(tc.rule, " +evalsha +eval ", " ", 1) + " " + aclRule("functions"))
			l, err = tc.make(c)
			require.NoError(t, err)
			d, err := l.AllowAt(ctx, at, k, 1)
			require.NoError(t, err, "as a function")
			require.False(t, d.Allowed, "as a function")
		})
	}
}
