// Command windowstored serves windowstore's sliding-window rate limits and risk
// features to every language: Envoy's rate-limit service (RLS v3 over gRPC),
// configured in envoyproxy/ratelimit's YAML format, and a feature API over
// HTTP/JSON.
//
//	windowstored --addr redis://HOST:PORT --config FILE --grpc 127.0.0.1:8081 --http 127.0.0.1:8080
//
// Every descriptor of a rate-limit request is decided all or nothing: a request
// refused by one descriptor counts nothing on the others. The configuration is
// reloaded on SIGHUP and when its file changes; a bad new configuration is
// refused with a log line and the old one stays. SIGINT and SIGTERM stop the
// server once the calls in flight have finished. docs/windowstored.md has the
// configuration, the APIs and the metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/redisaddr"
	"github.com/windowstore/windowstore/internal/refusal"
	"github.com/windowstore/windowstore/metrics/prom"
	"github.com/windowstore/windowstore/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

type flags struct {
	addr, config, grpcAddr, httpAddr string
	tls                              redisaddr.TLSFiles
	listen                           listenFlags
	watch, shutdown, timeout         time.Duration
	logLevel, logFormat              string
	refusals                         int
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet("windowstored", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := redisaddr.Default
	if a := strings.TrimSpace(os.Getenv(redisaddr.Env)); a != "" {
		def = a
	}
	fs.StringVar(&f.addr, "addr", def, "the server at `ADDR`: host:port, [ipv6]:port, host (port 6379),\nor a redis://, rediss:// or unix:// URL; a cluster node's address reaches\nthe whole cluster (default $WINDOWSTORE_ADDR, else 127.0.0.1:6379)")
	fs.StringVar(&f.tls.CA, "tls-ca", "", "PEM `FILE` of the CA that signed the server's certificate (rediss:// only)")
	fs.StringVar(&f.tls.Cert, "tls-cert", "", "PEM client certificate `FILE`, with --tls-key (rediss:// only)")
	fs.StringVar(&f.tls.Key, "tls-key", "", "PEM client key `FILE`, with --tls-cert (rediss:// only)")
	fs.StringVar(&f.listen.cert, "listen-cert", "", "PEM certificate `FILE` of the gRPC and HTTP listeners, with --listen-key: they serve TLS")
	fs.StringVar(&f.listen.key, "listen-key", "", "PEM key `FILE` of --listen-cert")
	fs.StringVar(&f.listen.clientCA, "listen-client-ca", "", "PEM `FILE` of the CAs whose client certificates the listeners require (mTLS)")
	fs.StringVar(&f.listen.tokenFile, "api-token-file", "", "a `FILE` holding a bearer token the HTTP API's calls must send\n(Authorization: Bearer TOKEN); /healthcheck and /metrics stay open")
	fs.StringVar(&f.config, "config", "", "the configuration `PATH`: a YAML file, or a directory of them (required)")
	fs.StringVar(&f.grpcAddr, "grpc", "127.0.0.1:8081", "where the gRPC rate-limit service listens (`HOST:PORT`; empty: not at all)")
	fs.StringVar(&f.httpAddr, "http", "127.0.0.1:8080", "where the HTTP API, /healthcheck and /metrics listen (`HOST:PORT`; empty: not at all)")
	fs.DurationVar(&f.watch, "watch", time.Second, "how often the configuration's files are checked for a change, put in force when two checks in a row read it (0: only on SIGHUP)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "how long a shutdown waits for the calls in flight")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long a rate-limit or feature call may take, end to end (then UNAVAILABLE or 503), and the server connection's write timeout")
	fs.IntVar(&f.refusals, "refusal-cache", refusal.DefaultSize, "how many refused requests are answered again from memory, without a server call,\nuntil their retry (`N`; 0: off; always off on a cluster)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "json", "json or text")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if f.config == "" {
		return nil, errors.New("--config is required")
	}
	if f.grpcAddr == "" && f.httpAddr == "" {
		return nil, errors.New("--grpc and --http are both empty: nothing to serve")
	}
	if f.refusals < 0 || f.refusals > 10_000_000 {
		return nil, fmt.Errorf("--refusal-cache %d: want 0 (off) to 10,000,000 requests", f.refusals)
	}
	return f, nil
}

func newLogger(f *flags, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	o := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", f.logFormat)
}

// run is the server's life: exit status 0 after a clean shutdown, 1 when it
// cannot start or stops on an error, 2 for bad flags.
func run(args []string, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "windowstored:", err)
		}
		return 2
	}
	log, err := newLogger(f, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "windowstored:", err)
		return 2
	}
	opt, err := redisaddr.Parse(f.addr)
	if err == nil {
		err = f.tls.Apply(&opt)
	}
	if err != nil {
		fmt.Fprintln(stderr, "windowstored: --addr", err)
		return 2
	}
	lisTLS, err := f.listen.tlsConfig()
	if err != nil {
		fmt.Fprintln(stderr, "windowstored:", err)
		return 2
	}
	token, err := f.listen.token()
	if err != nil {
		fmt.Fprintln(stderr, "windowstored:", err)
		return 2
	}
	opt.ConnWriteTimeout = f.timeout
	client, err := redisaddr.Connect(opt, f.addr)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	defer client.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	rec, err := prom.New(reg, "windowstored")
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	tel, err := setupOTel(context.Background())
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	if len(tel.what) > 0 {
		log.Info("opentelemetry: exporting over OTLP/gRPC", "signals", tel.what)
	}
	s := &server{client: client, log: log, rec: rec, obs: tel.obs, stores: map[string]*store.Store{}, timeout: f.timeout}
	if f.refusals > 0 && client.Mode() != rueidis.ClientModeCluster {
		// On a cluster a request's limits in other slots are reserved and
		// taken back when one refuses, so a refusal can come from a
		// reservation that is gone: every refusal asks the server.
		s.refusals = refusal.New(f.refusals)
	}
	if tel.rec != nil {
		s.rec = recorders{rec, tel.rec}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := s.load(ctx, f.config); err != nil {
		log.Error("cannot start: bad configuration", "config", f.config, "err", err)
		return 1
	}
	log.Info("configuration loaded", append([]any{"config", f.config}, s.rt.Load().cfg.summary()...)...)

	errc := make(chan error, 2)
	var gs *grpc.Server
	var hs *http.Server
	var healthSrv *health.Server
	if f.grpcAddr != "" {
		lis, err := listen(f.grpcAddr, lisTLS)
		if err != nil {
			log.Error("cannot start", "grpc", f.grpcAddr, "err", err)
			return 1
		}
		gs = grpc.NewServer()
		rlspb.RegisterRateLimitServiceServer(gs, rls{s: s})
		healthSrv = health.NewServer()
		healthpb.RegisterHealthServer(gs, healthSrv)
		log.Info("serving gRPC", "addr", lis.Addr().String(), "tls", lisTLS != nil, "mtls", f.listen.clientCA != "")
		go func() { errc <- gs.Serve(lis) }()
	}
	if f.httpAddr != "" {
		lis, err := listen(f.httpAddr, lisTLS)
		if err != nil {
			log.Error("cannot start", "http", f.httpAddr, "err", err)
			return 1
		}
		hs = &http.Server{Handler: requireToken(token, s.routes(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))), ReadHeaderTimeout: 10 * time.Second}
		log.Info("serving HTTP", "addr", lis.Addr().String(), "tls", lisTLS != nil, "mtls", f.listen.clientCA != "", "token", token != "")
		go func() { errc <- hs.Serve(lis) }()
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if f.watch > 0 {
		t := time.NewTicker(f.watch)
		defer t.Stop()
		tick = t.C
	}
	reload := func(why string, load func() error) {
		err := load()
		switch {
		case errors.Is(err, errUnchanged):
			s.failure = ""
			if why == "SIGHUP" {
				log.Info("configuration unchanged", "config", f.config)
			}
		case err != nil:
			if why == "SIGHUP" || !s.sameFailure(err) {
				log.Error("configuration refused: the one in force stays", "config", f.config, "trigger", why, "err", err)
			}
		default:
			s.failure = ""
			log.Info("configuration reloaded", append([]any{"config", f.config, "trigger", why}, s.rt.Load().cfg.summary()...)...)
		}
	}
	var w settle
	status := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-hup:
			reload("SIGHUP", func() error { return s.load(ctx, f.config) })
		case <-tick:
			// A change is put in force when two checks in a row read the
			// same files, and what is put in force is what the second read:
			// a file read while an editor writes it (truncated, or half
			// written and still valid) is not served, unless the writing
			// pauses for a whole check.
			files, d, err := readConfig(f.config)
			if err != nil {
				d = "error: " + err.Error()
			}
			if w.ready(d, s.rt.Load().cfg.digest) {
				reload("file change", func() error {
					if err != nil {
						return err
					}
					return s.put(ctx, f.config, files, d)
				})
			}
		case err := <-errc:
			log.Error("server stopped", "err", err)
			status = 1
			break loop
		}
	}
	stop()
	log.Info("shutting down: finishing the calls in flight", "timeout", f.shutdown)
	if healthSrv != nil {
		healthSrv.Shutdown()
	}
	done := make(chan struct{})
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdown)
	defer cancel()
	go func() {
		if hs != nil {
			if err := hs.Shutdown(sctx); err != nil {
				log.Warn("HTTP shutdown", "err", err)
			}
		}
		if gs != nil {
			gs.GracefulStop()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-sctx.Done():
		log.Warn("shutdown timed out: closing the calls still in flight")
		if gs != nil {
			gs.Stop()
		}
		<-done
	}
	// Flush what the exporters hold, within what is left of the shutdown's time.
	if err := tel.shutdown(sctx); err != nil {
		log.Warn("opentelemetry shutdown", "err", err)
	}
	log.Info("stopped")
	return status
}

// settle decides, at each check of the configuration's files, whether they
// are loaded: only once two checks in a row read the same content. The zero
// value is ready for use; it is not safe for concurrent use.
type settle struct{ last string }

// ready reports whether files whose digest is d are loaded, given the digest
// of the configuration in force: d is what the last check read too, or d is
// in force (the load then finds nothing to do).
func (w *settle) ready(d, inForce string) bool {
	if d == inForce || d == w.last {
		return true
	}
	w.last = d
	return false
}

// sameFailure reports whether err is the reload failure last logged, so that
// a bad file watched every second is logged once, not every second.
func (s *server) sameFailure(err error) bool {
	same := s.failure == err.Error()
	s.failure = err.Error()
	return same
}
