// Command apiserver is a small HTTP API protected by windowstore's rate
// limiting, to copy from:
//
//	GET  /hello          5 per 10 s per client IP (sliding window), and 100 per hour (fixed window)
//	POST /login          3 per minute per user (exact log), by the X-User header (400 without it); fails closed
//	GET  /users/{id}     10 per minute per user id in the path (sliding window); fails open
//
// Run it against a Redis server:
//
//	go run ./examples/apiserver --addr redis://127.0.0.1:6379 --listen 127.0.0.1:8080
//	curl -i http://127.0.0.1:8080/hello
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

func main() {
	addr := flag.String("addr", "redis://127.0.0.1:6379", "Redis URL")
	listen := flag.String("listen", "127.0.0.1:8080", "HTTP listen address (port 0: any free port, named in the log)")
	trusted := flag.String("trusted-proxy", "", "a trusted proxy network, such as 10.0.0.0/8 (X-Forwarded-For is ignored without one)")
	flag.Parse()

	opt, err := rueidis.ParseURL(*addr)
	if err != nil {
		log.Fatalf("apiserver: --addr: %v", err)
	}
	// rueidis turns client-side caching on by default (CLIENT TRACKING on
	// each connection); windowstore reads through scripts and never uses it,
	// and some proxies and ACLs refuse that command.
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		log.Fatalf("apiserver: connect: %v", err)
	}
	defer client.Close()

	var proxies []netip.Prefix
	if *trusted != "" {
		p, err := netip.ParsePrefix(*trusted)
		if err != nil {
			log.Fatalf("apiserver: --trusted-proxy: %v", err)
		}
		proxies = append(proxies, p)
	}
	h, err := handler(context.Background(), client, proxies)
	if err != nil {
		log.Fatalf("apiserver: %v", err)
	}
	// Binding before serving lets the log name the port taken for ":0".
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("apiserver: --listen: %v", err)
	}
	log.Printf("apiserver: listening on %s", ln.Addr())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "apiserver:", err)
		os.Exit(1)
	}
}

// handler builds the routes and their limits.
func handler(ctx context.Context, c rueidis.Client, proxies []netip.Prefix) (http.Handler, error) {
	short, err := store.New(ctx, c, store.Window{Length: 10 * time.Second, Bucket: time.Second}, store.WithPrefix("api:"))
	if err != nil {
		return nil, err
	}
	minute, err := store.New(ctx, c, store.Window{Length: time.Minute, Bucket: 5 * time.Second}, store.WithPrefix("api:"))
	if err != nil {
		return nil, err
	}
	per10s, err := limit.NewSlidingWindow(short, "per10s", 5)
	if err != nil {
		return nil, err
	}
	perHour, err := limit.NewFixedWindow(c, "perhour", 100, time.Hour, limit.WithPrefix("api:"))
	if err != nil {
		return nil, err
	}
	logins, err := limit.NewLog(c, "logins", 3, time.Minute, limit.WithPrefix("api:"))
	if err != nil {
		return nil, err
	}
	perUser, err := limit.NewSlidingWindow(minute, "peruser", 10)
	if err != nil {
		return nil, err
	}
	logErr := func(r *http.Request, rule string, err error) { log.Printf("apiserver: rule %s: %v", rule, err) }
	opts := []httplimit.Option{httplimit.WithOnError(logErr), httplimit.WithLegacyHeaders(), httplimit.WithLocalTier(0)}

	hello, err := httplimit.New([]httplimit.Rule{{Name: "hello", Key: httplimit.ClientIP(proxies...), Limiters: []limit.Limiter{per10s, perHour}}}, opts...)
	if err != nil {
		return nil, err
	}
	login, err := httplimit.New([]httplimit.Rule{{Name: "login", Key: httplimit.Header("X-User"), Limiters: []limit.Limiter{logins}}}, opts...)
	if err != nil {
		return nil, err
	}
	// PathValue needs the mux's match, so this limit wraps the route's handler.
	user, err := httplimit.New([]httplimit.Rule{{Name: "user", Key: httplimit.PathValue("id"), Limiters: []limit.Limiter{perUser}, FailOpen: true}}, opts...)
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /hello", hello(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	})))
	mux.Handle("POST /login", login(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "welcome "+r.Header.Get("X-User")+"\n")
	})))
	mux.Handle("GET /users/{id}", user(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "user %s\n", r.PathValue("id"))
	})))
	return mux, nil
}
