// Command rlsdiff sends the same Envoy rate-limit calls (RLS v3 gRPC) to
// windowstored and to envoyproxy/ratelimit, one after the other, over one
// Redis server, and prints every answer where the two differ: the overall
// code and, per descriptor, code, current limit, limit remaining and
// duration until reset (in whole seconds, rounded up, as envoyproxy/ratelimit
// gives it; windowstored's is exact to the ms).
//
//	go run ./rlsdiff --redis 127.0.0.1:6379 --windowstored /tmp/windowstored --envoy /tmp/envoy-ratelimit
//
// By default windowstored decides the configuration's limits as fixed
// windows (algorithm: fixed added to every rate_limit, and override_algorithm:
// fixed for a descriptor's own limit), so that the answers
// compare with envoyproxy/ratelimit's one for one; --algorithm sliding keeps
// windowstore's default. The configuration and the calls are testdata/'s
// unless --config and --requests name others. A call is a line
// "DOMAIN|DESCRIPTOR;DESCRIPTOR...|HITS": a descriptor is "key=value,..."
// with "#=N" for its own hits_addend and "@=N/UNIT" for its own limit (a
// limit override, as 5/minute), HITS the request's; "sleep 1s" waits.
// With --headers (the default) the response header fields are compared too:
// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED against windowstored's
// response_headers: envoy. Each run uses key prefixes of its own, so runs do
// not meet. The differences
// it finds are the ones docs/windowstored.md lists ("Beside
// envoyproxy/ratelimit").
//
// Build envoyproxy/ratelimit yourself from its public source, as for
// rlsbench: this repository neither holds nor builds it.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/windowstore/windowstore/tools/internal/rlsrun"
)

//go:embed testdata/config.yaml
var defaultConfig string

//go:embed testdata/requests.txt
var defaultRequests string

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rlsdiff:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rlsdiff", flag.ContinueOnError)
	redis := fs.String("redis", "127.0.0.1:6379", "the Redis server both services use")
	ws := fs.String("windowstored", "", "windowstored's binary (go build ./cmd/windowstored)")
	envoy := fs.String("envoy", "", "envoyproxy/ratelimit's binary, built from its source")
	cfgFile := fs.String("config", "", "a configuration in envoyproxy/ratelimit's format (default: testdata/config.yaml)")
	reqFile := fs.String("requests", "", "the calls, one per line (default: testdata/requests.txt)")
	algorithm := fs.String("algorithm", "fixed", "windowstored's algorithm for every rate_limit: fixed, or sliding (its default)")
	all := fs.Bool("all", false, "print every call, not only those whose answers differ")
	hdrs := fs.Bool("headers", true, "compare the response header fields too: envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED, windowstored's response_headers: envoy")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ws == "" || *envoy == "" {
		return errors.New("--windowstored and --envoy name the two binaries")
	}
	cfg, reqs := defaultConfig, defaultRequests
	if *cfgFile != "" {
		b, err := os.ReadFile(*cfgFile)
		if err != nil {
			return err
		}
		cfg = string(b)
	}
	if *reqFile != "" {
		b, err := os.ReadFile(*reqFile)
		if err != nil {
			return err
		}
		reqs = string(b)
	}
	wsCfg := cfg
	switch *algorithm {
	case "fixed":
		wsCfg = perUnit.ReplaceAllString(cfg, "$1, algorithm: fixed")
	case "sliding":
	default:
		return fmt.Errorf("--algorithm %q: want fixed or sliding", *algorithm)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	wsCfg += "\n---\nwindowstored:\n  prefix: \"rlsdiff:" + run + ":\"\n"
	if *algorithm == "fixed" {
		wsCfg += "  override_algorithm: fixed\n"
	}
	if *hdrs {
		wsCfg += "  response_headers: envoy\n"
	} else {
		wsCfg += "  response_headers: none\n"
	}
	calls, err := parseCalls(reqs)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rlsdiff")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e, err := rlsrun.Envoy(*envoy, *redis, dir, cfg, "CACHE_KEY_PREFIX=rlsdiff"+run+"_",
		"LIMIT_RESPONSE_HEADERS_ENABLED="+strconv.FormatBool(*hdrs))
	if err != nil {
		return err
	}
	defer e.Stop()
	// The refusal cache off: every call asks the server, as envoyproxy/
	// ratelimit's do without its local cache.
	w, err := rlsrun.Windowstored(*ws, *redis, dir, wsCfg, "--refusal-cache", "0")
	if err != nil {
		return err
	}
	defer w.Stop()
	diffs, n := 0, 0
	for _, c := range calls {
		if c.sleep > 0 {
			time.Sleep(c.sleep)
			continue
		}
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		re, ee := e.RL.ShouldRateLimit(ctx, c.req)
		rw, ew := w.RL.ShouldRateLimit(ctx, c.req)
		cancel()
		a, b := show(re, ee), show(rw, ew)
		if a == b && !*all {
			continue
		}
		mark := "  "
		if a != b {
			mark, diffs = "!=", diffs+1
		}
		fmt.Fprintf(out, "%s %s\n     envoyproxy/ratelimit: %s\n     windowstored:         %s\n", mark, c.line, a, b)
	}
	fmt.Fprintf(out, "%d of %d calls answered differently (windowstored: algorithm %s)\n", diffs, n, *algorithm)
	return nil
}

