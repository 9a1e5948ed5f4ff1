package features_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
)

// A feature set is checked before anything is sent: every error wraps
// store.ErrInvalid and names the feature.
func ExampleNew() {
	minute := store.Window{Length: time.Minute, Bucket: time.Second}
	hour := store.Window{Length: time.Hour, Bucket: time.Minute}
	_, err := features.New(context.Background(), nil, []features.Feature{
		{Name: "logins", Entity: "user", Kind: features.Count, Windows: []store.Window{minute, hour}},
		{Name: "login_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{minute, hour}, Limits: []int64{5}},
	})
	fmt.Println(errors.Is(err, store.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// features: new: invalid argument: feature login_limit: 1 limits for 2 windows
}
