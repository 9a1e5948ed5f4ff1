package tairhash_test

import (
	"fmt"

	"github.com/windowstore/windowstore/tairhash"
)

// The backend's name, for store.WithBackend, and the TairHash commands the
// server must have for it to be picked.
func Example() {
	fmt.Println(tairhash.Backend.Name, "needs:", tairhash.Backend.Requires)
	// Output:
	// tairhash needs: [exhincrby exhpexpireat]
}
