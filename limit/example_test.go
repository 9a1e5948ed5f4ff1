package limit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// down is a limiter whose server cannot be reached, as a limiter of this
// package answers when Redis is down: every call fails with a network error.
type down struct{}

func (down) Policy() limit.Policy {
	return limit.Policy{Name: "perminute", Limit: 10, Window: time.Minute, Algorithm: "sliding-window"}
}

func (down) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	return store.Decision{}, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
}

func (d down) AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error) {
	return d.Allow(ctx, key, n)
}

// While the server is down, a Degraded limiter decides in process, on this
// instance's share of the limit: 10 a minute over 2 instances is 5 here. After
// 3 failures its breaker opens, and the server is left alone for the
// cool-down.
func ExampleDegrade() {
	l, err := limit.Degrade(down{}, limit.WithInstances(2), limit.WithFailures(3), limit.WithCooldown(10*time.Second))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for i := range 6 {
		d, err := l.AllowAt(ctx, t0.Add(time.Duration(i)*time.Second), "user:42", 1)
		fmt.Printf("allowed=%v degraded=%v limit=%d remaining=%d retry=%v err=%v\n",
			d.Allowed, d.Degraded, d.Limit, d.Remaining, d.RetryAfter, err)
	}
	fmt.Println("breaker:", l.State())
	// Output:
	// allowed=true degraded=true limit=5 remaining=4 retry=0s err=<nil>
	// allowed=true degraded=true limit=5 remaining=3 retry=0s err=<nil>
	// allowed=true degraded=true limit=5 remaining=2 retry=0s err=<nil>
	// allowed=true degraded=true limit=5 remaining=1 retry=0s err=<nil>
	// allowed=true degraded=true limit=5 remaining=0 retry=0s err=<nil>
	// allowed=false degraded=true limit=5 remaining=0 retry=55s err=<nil>
	// breaker: open
}

// At most 2 requests of a user in flight: a lease per request, released when
// the request is done, or by its TTL if the process dies first. (It needs a
// server: TestExamplesPrintWhatTheySay, in tests/, runs it on one.)
func ExampleNewConcurrency() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	st, err := store.New(ctx, client, store.Window{Length: time.Minute, Bucket: time.Second})
	if err != nil {
		panic(err)
	}
	inflight, err := limit.NewConcurrency(st, "inflight", 2, 30*time.Second)
	if err != nil {
		panic(err)
	}
	a, _ := inflight.Acquire(ctx, "user:42")
	b, _ := inflight.Acquire(ctx, "user:42")
	c, _ := inflight.Acquire(ctx, "user:42")
	fmt.Println(a.Allowed, b.Allowed, c.Allowed, c.Sum, c.RetryAfter > 0)
	released, _ := inflight.Release(ctx, "user:42", a.ID)
	again, _ := inflight.Release(ctx, "user:42", a.ID)
	fmt.Println(released, again)
	d, _ := inflight.Acquire(ctx, "user:42")
	fmt.Println(d.Allowed, d.Remaining)
	// Prints:
	// true true false 2 true
	// true false
	// true 0
}

// Three limits of one user, kept as one counter: 3 a minute, 20 an hour and
// 100 a day. The fourth login of a minute is refused by "perminute", with
// its retry: when the minute's first login leaves the window. (It needs a
// server: TestExamplesPrintWhatTheySay, in tests/, runs it on one.)
func ExampleNewWindows() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	logins, err := limit.NewWindows(client, "login", []limit.WindowLimit{
		{Name: "perminute", Limit: 3, Window: store.Window{Length: time.Minute, Bucket: time.Second}},
		{Name: "perhour", Limit: 20, Window: store.Window{Length: time.Hour, Bucket: time.Minute}},
		{Name: "perday", Limit: 100, Window: store.Window{Length: 24 * time.Hour, Bucket: time.Hour}},
	})
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 4; i++ {
		d, err := logins.AllowAt(ctx, t0.Add(time.Duration(i)*10*time.Second), "user:42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Policy, d.Remaining, d.RetryAfter, d.Policies[1].Sum)
	}
	// Prints:
	// true perminute 2 0s 1
	// true perminute 1 0s 2
	// true perminute 0 0s 3
	// false perminute 0 30s 3
}

// 10 requests a second on average, in bursts of up to 3: three at once are
// admitted, the fourth is refused until a tenth of a second has freed one.
// (It needs a server: TestExamplesPrintWhatTheySay, in tests/, runs it on one.)
func ExampleNewGCRA() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	persec, err := limit.NewGCRA(client, "persec", 10, time.Second, 3)
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 0, 100 * time.Millisecond} {
		d, err := persec.AllowAt(ctx, t0.Add(at), "user:42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Prints:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 100ms
	// true 0 0s
}

// A sliding window of 5 logins a minute per user, on a store of one-minute
// windows in one-second buckets, and the same limiter combined with an
// hourly one of 20: the combination admits a cost in both windows or in
// neither. (It needs a server: TestExamplesPrintWhatTheySay, in tests/,
// runs it on one.)
func ExampleCombine() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	minute, err := store.New(ctx, client, store.Window{Length: time.Minute, Bucket: time.Second})
	if err != nil {
		panic(err)
	}
	hour, err := store.New(ctx, client, store.Window{Length: time.Hour, Bucket: time.Minute})
	if err != nil {
		panic(err)
	}
	perMinute, err := limit.NewSlidingWindow(minute, "perminute", 5)
	if err != nil {
		panic(err)
	}
	perHour, err := limit.NewSlidingWindow(hour, "perhour", 20)
	if err != nil {
		panic(err)
	}
	both, err := limit.Combine(perMinute, perHour)
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for i := range 6 {
		d, err := both.AllowAt(ctx, t0.Add(time.Duration(i)*time.Second), "user:42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.Policy, d.Remaining, d.Policies[1].Sum)
	}
	// Prints:
	// true perminute 4 1
	// true perminute 3 2
	// true perminute 2 3
	// true perminute 1 4
	// true perminute 0 5
	// false perminute 0 5
}
