// Package baseline holds the references that benchmarks compare windowstore
// with: the textbook naive window script (a hash of second-buckets summed by
// HGETALL), and how to fill its counters.
// It is shared by the bench (tools/bench) and the Go benchmarks of the test suite.
package baseline

import (
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Naive is that textbook design in one script: HINCRBY the current
// second-bucket, EXPIRE, HGETALL, sum the live fields and HDEL the stale ones.
// ARGV: now (Unix seconds), bucket seconds, buckets.
var Naive = rueidis.NewLuaScript(`
local now, size, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = math.floor(now / size)
redis.call('HINCRBY', KEYS[1], cur, 1)
redis.call('EXPIRE', KEYS[1], n * size * 2)
local all = redis.call('HGETALL', KEYS[1])
local sum, stale = 0, {}
for i = 1, #all, 2 do
  if tonumber(all[i]) > cur - n then sum = sum + tonumber(all[i + 1]) else stale[#stale + 1] = all[i] end
end
if #stale > 0 then redis.call('HDEL', KEYS[1], unpack(stale)) end
return sum
`)

// NaiveArgs returns Naive's arguments for one-second buckets.
func NaiveArgs(now time.Time, buckets int) []string {
	return []string{strconv.FormatInt(now.Unix(), 10), "1", strconv.Itoa(buckets)}
}

// NaiveFill builds the HSET that gives a naive counter a full window of
// one-second buckets ending at now.
func NaiveFill(c rueidis.Client, key string, buckets int, now time.Time) rueidis.Completed {
	fv := c.B().Hset().Key(key).FieldValue()
	for i := 0; i < buckets; i++ {
		fv = fv.FieldValue(strconv.FormatInt(now.Unix()-int64(i), 10), "1")
	}
	return fv.Build()
}
