package limit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/backend"
)

// redisLimiter is what Log and FixedWindow share: a key prefix, a policy and
// one script whose reply is {allowed, count, retry_ms, reset_ms}.
type redisLimiter struct {
	client rueidis.Client
	prefix string
	policy Policy
	script *backend.Script
	max    int64 // the largest cost of one call
}

func (l *redisLimiter) Policy() Policy { return l.policy }

func (l *redisLimiter) Allow(ctx context.Context, key string, n int64) (Decision, error) {
	return l.run(ctx, backend.ServerClock, key, n)
}

func (l *redisLimiter) AllowAt(ctx context.Context, t time.Time, key string, n int64) (Decision, error) {
	return l.run(ctx, backend.ClientClock(t.UnixMilli()), key, n)
}

func (l *redisLimiter) run(ctx context.Context, clock backend.Clock, key string, n int64) (Decision, error) {
	if err := checkCost(n, l.max); err != nil {
		return Decision{}, fmt.Errorf("limit: %s %q: %w", l.policy.Name, key, err)
	}
	if key == "" {
		return Decision{}, fmt.Errorf("limit: %s: %w: empty key", l.policy.Name, ErrInvalid)
	}
	args := []string{clock.Arg(), strconv.FormatInt(l.policy.Window.Milliseconds(), 10),
		strconv.FormatInt(l.policy.Limit, 10), strconv.FormatInt(n, 10), nonce()}
	v, err := l.script.Exec(ctx, l.client, l.prefix+l.policy.Name+":"+key, args).AsIntSlice()
	if err == nil && len(v) != 4 {
		err = fmt.Errorf("unexpected reply %v", v)
	}
	if err != nil {
		return Decision{}, fmt.Errorf("limit: %s %q: %w", l.policy.Name, key, err)
	}
	return Decision{
		Allowed:    v[0] == 1,
		Limit:      l.policy.Limit,
		Remaining:  max(0, l.policy.Limit-v[1]),
		RetryAfter: ms(v[2]),
		ResetAfter: ms(v[3]),
	}, nil
}

// logScript is the exact sliding log. ARGV: clock, window ms, limit, cost,
// nonce. An event at score s is live while s > now - window, so it leaves at
// s + window.
var logScript = backend.NewScript(backend.ClockLua+`
local key = KEYS[1]
local now, srv = ws_clock(ARGV[1])
local w, limit, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
local count = redis.call('ZCARD', key)
if count + n <= limit then
  if n > 0 then
    local add = {}
    for i = 1, n do
      add[#add + 1] = now
      add[#add + 1] = ARGV[5] .. i
    end
    redis.call('ZADD', key, unpack(add))
    if srv == nil then srv = ws_srvnow() end
    redis.call('PEXPIREAT', key, srv + w)
  end
  local reset = 0
  if count + n > 0 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset = tonumber(last[2]) + w - now
  end
  return {1, count + n, 0, reset}
end
local reset = 0
if count > 0 then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  reset = tonumber(last[2]) + w - now
end
if n > limit then return {0, count, -1, reset} end
local k = count + n - limit
local e = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
return {0, count, tonumber(e[2]) + w - now, reset}
`, false)

// fixedScript is the fixed window: a hash {w = window index, n = count} that
// expires when its window ends. ARGV as logScript's (the nonce unused).
var fixedScript = backend.NewScript(backend.ClockLua+`
local key = KEYS[1]
local now, srv = ws_clock(ARGV[1])
local w, limit, n = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local idx = math.floor(now / w)
local left = (idx + 1) * w - now
local cur = redis.call('HMGET', key, 'w', 'n')
local count = 0
if cur[1] and tonumber(cur[1]) == idx then count = tonumber(cur[2]) or 0 end
if count + n <= limit then
  if n > 0 then
    if count == 0 then
      redis.call('HSET', key, 'w', string.format('%d', idx), 'n', n)
    else
      redis.call('HINCRBY', key, 'n', n)
    end
    if srv == nil then srv = ws_srvnow() end
    redis.call('PEXPIREAT', key, srv + left)
  end
  local reset = 0
  if count + n > 0 then reset = left end
  return {1, count + n, 0, reset}
end
if n > limit then return {0, count, -1, left} end
return {0, count, left, left}
`, false)
