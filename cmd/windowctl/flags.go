package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/windowstore/windowstore/store"
)

// globals are the flags every command takes, before or after its name.
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
	version                bool
}

func defaultGlobals() *globals {
	return &globals{window: time.Minute, bucket: time.Second, backend: "auto", prefix: defaultPrefix, timeout: 5 * time.Second}
}

// register adds the global flags to fs without resetting values already parsed,
// so they can stand before and after the command. Each usage string is the one
// place the flag is documented: the usage texts are made from them.
func (g *globals) register(fs *flag.FlagSet) {
	fs.Func("addr", "the server at `ADDR`: host:port, [ipv6]:port, host (port 6379),\nor a redis://, rediss:// or unix:// URL\n(default $WINDOWSTORE_ADDR, else 127.0.0.1:6379)", func(s string) error {
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
	str := func(dst *string) func(string) error { return func(s string) error { *dst = s; return nil } }
	fs.Func("window", "window length `DURATION` (default 1m)", dur(&g.window))
	fs.Func("bucket", "bucket length `DURATION`, dividing the window (default 1s)", dur(&g.bucket))
	fs.Func("timeout", "deadline `DURATION` of each command (default 5s)", dur(&g.timeout))
	fs.Func("backend", "backend `NAME`: "+backendNames()+"\n(default auto)", str(&g.backend))
	fs.Func("prefix", "key prefix `STRING` (default \"ws:\")", str(&g.prefix))
	fs.Func("tls-ca", "PEM `FILE` of the CA that signed the server's certificate\n(rediss:// only)", str(&g.tlsCA))
	fs.Func("tls-cert", "PEM client certificate `FILE`, with --tls-key (rediss:// only)", str(&g.tlsCert))
	fs.Func("tls-key", "PEM client key `FILE`, with --tls-cert (rediss:// only)", str(&g.tlsKey))
	fs.BoolFunc("json", "print one JSON object per line", boolFlag(&g.json))
	fs.BoolFunc("version", "print the version of windowctl and of Go, and exit", boolFlag(&g.version))
}

func boolFlag(dst *bool) func(string) error {
	return func(s string) error {
		v, err := strconv.ParseBool(s)
		*dst = v
		return err
	}
}

// check refuses bad global flags, before anything is sent.
func (g *globals) check() error {
	if g.window <= 0 {
		return usagef("--window %v: must be positive", g.window)
	}
	if g.bucket <= 0 {
		return usagef("--bucket %v: must be positive", g.bucket)
	}
	if err := g.storeWindow().Validate(); err != nil {
		return usagef("%s", err.(*store.Error).Detail)
	}
	if !slices.Contains(store.Backends(), g.backend) {
		return usagef("--backend %q: want %s", g.backend, backendNames())
	}
	if strings.ContainsAny(g.prefix, "{}") {
		return usagef("--prefix %q: must not contain a brace ({ or })", g.prefix)
	}
	return nil
}

// defaultPrefix is the store's default key prefix (store.WithPrefix).
const defaultPrefix = "ws:"

// backendNames lists the --backend values, from the store's registry.
func backendNames() string { return strings.Join(store.Backends(), ", ") }

func (g *globals) storeWindow() store.Window { return store.Window{Length: g.window, Bucket: g.bucket} }

// newFlagSet makes a quiet flag set: errors are reported once, by run.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseInterspersed parses args with fs, letting flags and positional arguments
// mix (as kubectl and gh do): `sum a b --json` is `--json sum a b`. "--" ends
// the flags. An argument that looks like a negative number ("-1", "-2.5") is
// positional, so `add k -1` subtracts one.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !isFlag(a) {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if f := fs.Lookup(name); f != nil && !hasValue && !isBool(f) && i+1 < len(args) {
			i++ // the flag's value, whatever it looks like (--limit -3)
			flags = append(flags, args[i])
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return pos, nil
}

// isFlag says whether a command-line argument is a flag: it starts with a dash
// and is not "-" or a negative number.
func isFlag(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	c := a[1]
	return !(c >= '0' && c <= '9' || c == '.')
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagUsage lists the flags of fs, one per entry, for a usage text.
func flagUsage(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		arg, text := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if arg != "" {
			head += " " + arg
		}
		lines := strings.Split(text, "\n")
		if len(head) < 22 {
			fmt.Fprintf(&b, "%-22s  %s\n", head, lines[0])
		} else {
			fmt.Fprintf(&b, "%s\n%24s%s\n", head, "", lines[0])
		}
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "%24s%s\n", "", l)
		}
	})
	return b.String()
}
