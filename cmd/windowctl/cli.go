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
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/store"
)

const defaultAddr = "redis://127.0.0.1:6379"

// usageError is bad input from the user: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

type globals struct {
	tlsCA, tlsCert, tlsKey string
	addr                   string
	addrSet                bool
	window                 time.Duration
	bucket                 time.Duration
	backend                string
	prefix                 string
	timeout                time.Duration
	json                   bool
}

// register adds the global flags to fs without resetting values already parsed,
// so they can stand before and after the command.
func (g *globals) register(fs *flag.FlagSet) {
	fs.Func("addr", "server URL: redis://, rediss:// or unix:// (default $WINDOWSTORE_ADDR, else "+defaultAddr+")", func(s string) error {
		g.addr, g.addrSet = s, true
		return nil
	})
	dur := func(dst *time.Duration) func(string) error {
		return func(s string) error {
			d, err := time.ParseDuration(s)
			if err != nil {
				return fmt.Errorf("not a duration (like 10m or 500ms)")
			}
			*dst = d
			return nil
		}
	}
	fs.Func("window", "window length (default 1m)", dur(&g.window))
	fs.Func("bucket", "bucket length; must divide the window (default 1s)", dur(&g.bucket))
	fs.Func("timeout", "deadline for each command (default 5s)", dur(&g.timeout))
	fs.Func("backend", "auto, tairhash, nativehash or nativehash-plain (default auto)", func(s string) error {
		g.backend = s
		return nil
	})
	str := func(dst *string) func(string) error { return func(s string) error { *dst = s; return nil } }
	fs.Func("tls-ca", "PEM file of the CA that signed the server's certificate (rediss:// only)", str(&g.tlsCA))
	fs.Func("tls-cert", "PEM client certificate, with --tls-key (rediss:// only)", str(&g.tlsCert))
	fs.Func("tls-key", "PEM client key, with --tls-cert (rediss:// only)", str(&g.tlsKey))
	fs.Func("prefix", `key prefix (default "ws:")`, func(s string) error {
		g.prefix = s
		return nil
	})
	fs.BoolFunc("json", "print one JSON object per line", func(s string) error {
		v, err := strconv.ParseBool(s)
		g.json = v
		return err
	})
}

// newFlagSet makes a quiet flag set: errors are reported once, by run.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

const usage = `usage: windowctl [flags] COMMAND [args]

commands:
  detect                      the server's backend, and why
  add KEY [DELTA]             add DELTA (default 1) and print the window sum
  sum KEY...                  print the window sums, read in one round trip
  allow --limit N KEY [COST]  count COST (default 1) only if the sum stays <= N
  inspect KEY                 show every bucket of the counter
  demo                        play a short risk-control scenario
  bench [--keys N] [--buckets 10,60] [--goroutines N] [--duration D] [--ops LIST]
                              measure every operation against baselines (flags before bench are global)

flags (before or after the command):
  --addr URL      redis://, rediss:// or unix:// (default $WINDOWSTORE_ADDR, else redis://127.0.0.1:6379)
  --window DUR    window length (default 1m)
  --bucket DUR    bucket length, dividing the window (default 1s)
  --backend NAME  auto, tairhash, nativehash or nativehash-plain (default auto)
  --prefix P      key prefix (default "ws:")
  --timeout DUR   deadline for each command (default 5s)
  --json          one JSON object per line
  --tls-ca FILE, --tls-cert FILE, --tls-key FILE
                  TLS for rediss:// URLs: the CA to trust, and a client certificate
`

// run is the whole program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue), errors.Is(err, store.ErrInvalid):
		fmt.Fprintf(stderr, "windowctl: %v\n", err)
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "run 'windowctl help' for usage\n")
		}
		return 2
	default:
		fmt.Fprintf(stderr, "windowctl: %v\n", err)
		return 1
	}
}

