package fieldcodec_test

import (
	"fmt"
	"time"

	"github.com/windowstore/windowstore/fieldcodec"
)

// A one-minute bucket's code is its index within its UTC year: 00:02:30 on
// January 1st is in bucket 2, and the last minute of 2024, a leap year, is
// bucket 366*24*60 - 1.
func Example() {
	c, err := fieldcodec.New(time.Minute)
	if err != nil {
		panic(err)
	}
	at := time.Date(2025, 1, 1, 0, 2, 30, 0, time.UTC)
	fmt.Println("field:", c.Field(at))

	start, _ := c.Start(527039, at)
	fmt.Println("bucket 527039 before then starts", start.UTC().Format(time.RFC3339))

	code, err := fieldcodec.Decode("0042")
	fmt.Println(code, err)
	// Output:
	// field: 2
	// bucket 527039 before then starts 2024-12-31T23:59:00Z
	// 0 fieldcodec: invalid argument: field "0042" is not a bucket code
}
