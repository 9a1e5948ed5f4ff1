package limit

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/backend"
)

// MaxLogCost is the largest cost of one Log call: the log adds one member per unit.
const MaxLogCost = 1000

// NewLog returns the exact sliding log: a sorted set per key, one member per
// admitted unit of cost, scored by the server's clock in ms. Keys are
// prefix + key. It admits at most limit units in any window-long span of time,
// exactly; its memory grows with the admitted rate (see the README's table).
func NewLog(client rueidis.Client, name, prefix string, limit int64, window time.Duration) (Limiter, error) {
	return newRedisLimiter(client, logScript, MaxLogCost, Policy{Name: name, Limit: limit, Window: window, Algorithm: "log"}, prefix)
}

// NewFixedWindow returns a fixed-window counter: windows aligned on multiples
// of window since the Unix epoch, one small hash per key that expires when its
// window ends. Up to 2 x limit can pass in a window-long span that straddles an
// edge; RetryAfter and ResetAfter are the time to the next edge.
func NewFixedWindow(client rueidis.Client, name, prefix string, limit int64, window time.Duration) (Limiter, error) {
	return newRedisLimiter(client, fixedScript, maxExact, Policy{Name: name, Limit: limit, Window: window, Algorithm: "fixed-window"}, prefix)
}

func newRedisLimiter(client rueidis.Client, script *backend.Script, maxCost int64, p Policy, prefix string) (Limiter, error) {
	if err := check(p.Name, p.Limit, p.Window); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalid)
	}
	return &redisLimiter{client: client, prefix: prefix, script: script, max: maxCost, policy: p}, nil
}

// nonce makes log members unique: 64 random bits, 11 characters.
func nonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:]) + ":"
}