func dispatch(args []string, stdout io.Writer) error {
	g := &globals{window: time.Minute, bucket: time.Second, backend: "auto", prefix: store.DefaultPrefix, timeout: 5 * time.Second}
	fs := newFlagSet("windowctl")
	g.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return nil
		}
		return usagef("%v", err)
	}
	if fs.NArg() == 0 {
		return usagef("no command given")
	}
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	if cmd == "bench" { // bench has flags of its own; the global ones go before it
		return runBench(g, rest, stdout)
	}
	cfs := newFlagSet(cmd)
	g.register(cfs)
	limit := cfs.Int64("limit", -1, "the limit, for allow")
	if err := cfs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return nil
		}
		return usagef("%s: %v", cmd, err)
	}
	pos := cfs.Args()
	if cmd != "detect" && cmd != "demo" && cmd != "help" && len(pos) > 0 {
		keys := pos[:1]
		if cmd == "sum" {
			keys = pos
		}
		for _, k := range keys {
			if err := store.CheckKey(k); err != nil {
				return usagef("%s: %v", cmd, err)
			}
		}
	}
	if cmd != "allow" && *limit != -1 {
		return usagef("%s: --limit is only for allow", cmd)
	}
	if g.window <= 0 {
		return usagef("--window %v: must be positive", g.window)
	}
	if g.bucket <= 0 {
		return usagef("--bucket %v: must be positive", g.bucket)
	}
	w := store.Window{Length: g.window, Bucket: g.bucket}
	if err := w.Validate(); err != nil {
		return usagef("%v", err)
	}
	switch store.Backend(g.backend) {
	case store.Auto, store.TairHash, store.NativeHash, store.NativeHashPlain:
	default:
		return usagef("--backend %q: want auto, tairhash, nativehash or nativehash-plain", g.backend)
	}

	// Check each command's arguments before touching the network.
	var do func(ctx context.Context, c *cli) error
	switch cmd {
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "detect":
		if len(pos) != 0 {
			return usagef("detect takes no arguments")
		}
		do = func(ctx context.Context, c *cli) error { return c.detect(ctx) }
	case "add":
		if len(pos) < 1 || len(pos) > 2 {
			return usagef("usage: add KEY [DELTA]")
		}
		delta := int64(1)
		if len(pos) == 2 {
			d, err := strconv.ParseInt(pos[1], 10, 64)
			if err != nil {
				return usagef("add: DELTA %q is not an integer", pos[1])
			}
			delta = d
		}
		do = func(ctx context.Context, c *cli) error { return c.add(ctx, pos[0], delta) }
	case "sum":
		if len(pos) == 0 {
			return usagef("usage: sum KEY...")
		}
		do = func(ctx context.Context, c *cli) error { return c.sum(ctx, pos) }
	case "allow":
		if *limit < 0 {
			return usagef("allow: --limit N is required, with N >= 0")
		}
		if len(pos) < 1 || len(pos) > 2 {
			return usagef("usage: allow --limit N KEY [COST]")
		}
		cost := int64(1)
		if len(pos) == 2 {
			n, err := strconv.ParseInt(pos[1], 10, 64)
			if err != nil || n < 0 {
				return usagef("allow: COST %q is not a non-negative integer", pos[1])
			}
			cost = n
		}
		do = func(ctx context.Context, c *cli) error { return c.allow(ctx, pos[0], *limit, cost) }
	case "inspect":
		if len(pos) != 1 {
			return usagef("usage: inspect KEY")
		}
		do = func(ctx context.Context, c *cli) error { return c.inspect(ctx, pos[0]) }
	case "demo":
		if len(pos) != 0 {
			return usagef("demo takes no arguments")
		}
		return demo(g, stdout)

	default:
		return usagef("unknown command %q", cmd)
	}

	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	client, err := connect(g)
	if err != nil {
		return err
	}
	defer client.Close()
	st, err := store.New(ctx, client, w, store.WithBackend(store.Backend(g.backend)), store.WithPrefix(g.prefix))
	if err != nil {
		return err
	}
	return do(ctx, &cli{st: st, out: stdout, json: g.json})
}

// address returns the server URL from the flag, the environment or the default.
func (g *globals) address() string {
	if g.addrSet {
		return g.addr
	}
	if a := getenv("WINDOWSTORE_ADDR"); a != "" {
		return a
	}
	return defaultAddr
}

// connect makes a client for the address. Errors never repeat the URL's
// password.
func connect(g *globals) (rueidis.Client, error) {
	addr := g.address()
	opt, err := rueidis.ParseURL(addr)
	if err != nil {
		return nil, usagef("--addr %s: not a redis://, rediss:// or unix:// URL", redact(addr))
	}
	if err := g.applyTLS(&opt); err != nil {
		return nil, err
	}
	opt.DisableCache = true
	opt.ConnWriteTimeout = g.timeout
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %s", redact(addr), strings.ReplaceAll(err.Error(), addr, redact(addr)))
	}
	return c, nil
}

