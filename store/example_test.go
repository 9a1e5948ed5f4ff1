package store_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/store"
)

// The examples need a server, so `go test` here only compiles them; the
// integration suite runs them on a real server and checks that they print
// what their "Prints:" comments say (tests/readme_test.go,
// TestExamplesPrintWhatTheySay).

// Count logins per user over the last 10 minutes, in 1-minute buckets, and
// refuse the 6th.
func Example() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()

	logins, err := store.New(ctx, client, store.Window{Length: 10 * time.Minute, Bucket: time.Minute},
		store.WithPrefix("logins:"))
	if err != nil {
		panic(err)
	}

	// At(t) uses the given instant; without it Allow uses the server's clock.
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for i := 0; i < 6; i++ {
		at := t0.Add(time.Duration(i) * 30 * time.Second)
		r, err := logins.At(at).Allow(ctx, "user:42", 5, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s allowed=%v sum=%d remaining=%d retry-after=%v\n",
			at.Format("15:04:05"), r.Allowed, r.Sum, r.Remaining, r.RetryAfter)
	}
	sum, _ := logins.At(t0.Add(10*time.Minute)).Sum(ctx, "user:42")
	fmt.Println("at 12:10:00 the sum is", sum)
	// Prints:
	// 12:00:00 allowed=true sum=1 remaining=4 retry-after=0s
	// 12:00:30 allowed=true sum=2 remaining=3 retry-after=0s
	// 12:01:00 allowed=true sum=3 remaining=2 retry-after=0s
	// 12:01:30 allowed=true sum=4 remaining=1 retry-after=0s
	// 12:02:00 allowed=true sum=5 remaining=0 retry-after=0s
	// 12:02:30 allowed=false sum=5 remaining=0 retry-after=7m30s
	// at 12:10:00 the sum is 3
}

// Sum a card's spend over the last hour, and over the last 5 minutes of it.
func ExampleStore_Over() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	spend, err := store.New(ctx, client, store.Window{Length: time.Hour, Bucket: time.Minute})
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	_, _ = spend.At(t0).Add(ctx, "card:X", 1200)
	_, _ = spend.At(t0.Add(50*time.Minute)).Add(ctx, "card:X", 300)
	now := t0.Add(52 * time.Minute)
	hour, _ := spend.At(now).Sum(ctx, "card:X")
	last5, _ := spend.At(now).Over(5*time.Minute).Sum(ctx, "card:X")
	fmt.Println(hour, last5)
	// Prints: 1500 300
}

// A window is checked before anything is sent: New refuses one whose bucket
// does not divide it, or that is longer than 180 days. Errors wrap
// ErrInvalid, and say what is wrong in the caller's words.
func ExampleWindow_Validate() {
	for _, w := range []store.Window{
		{Length: 10 * time.Minute, Bucket: time.Minute},
		{Length: time.Minute, Bucket: 7 * time.Second},
		{Length: 365 * 24 * time.Hour, Bucket: time.Hour},
	} {
		err := w.Validate()
		fmt.Println(w, errors.Is(err, store.ErrInvalid), err)
	}
	// Output:
	// 10m0s/1m0s false <nil>
	// 1m0s/7s true store: window: invalid argument: bucket 7s does not divide window 1m0s
	// 8760h0m0s/1h0m0s true store: window: invalid argument: window 8760h0m0s is longer than the maximum 4320h0m0s
}

// The largest payment of a card, its average, and when it was last seen, over
// the last 24 hours in hourly buckets.
func ExampleStore_RecordStat() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()

	day, err := store.New(ctx, client, store.Window{Length: 24 * time.Hour, Bucket: time.Hour}, store.WithPrefix("pay:"))
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for i, amount := range []int64{120, 15, 300} {
		at := day.At(t0.Add(time.Duration(i) * time.Hour))
		for _, st := range []store.Stat{store.StatMax, store.StatAvg, store.StatLast} {
			if _, err := at.RecordStat(ctx, store.StatEvent{Key: "card:4242", Stat: st, Value: amount}); err != nil {
				panic(err)
			}
		}
	}
	now := day.At(t0.Add(3 * time.Hour))
	largest, _ := now.ReadStat(ctx, "card:4242", store.StatMax)
	avg, _ := now.ReadStat(ctx, "card:4242", store.StatAvg)
	last, _ := now.ReadStat(ctx, "card:4242", store.StatLast)
	fmt.Println("largest", largest.Value, "average", avg.Mean(2), "of", avg.Count)
	fmt.Println("last seen", time.UnixMilli(last.Value).UTC().Format(time.TimeOnly))
	none, _ := now.ReadStat(ctx, "card:77", store.StatMax)
	fmt.Println("card:77 has a max:", none.OK)
	// Prints:
	// largest 300 average 145 of 3
	// last seen 14:00:00
	// card:77 has a max: false
}

// Count the distinct cards a device used over the last day, in hourly
// buckets. A distinct count is a HyperLogLog per bucket: exact for small
// sets, within 0.81% (standard error) for large ones.
func ExampleStore_RecordStat_distinct() {
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()

	devices, err := store.New(ctx, client, store.Window{Length: 24 * time.Hour, Bucket: time.Hour}, store.WithPrefix("devices:"))
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	for i, card := range []string{"card:1", "card:2", "card:1", "card:3"} {
		v, err := devices.At(t0.Add(time.Duration(i)*time.Hour)).RecordStat(ctx,
			store.StatEvent{Key: "device:d7", Stat: store.StatDistinct, Members: []string{card}})
		if err != nil {
			panic(err)
		}
		fmt.Printf("+%dh %s: %d distinct cards\n", i, card, v.Value)
	}
	// A day after the second card, the first two hours have left the window.
	v, _ := devices.At(t0.Add(25*time.Hour)).ReadStat(ctx, "device:d7", store.StatDistinct)
	fmt.Println("+25h:", v.Value, "distinct cards")
	// Prints:
	// +0h card:1: 1 distinct cards
	// +1h card:2: 2 distinct cards
	// +2h card:1: 2 distinct cards
	// +3h card:3: 3 distinct cards
	// +25h: 2 distinct cards
}