// perUnit finds a rate_limit's requests_per_unit, where "algorithm: fixed"
// goes for windowstored.
var perUnit = regexp.MustCompile(`(requests_per_unit: *[0-9]+)`)

type call struct {
	line  string
	req   *rlspb.RateLimitRequest
	sleep time.Duration
}

func parseCalls(s string) ([]call, error) {
	var cs []call
	for i, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
			continue
		case strings.HasPrefix(l, "sleep "):
			d, err := time.ParseDuration(strings.TrimPrefix(l, "sleep "))
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			cs = append(cs, call{line: l, sleep: d})
			continue
		}
		q, err := parseCall(l)
		if err != nil {
			return nil, fmt.Errorf("line %d: %q: %w", i+1, l, err)
		}
		cs = append(cs, call{line: l, req: q})
	}
	return cs, nil
}

func parseCall(l string) (*rlspb.RateLimitRequest, error) {
	parts := strings.Split(l, "|")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, errors.New(`want "DOMAIN|DESCRIPTORS" or "DOMAIN|DESCRIPTORS|HITS"`)
	}
	q := &rlspb.RateLimitRequest{Domain: parts[0]}
	if len(parts) == 3 {
		h, err := strconv.ParseUint(parts[2], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("hits: %w", err)
		}
		q.HitsAddend = uint32(h)
	}
	for _, d := range strings.Split(parts[1], ";") {
		desc := &ratelimitpb.RateLimitDescriptor{}
		for _, kv := range strings.Split(d, ",") {
			if kv == "" {
				continue
			}
			k, v, _ := strings.Cut(kv, "=")
			if k == "@" {
				n, unit, _ := strings.Cut(v, "/")
				rpu, err := strconv.ParseUint(n, 10, 32)
				u, ok := typepb.RateLimitUnit_value[strings.ToUpper(unit)]
				if err != nil || !ok {
					return nil, fmt.Errorf("a descriptor's limit %q: want N/UNIT, as 5/minute", v)
				}
				desc.Limit = &ratelimitpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(rpu), Unit: typepb.RateLimitUnit(u)}
				continue
			}
			if k == "#" {
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("a descriptor's hits: %w", err)
				}
				desc.HitsAddend = wrapperspb.UInt64(n)
				continue
			}
			desc.Entries = append(desc.Entries, &ratelimitpb.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		q.Descriptors = append(q.Descriptors, desc)
	}
	return q, nil
}

// show is an answer as one line: gRPC errors by code only (their texts are
// each service's own).
func show(r *rlspb.RateLimitResponse, err error) string {
	if err != nil {
		return "error " + status.Code(err).String()
	}
	var b strings.Builder
	b.WriteString(r.OverallCode.String())
	for _, s := range r.Statuses {
		b.WriteString(" [" + s.Code.String())
		if l := s.CurrentLimit; l != nil {
			fmt.Fprintf(&b, " %d/%s", l.RequestsPerUnit, l.Unit)
			if l.Name != "" {
				fmt.Fprintf(&b, " %q", l.Name)
			}
		} else {
			b.WriteString(" no limit")
		}
		fmt.Fprintf(&b, " remaining %d", s.LimitRemaining)
		if s.DurationUntilReset != nil {
			fmt.Fprintf(&b, " reset %ds", int64(math.Ceil(s.DurationUntilReset.AsDuration().Seconds())))
		}
		b.WriteString("]")
	}
	for _, h := range r.ResponseHeadersToAdd {
		b.WriteString(" " + h.Key + ": " + h.Value)
	}
	return b.String()
}
