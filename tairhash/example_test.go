package tairhash_test

import (
	"fmt"

	"github.com/windowstore/windowstore/store"
)

// The backend's name, for store.WithBackend. Most callers need not force it:
// store.New picks TairHash wherever the server has EXHINCRBY and
// EXHPEXPIREAT; forcing it makes New fail with store.ErrUnavailable on a
// server without them, instead of falling back to a native hash.
func Example() {
	opt := store.WithBackend(store.BackendTairHash) // for store.New(ctx, client, w, opt)
	_ = opt
	fmt.Println(store.BackendTairHash)
	// Output:
	// tairhash
}
