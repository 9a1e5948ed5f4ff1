// Command bench measures windowstore's operations on a Redis-compatible
// server against baselines (the naive hash window script, the ZSET log,
// GCRA, go-redis/redis_rate and raw HINCRBY), in server CPU time per
// operation, throughput and latency. From the repository root:
//
//	go run ./tools/bench --addr HOST:PORT [--json] [flags]
//
// scripts/bench.sh runs it against a pinned server and records its --json
// lines in tests/figures.json; scripts/profile.sh profiles the server under it.
// `go run ./tools/bench --help` lists the flags and the operations.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/store"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// server says how to reach the server: the connection flags.
type server struct {
	addr                   string
	backend                string
	timeout                time.Duration
	tlsCA, tlsCert, tlsKey string
}

// usageError is bad input: exit status 2, nothing was sent.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// run is the whole program; it returns the exit status: 0, 1 for an error of
// the server or the connection, 2 for bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "bench: %v\nrun 'bench --help' for usage\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
}

func dispatch(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	srv := server{backend: "auto", timeout: 5 * time.Second}
	fs.StringVar(&srv.addr, "addr", "", "the server at `ADDR`: host:port, or a redis://, rediss:// or unix:// URL (default $WINDOWSTORE_ADDR, else 127.0.0.1:6379)")
	fs.StringVar(&srv.backend, "backend", srv.backend, "the store's backend `NAME`: "+backendNames())
	fs.DurationVar(&srv.timeout, "timeout", srv.timeout, "the connection's write timeout, a `DURATION`")
	fs.StringVar(&srv.tlsCA, "tls-ca", "", "PEM `FILE` of the CA that signed the server's certificate (rediss:// only)")
	fs.StringVar(&srv.tlsCert, "tls-cert", "", "PEM client certificate `FILE`, with --tls-key (rediss:// only)")
	fs.StringVar(&srv.tlsKey, "tls-key", "", "PEM client key `FILE`, with --tls-cert (rediss:// only)")
	asJSON := fs.Bool("json", false, "print one JSON object per operation and window")
	cfg, buckets, ops := benchFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, usage(fs))
			return err
		}
		return usageError{err.Error()}
	}
	if srv.addr == "" {
		srv.addr = os.Getenv("WINDOWSTORE_ADDR")
	}
	if srv.addr == "" {
		srv.addr = "127.0.0.1:6379"
	}
	if fs.NArg() != 0 {
		return usagef("bench takes no arguments")
	}
	if err := cfg.check(*buckets, *ops); err != nil {
		return err
	}
	if !slices.Contains(store.Backends(), srv.backend) {
		return usagef("--backend %q: want %s", srv.backend, backendNames())
	}
	opt, err := srv.clientOption()
	if err != nil {
		return err
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer client.Close()
	return bench(context.Background(), client, opt, srv.backend, *cfg, &printer{stdout, *asJSON})
}

// usage is the text of --help.
func usage(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("usage: go run ./tools/bench [flags]\n\n" + benchDetails + "\n\nflags:\n")
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	b.WriteString("\n--json prints one object per line:\n  " + benchJSON + "\n")
	return b.String()
}

func backendNames() string {
	return strings.Join(store.Backends(), ", ")
}

// clientOption turns --addr and the --tls-* files into a client option.
func (s server) clientOption() (rueidis.ClientOption, error) {
	u := s.addr
	if !strings.Contains(u, "://") {
		u = "redis://" + u
	}
	opt, err := rueidis.ParseURL(u)
	if err != nil {
		// The parser's error may repeat the URL, password and all.
		return opt, usagef("--addr: want host:port, or a redis://, rediss:// or unix:// URL")
	}
	opt.DisableCache = true
	opt.ConnWriteTimeout = s.timeout
	if s.tlsCA == "" && s.tlsCert == "" && s.tlsKey == "" {
		return opt, nil
	}
	if opt.TLSConfig == nil {
		return opt, usagef("--tls-ca, --tls-cert and --tls-key need a rediss:// address")
	}
	if s.tlsCA != "" {
		pem, err := os.ReadFile(s.tlsCA)
		if err != nil {
			return opt, usagef("--tls-ca: %v", err)
		}
		opt.TLSConfig.RootCAs = x509.NewCertPool()
		if !opt.TLSConfig.RootCAs.AppendCertsFromPEM(pem) {
			return opt, usagef("--tls-ca %s: no PEM certificate in it", s.tlsCA)
		}
	}
	if s.tlsCert != "" || s.tlsKey != "" {
		cert, err := tls.LoadX509KeyPair(s.tlsCert, s.tlsKey)
		if err != nil {
			return opt, usagef("--tls-cert/--tls-key: %v", err)
		}
		opt.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	return opt, nil
}

// printer writes the results: a table, or with --json one object per line.
type printer struct {
	w    io.Writer
	json bool
}

func (p *printer) jsonLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}
