package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// full is a limiter that has spent its whole limit: it refuses every request
// for 20 more seconds. (In production, a limiter of package limit.)
type full struct{}

func (full) Policy() limit.Policy {
	return limit.Policy{Name: "perminute", Limit: 100, Window: time.Minute, Algorithm: "sliding-window"}
}

func (full) Allow(ctx context.Context, key string, n int64) (store.Decision, error) {
	return store.Decision{Allowed: false, Limit: 100, Sum: 100, RetryAfter: 20 * time.Second, ResetAfter: time.Minute}, nil
}

func (f full) AllowAt(ctx context.Context, t time.Time, key string, n int64) (store.Decision, error) {
	return f.Allow(ctx, key, n)
}

// The middleware answers 429 with the IETF RateLimit header fields when a
// rule's limiter refuses, and passes the request on otherwise.
func ExampleNew() {
	mw, err := httplimit.New([]httplimit.Rule{{
		Name:     "api",
		Key:      httplimit.Header("X-User"),
		Limiters: []limit.Limiter{full{}},
	}})
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") }))

	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-User", "42")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code)
	fmt.Println("RateLimit-Policy:", rec.Header().Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", rec.Header().Get("RateLimit"))
	fmt.Println("Retry-After:", rec.Header().Get("Retry-After"))
	// Output:
	// 429
	// RateLimit-Policy: perminute;q=100;w=60
	// RateLimit: perminute;r=0;t=20
	// Retry-After: 20
}
