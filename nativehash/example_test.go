package nativehash_test

import (
	"fmt"

	"github.com/windowstore/windowstore/store"
)

// The family's two backends, by the names store.WithBackend takes. Most
// callers force neither: store.New picks field TTL where the server has
// HPEXPIREAT (Redis >= 7.4, Valkey >= 9), else the plain hash. Forcing the
// plain hash keeps one layout on a fleet of mixed versions; the two read
// each other's counters.
func Example() {
	opt := store.WithBackend(store.BackendPlain) // for store.New(ctx, client, w, opt)
	_ = opt
	fmt.Println(store.BackendPlain)
	fmt.Println(store.BackendFieldTTL)
	// Output:
	// nativehash-plain
	// nativehash-fieldttl
}