// applyTLS adds the --tls-* files to a rediss:// client option.
func (g *globals) applyTLS(opt *rueidis.ClientOption) error {
	if g.tlsCA == "" && g.tlsCert == "" && g.tlsKey == "" {
		return nil
	}
	if opt.TLSConfig == nil {
		return usagef("--tls-ca, --tls-cert and --tls-key need a rediss:// address")
	}
	if (g.tlsCert == "") != (g.tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together")
	}
	if g.tlsCA != "" {
		pem, err := os.ReadFile(g.tlsCA)
		if err != nil {
			return usagef("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usagef("--tls-ca %s: no PEM certificate in it", g.tlsCA)
		}
		opt.TLSConfig.RootCAs = pool
	}
	if g.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(g.tlsCert, g.tlsKey)
		if err != nil {
			return usagef("--tls-cert/--tls-key: %v", err)
		}
		opt.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	return nil
}

// redact hides the password of a URL.
func redact(addr string) string {
	u, err := url.Parse(addr)
	if err != nil || u.User == nil {
		if err != nil {
			return "(unparsable address)"
		}
		return addr
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

var getenv = os.Getenv

type cli struct {
	st   *store.Store
	out  io.Writer
	json bool
}

func (c *cli) emit(v any, text string) error {
	if c.json {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(c.out, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintln(c.out, text)
	return err
}

type detectOut struct {
	Backend  string   `json:"backend"`
	FieldTTL bool     `json:"field_ttl"`
	Server   string   `json:"server"`
	Version  string   `json:"version"`
	Modules  []string `json:"modules"`
	Reason   string   `json:"reason"`
}

func (c *cli) detect(ctx context.Context) error {
	d := c.st.Detection()
	o := detectOut{d.Backend, d.FieldTTL, d.Server, d.Version, d.Modules, d.Reason}
	if o.Modules == nil {
		o.Modules = []string{}
	}
	mods := "none"
	if len(o.Modules) > 0 {
		mods = strings.Join(o.Modules, ", ")
	}
	return c.emit(o, fmt.Sprintf("backend:   %s\nfield TTL: %v\nserver:    %s %s\nmodules:   %s\nwhy:       %s",
		o.Backend, o.FieldTTL, o.Server, o.Version, mods, o.Reason))
}

type sumOut struct {
	Key string `json:"key"`
	Sum int64  `json:"sum"`
}

func (c *cli) add(ctx context.Context, key string, delta int64) error {
	n, err := c.st.Add(ctx, key, delta)
	if err != nil {
		return err
	}
	return c.emit(sumOut{key, n}, fmt.Sprintf("%s\t%d", key, n))
}

func (c *cli) sum(ctx context.Context, keys []string) error {
	sums, err := c.st.SumMany(ctx, keys)
	var many *store.ManyError
	if err != nil && !errors.As(err, &many) {
		return err
	}
	for i, k := range keys {
		if many != nil && many.Errs[i] != nil {
			continue
		}
		if e := c.emit(sumOut{k, sums[i]}, fmt.Sprintf("%s\t%d", k, sums[i])); e != nil {
			return e
		}
	}
	return err
}

type allowOut struct {
	Key          string `json:"key"`
	Allowed      bool   `json:"allowed"`
	Sum          int64  `json:"sum"`
	Remaining    int64  `json:"remaining"`
	RetryAfterMs int64  `json:"retry_after_ms"`
}

func (c *cli) allow(ctx context.Context, key string, limit, cost int64) error {
	r, err := c.st.Allow(ctx, key, limit, cost)
	if err != nil {
		return err
	}
	retry := r.RetryAfter.Milliseconds()
	if r.RetryAfter < 0 {
		retry = -1
	}
	verdict := "allowed"
	if !r.Allowed {
		verdict = "refused, retry after " + r.RetryAfter.String()
		if r.RetryAfter < 0 {
			verdict = "refused: the cost is over the limit, it never fits"
		}
	}
	return c.emit(allowOut{key, r.Allowed, r.Sum, r.Remaining, retry},
		fmt.Sprintf("%s\t%s\tsum %d\tremaining %d", key, verdict, r.Sum, r.Remaining))
}

type bucketOut struct {
	Field string `json:"field"`
	Start string `json:"start"`
	Value int64  `json:"value"`
	TTLMs int64  `json:"ttl_ms"`
}

type inspectOut struct {
	Key      string      `json:"key"`
	RedisKey string      `json:"redis_key"`
	Backend  string      `json:"backend"`
	Buckets  []bucketOut `json:"buckets"`
	Total    string      `json:"running_total,omitempty"`
	Mark     string      `json:"running_total_mark_ms,omitempty"`
}

func (c *cli) inspect(ctx context.Context, key string) error {
	s, err := c.st.Inspect(ctx, key)
	if err != nil {
		return err
	}
	o := inspectOut{Key: s.Key, RedisKey: s.RedisKey, Backend: s.Backend, Buckets: []bucketOut{}, Total: s.Total, Mark: s.Mark}
	var b strings.Builder
	fmt.Fprintf(&b, "key %s (redis key %s, backend %s, key TTL %s)\n", s.Key, s.RedisKey, s.Backend, ttlText(s.KeyTTL))
	if s.Total != "" {
		fmt.Fprintf(&b, "running total %s of the buckets from %s (as of the last write)\n", s.Total, markText(s.Mark))
	}
	fmt.Fprintf(&b, "%-12s  %-24s  %12s  %10s  %s", "field", "start", "value", "ttl", "live")
	for _, bk := range s.Buckets {
		start := ""
		if !bk.Start.IsZero() {
			start = bk.Start.UTC().Format(time.RFC3339Nano)
		}
		t := bk.TTL.Milliseconds()
		if bk.TTL < 0 {
			t = int64(bk.TTL)
		}
		o.Buckets = append(o.Buckets, bucketOut{bk.Field, start, bk.Value, t})
		fmt.Fprintf(&b, "\n%-12s  %-24s  %12d  %10s  %v", bk.Field, start, bk.Value, ttlText(bk.TTL), bk.Live)
	}
	if len(s.Buckets) == 0 {
		b.WriteString("\n(no buckets: the counter is empty)")
	}
	return c.emit(o, b.String())
}

func markText(ms string) string {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return ms
	}
	return time.UnixMilli(n).UTC().Format(time.RFC3339Nano)
}

func ttlText(d time.Duration) string {
	switch {
	case d == -1:
		return "none"
	case d == -2:
		return "no key"
	}
	return d.String()
}
