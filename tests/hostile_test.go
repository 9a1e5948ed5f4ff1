package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis/rueidiscompat"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/hook"
	"github.com/windowstore/windowstore/internal/keyspace"
	"github.com/windowstore/windowstore/store"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestHostileKeys writes counters whose keys come from hostile input on a
// real server: every key gets its own counter, nothing reaches Redis with a
// brace or a control byte, and bad keys are refused before anything is sent.
func TestHostileKeys(t *testing.T) {
	t.Parallel()
	srv := harness.Shared(t, harness.Redis70)
	c := srv.Client(t)
	ctx := ctxT(t)
	prefix := harness.Prefix(t)
	s, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: time.Second}, store.WithPrefix(prefix))
	require.NoError(t, err)
	keys := []string{
		"{victim}", "{victim}:logins", "victim", "%7Bvictim%7D", // braces, and their escaped spelling
		"a:b", "a", ":b", "a:", // separators
		"1.2.3.4", "::ffff:1.2.3.4", "2001:db8::1", // IPs
		"\xff\xfe", "\x00", "line\nbreak", "tab\there", "é", "日本", "%", "%%", "%25", // bytes and escapes
		strings.Repeat("x", keyspace.MaxKeyLen),
	}
	for i, k := range keys {
		_, err := s.Add(ctx, k, int64(i+1))
		require.NoError(t, err, "%q", k)
	}
	sums, err := s.SumMany(ctx, keys)
	require.NoError(t, err)
	for i := range keys {
		require.EqualValues(t, i+1, sums[i], "key %q shares a counter", keys[i])
	}
	// rueidiscompat gives the go-redis style API on the same client.
	redisKeys, err := rueidiscompat.NewAdapter(c).Keys(ctx, prefix+"*").Result()
	require.NoError(t, err)
	require.Len(t, redisKeys, len(keys))
	for _, rk := range redisKeys {
		// prefix + "{" + escaped key + "}:" + shape (with the plain hash,
		// "}:h", the key's head, and "}:1m/1s:b", its buckets' hash): the
		// only braces are the store's.
		body, ok := strings.CutSuffix(strings.TrimPrefix(rk, prefix+"{"), "}:1m/1s")
		if !ok {
			body, ok = strings.CutSuffix(strings.TrimPrefix(rk, prefix+"{"), "}:h")
		}
		require.True(t, ok, rk)
		require.False(t, strings.ContainsAny(body, "{} \n\t\x00"), "raw %q reached Redis", rk)
		back, err := hook.UnescapeKey(body)
		require.NoError(t, err)
		require.Contains(t, keys, back)
	}
	for _, bad := range []string{"", strings.Repeat("x", keyspace.MaxKeyLen+1)} {
		_, err := s.Add(ctx, bad, 1)
		require.ErrorIs(t, err, store.ErrInvalid)
	}
}
