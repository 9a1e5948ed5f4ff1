package fieldcodec_test

import (
	"fmt"
	"time"

	"github.com/windowstore/windowstore/fieldcodec"
)

func Example() {
	c, err := fieldcodec.New(time.Minute, nil) // UTC years
	if err != nil {
		panic(err)
	}
	at := time.Date(2025, 1, 1, 0, 2, 30, 0, time.UTC)
	fmt.Println("field:", c.Field(at))

	// Ten minutes back from 00:02:30 reaches into 2024, a leap year.
	live, _ := c.Live(at, 10*time.Minute)
	fmt.Println("live in 2025:", live.Current.Lo, "to", live.Current.Hi)
	fmt.Println("live in 2024:", live.Previous.Lo, "to", live.Previous.Hi)
	start, _ := c.Start(live.Previous.Hi, at)
	fmt.Println("last bucket of 2024 starts", start.UTC().Format(time.RFC3339))
	// Output:
	// field: 2
	// live in 2025: 0 to 2
	// live in 2024: 527033 to 527039
	// last bucket of 2024 starts 2024-12-31T23:59:00Z
}

func ExampleCheckWindow() {
	fmt.Println(fieldcodec.CheckWindow(time.Minute, 7*time.Second))
	fmt.Println(fieldcodec.CheckWindow(365*24*time.Hour, 24*time.Hour))
	fmt.Println(fieldcodec.CheckWindow(10*time.Minute, time.Minute))
	// Output:
	// fieldcodec: invalid argument: bucket 7s does not divide window 1m0s
	// fieldcodec: invalid argument: window 8760h0m0s is longer than the maximum 4320h0m0s
	// <nil>
}
