package limit

import (
	"strconv"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/limitlua"
	"github.com/windowstore/windowstore/store"
)

// maxGCRASpan (2^52) bounds burst x period in ms: the GCRA script counts time
// in fractions of a ms and keeps every figure an exact integer in a double.
const maxGCRASpan = 1 << 52

// NewGCRA returns a GCRA limiter (the generic cell rate algorithm, a token
// bucket without a refill timer): rate units of cost per period on average,
// with bursts of up to burst units. One unit frees up every period / rate; a
// fresh key, or one idle for burst x period / rate, admits burst units at
// once. The state of a key is one small string, whatever the rate, that
// expires when the key is fresh again.
//
// The decision is exact to the ms on the clock in use: RetryAfter is the
// first whole ms at which the same request is admitted (one ms before, it is
// refused), and ResetAfter the first at which the whole burst is free.
// Decisions report Limit as burst, so that Remaining, the whole units free
// now, is within [0, Limit]. A cost over burst never fits: it is refused with
// RetryAfter -1. Its Policy has Limit rate, Window period and Burst burst.
//
// The admission sequence is that of github.com/go-redis/redis_rate's AllowN
// on the same limit (Rate rate, Period period, Burst burst); Remaining differs
// for a refused cost over 1, which redis_rate reports as 0 and this as the
// units that are free. Options: WithPrefix, WithObserver (script "gcra").
func NewGCRA(client rueidis.Client, name string, rate int64, period time.Duration, burst int64, opts ...Option) (Limiter, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if rate < 1 || rate > maxExact {
		return nil, newError(name, store.ErrInvalid, "rate "+strconv.FormatInt(rate, 10)+" is not within [1, 2^53]")
	}
	if period < time.Millisecond || period%time.Millisecond != 0 {
		return nil, newError(name, store.ErrInvalid, "period "+period.String()+" is not a positive whole number of milliseconds")
	}
	pms := period.Milliseconds()
	if most := maxGCRASpan / pms; burst < 1 || burst > most {
		return nil, newError(name, store.ErrInvalid, "burst "+strconv.FormatInt(burst, 10)+" is not within [1, "+
			strconv.FormatInt(most, 10)+"] (2^52 / the period in ms)")
	}
	// The emission interval T = period / rate ms, as p / q in lowest terms.
	g := gcd(pms, rate)
	p, q := pms/g, rate/g
	args := []string{strconv.FormatInt(p, 10), strconv.FormatInt(q, 10), strconv.FormatInt(burst, 10)}
	l, err := newScriptLimiter(client, limitlua.GCRA, maxExact,
		Policy{Name: name, Limit: rate, Window: period, Burst: burst, Algorithm: "gcra"}, burst, args, opts)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
