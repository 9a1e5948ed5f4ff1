package main

import (
	"strconv"

	"github.com/redis/rueidis"
)

// ringHead is a prototype of a layout with no sweep: a key's windows kept
// whole in one string, each as a ring of its buckets' values beside its
// current bucket and running total, so that an event, whether or not a
// bucket moved on, is one GET and one SET of the key:
//
//	per window:  c (bucket index)  t (sum)  slot 0 ... slot n-1
//	window {10s, 1s} at 12:00:17.1, last write at 12:00:15:
//	  c = 15: slots 16 and 17 (x mod 10) held buckets 6 and 7, which left;
//	  t -= slot 16 + slot 17; both zeroed; c = 17; slot 17 += cost.
//
// Like the other prototypes it is a lower bound: doubles (no exact path
// past 2^53), absolute bucket indices, no late events, a clock that goes
// back counted in the newest bucket. KEYS[1]: the string. ARGV: the number
// of windows m, the cost, then per window its bucket ms, buckets n and
// limit. It admits when every window's sum plus the cost is within its
// limit, then counts the cost in each; it answers {allowed, the first
// window's sum}. The string lives for the longest window.
var ringHead = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m, cost = tonumber(ARGV[1]), tonumber(ARGV[2])
local W, size, ttl = {}, 0, 0
for q = 1, m do
  local a = 3 + 3 * (q - 1)
  local b, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  W[q] = {b = b, n = n, limit = tonumber(ARGV[a + 2]), o = size, c = 0}
  size = size + n + 2
  if n * b > ttl then ttl = n * b end
end
local fmt = '<' .. string.rep('d', size)
local s = redis.call('GET', KEYS[1])
local A
if s and #s == 8 * size then
  A = {struct.unpack(fmt, s)}
else
  A = {}
  for j = 1, size do A[j] = 0 end
end
for q = 1, m do
  local w = W[q]
  local o, n = w.o, w.n
  local c = math.floor(now / w.b)
  local oc, sum = A[o + 1], A[o + 2]
  if c > oc then
    if c - oc >= n then
      sum = 0
      for j = o + 3, o + n + 2 do A[j] = 0 end
    else
      for x = oc + 1, c do
        local j = o + 3 + x % n
        sum = sum - A[j]
        A[j] = 0
      end
    end
    A[o + 1], A[o + 2] = c, sum
  else
    c = oc
  end
  if sum + cost > w.limit then return {0, sum} end
  w.c = c
end
for q = 1, m do
  local w = W[q]
  local o = w.o
  local j = o + 3 + w.c % w.n
  A[j], A[o + 2] = A[j] + cost, A[o + 2] + cost
end
redis.call('SET', KEYS[1], struct.pack(fmt, unpack(A, 1, size)), 'PX', string.format('%d', ttl))
return {1, A[2]}
`)

// ringArgs are ringHead's arguments for the first n of wins, with limit
// and a cost of 1.
func ringArgs(wins []window, n, buckets int, limit int64) []string {
	args := []string{strconv.Itoa(n), "1"}
	for _, w := range wins[:n] {
		args = append(args, strconv.FormatInt(w.bucket.Milliseconds(), 10), strconv.Itoa(buckets),
			strconv.FormatInt(limit, 10))
	}
	return args
}
