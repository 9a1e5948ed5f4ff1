package nativehash_test

import (
	"fmt"

	"github.com/windowstore/windowstore/nativehash"
)

// The two backends of the family, by the names store.WithBackend takes, and
// what each needs of the server.
func Example() {
	for _, b := range []struct {
		name     string
		fieldTTL bool
		needs    []string
	}{
		{nativehash.FieldTTL.Name, nativehash.FieldTTL.FieldTTL, nativehash.FieldTTL.Requires},
		{nativehash.Plain.Name, nativehash.Plain.FieldTTL, nativehash.Plain.Requires},
	} {
		fmt.Println(b.name, "field TTL:", b.fieldTTL, "needs:", b.needs)
	}
	// Output:
	// nativehash-fieldttl field TTL: true needs: [hincrby hpexpireat]
	// nativehash-plain field TTL: false needs: [hincrby]
}
