package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
	"go.yaml.in/yaml/v3"
)

// The configuration is one file, or a directory of *.yaml and *.yml files (as
// envoyproxy/ratelimit reads its runtime directory). Each file holds one or
// more YAML documents, and each document is one of:
//
//   - a rate-limit domain, in envoyproxy/ratelimit's format (domain,
//     descriptors with key, value, rate_limit, descriptors, shadow_mode), with
//     fields of windowstore's own in rate_limit: algorithm (sliding, the
//     default, fixed or gcra), bucket (a Go duration) and burst (gcra's);
//   - a feature set: feature_set (its name) and features;
//   - the server's settings: a windowstored mapping.
//
// docs/windowstored.md documents every field.

// yamlDoc is one YAML document of the configuration.
type yamlDoc struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
	FeatureSet  string           `yaml:"feature_set"`
	Features    []yamlFeature    `yaml:"features"`
	Settings    *yamlSettings    `yaml:"windowstored"`
}

type yamlDescriptor struct {
	Key         string           `yaml:"key"`
	Value       string           `yaml:"value"`
	RateLimit   *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
	ShadowMode  bool             `yaml:"shadow_mode"`
	// envoyproxy/ratelimit's fields that name its statistics or fill its
	// dynamic metadata: accepted, so that its files load, and unused.
	DetailedMetric bool           `yaml:"detailed_metric"`
	ValueToMetric  bool           `yaml:"value_to_metric"`
	Metadata       map[string]any `yaml:"metadata"`
	// Fields whose meaning windowstored does not implement: refused.
	QuotaMode      bool `yaml:"quota_mode"`
	ShareThreshold bool `yaml:"share_threshold"`
}

type yamlRateLimit struct {
	line            int    // of the mapping in its file, for errors
	RequestsPerUnit *int64 `yaml:"requests_per_unit"`
	Unit            string `yaml:"unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Name            string `yaml:"name"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
	// windowstore's own.
	Algorithm string `yaml:"algorithm"`
	Bucket    string `yaml:"bucket"`
	Burst     *int64 `yaml:"burst"`
}

type yamlFeature struct {
	line        int      // of the mapping in its file, for errors
	Name        string   `yaml:"name"`
	Entity      string   `yaml:"entity"`
	Kind        string   `yaml:"kind"`
	Windows     []string `yaml:"windows"`
	Of          string   `yaml:"of"`
	Limits      []int64  `yaml:"limits"`
	SpendAmount bool     `yaml:"spend_amount"`
}

// UnmarshalYAML decodes a rate_limit and keeps its line.
func (y *yamlRateLimit) UnmarshalYAML(n *yaml.Node) error {
	type plain yamlRateLimit
	if err := strictDecode(n, (*plain)(y), "RateLimit"); err != nil {
		return err
	}
	y.line = n.Line
	return nil
}

// UnmarshalYAML decodes a feature and keeps its line.
func (y *yamlFeature) UnmarshalYAML(n *yaml.Node) error {
	type plain yamlFeature
	if err := strictDecode(n, (*plain)(y), "Feature"); err != nil {
		return err
	}
	y.line = n.Line
	return nil
}

// strictDecode decodes mapping n into the struct v points to, refusing keys
// v has no field for, as the file's decoder does (Node.Decode alone would
// ignore them); part names v's type in the error (see yamlReason).
func strictDecode(n *yaml.Node, v any, part string) error {
	if n.Kind == yaml.MappingNode {
		t := reflect.TypeOf(v).Elem()
		known := map[string]bool{}
		for i := range t.NumField() {
			if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
				known[tag] = true
			}
		}
		for i := 0; i < len(n.Content); i += 2 {
			if k := n.Content[i]; !known[k.Value] {
				return fmt.Errorf("line %d: field %s not found in %s", k.Line, k.Value, part)
			}
		}
	}
	return n.Decode(v)
}

// yamlReason is a YAML decoding error in the file's words: the Go types of
// the decoder named as the configuration's parts.
func yamlReason(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(strings.TrimPrefix(msg, "unmarshal errors:\n  "), "\n  ", "; ")
	for typ, part := range map[string]string{
		"type main.yamlDoc":        "a document (domain, descriptors, feature_set, features, windowstored)",
		"type main.yamlDescriptor": "a descriptor (key, value, rate_limit, descriptors, shadow_mode, detailed_metric, value_to_metric, metadata)",
		"type main.yamlSettings":   "windowstored settings (shadow_mode, on_error, response_headers, override_algorithm, prefix, feature_prefix)",
		"RateLimit":                "a rate_limit (requests_per_unit, unit, unlimited, name, replaces, algorithm, bucket, burst)",
		"Feature":                  "a feature (name, entity, kind, windows, of, limits, spend_amount)",
	} {
		msg = strings.ReplaceAll(msg, " not found in "+typ, " is not a field of "+part)
	}
	return msg
}

// lineOf is where, a file's name, at a line of it.
func lineOf(file string, line int) string { return file + ":" + strconv.Itoa(line) }

type yamlSettings struct {
	ShadowMode      bool   `yaml:"shadow_mode"`
	OnError         string `yaml:"on_error"`
	ResponseHeaders string `yaml:"response_headers"`
	// OverrideAlgorithm is the algorithm of a descriptor's own limit that
	// replaces no counting limit: sliding or fixed.
	OverrideAlgorithm string `yaml:"override_algorithm"`
	Prefix            string `yaml:"prefix"`
	FeaturePrefix     string `yaml:"feature_prefix"`
}

// settings are the server's settings, defaults filled in.
type settings struct {
	shadow        bool   // every limit watches and never refuses
	onError       string // "error", "allow" or "deny": what a failed decision answers
	headers       string // "ietf", "legacy", "both", "envoy" or "none"
	fixedOverride bool   // a descriptor's own limit that replaces no counting limit is a fixed window
	prefix        string // the rate limits' key prefix
	featurePrefix string // the feature sets' key prefix
}

var defaultSettings = settings{onError: "error", headers: "ietf", prefix: "rl:", featurePrefix: "fx:"}

// config is a loaded configuration, not yet bound to a server.
type config struct {
	settings settings
	domains  map[string]*node
	sets     map[string][]features.Feature
	// setEntities are each set's entities (its features' Entity and Of),
	// sorted: an event must name one of them.
	setEntities map[string][]string
	setNames    []string // in file order
	digest      string   // what was read, to notice a change
}

// node is a level of a domain's descriptor tree: its children by "key" or
// "key_value", and the wildcard values among them.
type node struct {
	children map[string]*node
	wild     []wildcard
	rule     *rule // nil when this level has no rate_limit
}

type wildcard struct {
	key   string   // the child's "key_value*..." name
	parts []string // key split on '*'
}

// rule is a rate_limit of the configuration.
type rule struct {
	path      string // "domain.key_value.key", for logs and errors
	name      string // rate_limit.name, for replaces
	replaces  []string
	unlimited bool
	shadow    bool
	limit     int64 // requests per unit
	unit      rlspb.RateLimitResponse_RateLimit_Unit
	window    store.Window // a fixed window is one bucket of its unit; a GCRA's Length is its unit
	// gcra is a GCRA limit (limit.NewGCRA): limit per unit on average, in
	// bursts of up to burst.
	gcra  bool
	burst int64
}

// configError is a configuration that cannot be loaded: where, and why.
type configError struct{ where, why string }

func (e *configError) Error() string { return "windowstored: config " + e.where + ": " + e.why }

func badf(where, format string, a ...any) error {
	return &configError{where: where, why: fmt.Sprintf(format, a...)}
}

// units are the rate-limit units, as envoyproxy/ratelimit spells them in its
// files (in any case), and their lengths: a month is 30 days and a year 365
// days, as envoyproxy/ratelimit counts them.
var units = map[string]struct {
	unit   rlspb.RateLimitResponse_RateLimit_Unit
	length time.Duration
}{
	"second": {rlspb.RateLimitResponse_RateLimit_SECOND, time.Second},
	"minute": {rlspb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"hour":   {rlspb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"day":    {rlspb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"week":   {rlspb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"month":  {rlspb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"year":   {rlspb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// unitLength is the length of a unit of the API (a descriptor's limit
// override), 0 for UNKNOWN.
func unitLength(u rlspb.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, x := range units {
		if x.unit == u {
			return x.length
		}
	}
	return 0
}

// defaultBucket is a sliding window's bucket when the rule names none: a
// sixtieth of the window (a tenth for a second, a whole number of
// milliseconds), so a window counts every request younger than 59/60 of it.
func defaultBucket(length time.Duration) time.Duration {
	if length == time.Second {
		return 100 * time.Millisecond
	}
	return length / 60
}

// configFile is one file of a configuration, as read.
type configFile struct {
	name string
	data []byte
}

// readConfig reads the files of the configuration at path (a file, or a
// directory's *.yaml and *.yml files in name order) and their digest: the
// names and contents, to notice a change.
func readConfig(path string) ([]configFile, string, error) {
	files := []string{path}
	if fi, err := os.Stat(path); err != nil {
		return nil, "", fmt.Errorf("windowstored: config: %w", err)
	} else if fi.IsDir() {
		files = nil
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, "", fmt.Errorf("windowstored: config: %w", err)
		}
		for _, e := range ents {
			if n := e.Name(); !e.IsDir() && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				files = append(files, filepath.Join(path, n))
			}
		}
		if len(files) == 0 {
			return nil, "", badf(path, "no *.yaml or *.yml file in the directory")
		}
	}
	var digest bytes.Buffer
	out := make([]configFile, len(files))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, "", fmt.Errorf("windowstored: config: %w", err)
		}
		fmt.Fprintf(&digest, "%s\x00%d\x00", f, len(data))
		digest.Write(data)
		out[i] = configFile{f, data}
	}
	return out, digest.String(), nil
}

// loadConfig reads the configuration at path: a file, or a directory whose
// *.yaml and *.yml files are read in name order.
func loadConfig(path string) (*config, error) {
	files, digest, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	return parseConfig(path, files, digest)
}

// parseConfig parses the files of the configuration at path, read as digest
// (readConfig).
func parseConfig(path string, files []configFile, digest string) (*config, error) {
	c := &config{settings: defaultSettings, domains: map[string]*node{}, sets: map[string][]features.Feature{},
		setEntities: map[string][]string{}, digest: digest}
	seenSettings := ""
	for _, file := range files {
		f := file.name
		dec := yaml.NewDecoder(bytes.NewReader(file.data))
		dec.KnownFields(true)
		for n := 1; ; n++ {
			var d yamlDoc
			err := dec.Decode(&d)
			if errors.Is(err, io.EOF) {
				if n == 1 { // as envoyproxy/ratelimit, which refuses such a file
					return nil, badf(f, "the file holds no YAML document (only comments or nothing): remove it, or give it a domain, a feature_set or windowstored settings")
				}
				break
			}
			where := f
			if n > 1 {
				where = fmt.Sprintf("%s (document %d)", f, n)
			}
			if err != nil {
				return nil, badf(where, "%v", yamlReason(err))
			}
			kinds := 0
			for _, set := range []bool{d.Domain != "" || len(d.Descriptors) > 0, d.FeatureSet != "" || len(d.Features) > 0, d.Settings != nil} {
				if set {
					kinds++
				}
			}
			switch {
			case kinds == 0:
				return nil, badf(where, "empty document: want a domain, a feature_set or windowstored settings")
			case kinds > 1:
				return nil, badf(where, "a document is a domain, a feature_set or windowstored settings, one of them")
			case d.Settings != nil:
				if seenSettings != "" {
					return nil, badf(where, "windowstored settings are already given in %s", seenSettings)
				}
				seenSettings = where
				if err := c.settings.load(where, d.Settings); err != nil {
					return nil, err
				}
			case d.FeatureSet != "" || len(d.Features) > 0:
				if err := c.loadSet(f, where, d); err != nil {
					return nil, err
				}
			default:
				if err := c.loadDomain(f, where, d); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(c.domains) == 0 && len(c.sets) == 0 {
		return nil, badf(path, "no domain and no feature_set: nothing to serve")
	}
	return c, nil
}

func (s *settings) load(where string, y *yamlSettings) error {
	s.shadow = y.ShadowMode
	if y.OnError != "" {
		if !slices.Contains([]string{"error", "allow", "deny"}, y.OnError) {
			return badf(where, "on_error %q: want error, allow or deny", y.OnError)
		}
		s.onError = y.OnError
	}
	if y.ResponseHeaders != "" {
		if !slices.Contains([]string{"ietf", "legacy", "both", "envoy", "none"}, y.ResponseHeaders) {
			return badf(where, "response_headers %q: want ietf, legacy, both, envoy or none", y.ResponseHeaders)
		}
		s.headers = y.ResponseHeaders
	}
	switch y.OverrideAlgorithm {
	case "", "sliding":
	case "fixed":
		s.fixedOverride = true
	default:
		return badf(where, "override_algorithm %q: want sliding or fixed", y.OverrideAlgorithm)
	}
	if y.Prefix != "" {
		s.prefix = y.Prefix
	}
	if y.FeaturePrefix != "" {
		s.featurePrefix = y.FeaturePrefix
	}
	if s.prefix == s.featurePrefix {
		return badf(where, "prefix and feature_prefix are both %q: the rate limits and the feature sets need prefixes of their own", s.prefix)
	}
	return nil
}

func (c *config) loadDomain(file, where string, d yamlDoc) error {
	if d.Domain == "" {
		return badf(where, "a domain's descriptors need a domain name")
	}
	if _, dup := c.domains[d.Domain]; dup {
		return badf(where, "domain %q is configured twice", d.Domain)
	}
	root := &node{children: map[string]*node{}}
	if err := root.load(file, where, d.Domain, d.Descriptors); err != nil {
		return err
	}
	c.domains[d.Domain] = root
	return nil
}

// load adds descriptors below n, of a document of file; path is n's place,
// "domain.key_value".
func (n *node) load(file, where, path string, ds []yamlDescriptor) error {
	for _, d := range ds {
		if d.Key == "" {
			return badf(where, "%s: a descriptor has an empty key", path)
		}
		name := d.Key
		if d.Value != "" {
			name += "_" + d.Value
		}
		p := path + "." + name
		if _, dup := n.children[name]; dup {
			return badf(where, "%s: the descriptor is configured twice", p)
		}
		if d.QuotaMode {
			return badf(where, "%s: quota_mode is not supported by windowstored", p)
		}
		if d.ShareThreshold {
			return badf(where, "%s: share_threshold is not supported by windowstored", p)
		}
		c := &node{children: map[string]*node{}}
		if d.RateLimit != nil {
			r, err := loadRule(lineOf(file, d.RateLimit.line), p, d.RateLimit, d.ShadowMode)
			if err != nil {
				return err
			}
			c.rule = r
		}
		if err := c.load(file, where, p, d.Descriptors); err != nil {
			return err
		}
		n.children[name] = c
		if strings.Contains(name, "*") {
			n.wild = append(n.wild, wildcard{key: name, parts: strings.Split(name, "*")})
		}
	}
	return nil
}

func loadRule(where, path string, y *yamlRateLimit, shadow bool) (*rule, error) {
	r := &rule{path: path, name: y.Name, shadow: shadow, unlimited: y.Unlimited}
	for _, x := range y.Replaces {
		switch {
		case x.Name == "":
			return nil, badf(where, "%s: a replaces entry has no name", path)
		case x.Name == y.Name:
			return nil, badf(where, "%s: replaces its own name %q", path, x.Name)
		}
		r.replaces = append(r.replaces, x.Name)
	}
	if y.Unlimited {
		if y.Unit != "" || y.RequestsPerUnit != nil || y.Algorithm != "" || y.Bucket != "" || y.Burst != nil {
			return nil, badf(where, "%s: an unlimited rate_limit has no unit, requests_per_unit, algorithm, bucket or burst: unlimited: true says there is no limit, so a limit beside it is a contradiction; keep one or the other", path)
		}
		return r, nil
	}
	u, ok := units[strings.ToLower(y.Unit)]
	if !ok {
		return nil, badf(where, "%s: unit %q: want second, minute, hour, day, week, month or year", path, y.Unit)
	}
	if y.RequestsPerUnit == nil {
		return nil, badf(where, "%s: rate_limit has no requests_per_unit: say the limit (requests_per_unit: 0 refuses every request), or unlimited: true for none; a missing number is never taken as a limit", path)
	}
	if rpu := *y.RequestsPerUnit; rpu < 0 || rpu > 1<<32-1 {
		return nil, badf(where, "%s: requests_per_unit %d: want 0 to 4294967295", path, rpu)
	}
	r.limit, r.unit = *y.RequestsPerUnit, u.unit
	r.window = store.Window{Length: u.length}
	if y.Burst != nil && y.Algorithm != "gcra" {
		return nil, badf(where, "%s: burst is for algorithm gcra", path)
	}
	switch y.Algorithm {
	case "", "sliding":
		r.window.Bucket = defaultBucket(u.length)
		if y.Bucket != "" {
			b, err := time.ParseDuration(y.Bucket)
			if err != nil {
				return nil, badf(where, "%s: bucket %q: want a duration such as 1s or 5m", path, y.Bucket)
			}
			r.window.Bucket = b
		}
	case "fixed":
		if y.Bucket != "" {
			return nil, badf(where, "%s: a fixed window has no bucket: it is one bucket of its unit", path)
		}
		r.window.Bucket = u.length
	case "gcra":
		if y.Bucket != "" {
			return nil, badf(where, "%s: a gcra rate_limit has no bucket", path)
		}
		if r.limit < 1 {
			return nil, badf(where, "%s: a gcra rate_limit needs requests_per_unit of at least 1", path)
		}
		r.gcra, r.burst = true, r.limit
		if y.Burst != nil {
			r.burst = *y.Burst
		}
		// limit.NewGCRA's bounds: burst x the unit in ms within 2^52.
		if most := int64(1<<52) / u.length.Milliseconds(); r.burst < 1 || r.burst > most {
			return nil, badf(where, "%s: burst %d: want 1 to %d for a unit of a %s", path, r.burst, most, y.Unit)
		}
		return r, nil
	default:
		return nil, badf(where, "%s: algorithm %q: want sliding, fixed or gcra", path, y.Algorithm)
	}
	if err := r.window.Validate(); err != nil {
		return nil, badf(where, "%s: unit %s: %v", path, y.Unit, strings.TrimPrefix(err.Error(), "store: invalid argument: "))
	}
	return r, nil
}

var featureKinds = map[string]features.Kind{
	"count": features.Count, "sum": features.Sum, "distinct": features.Distinct, "limit": features.Limit,
	"max": features.Max, "min": features.Min, "avg": features.Avg, "first": features.First, "last": features.Last,
	"recent": features.Recent,
}

func (c *config) loadSet(file, where string, d yamlDoc) error {
	if d.FeatureSet == "" {
		return badf(where, "features need a feature_set name")
	}
	if strings.ContainsAny(d.FeatureSet, "/ ?#%") {
		return badf(where, "feature_set %q: a name has no '/', ' ', '?', '#' or '%%' (it is a URL path segment)", d.FeatureSet)
	}
	if _, dup := c.sets[d.FeatureSet]; dup {
		return badf(where, "feature_set %q is configured twice", d.FeatureSet)
	}
	if len(d.Features) == 0 {
		return badf(where, "feature_set %q has no features", d.FeatureSet)
	}
	var fs []features.Feature
	for i, y := range d.Features {
		where := lineOf(file, y.line)
		at := fmt.Sprintf("feature_set %s, feature %d (%s)", d.FeatureSet, i+1, y.Name)
		k, ok := featureKinds[y.Kind]
		if !ok {
			return badf(where, "%s: kind %q: want count, sum, distinct, limit, max, min, avg, first, last or recent", at, y.Kind)
		}
		f := features.Feature{Name: y.Name, Entity: y.Entity, Kind: k, Of: y.Of, Limits: y.Limits, SpendAmount: y.SpendAmount}
		for _, w := range y.Windows {
			l, b, ok := strings.Cut(w, "/")
			length, err1 := time.ParseDuration(l)
			bucket, err2 := time.ParseDuration(b)
			if !ok || err1 != nil || err2 != nil {
				return badf(where, "%s: window %q: want LENGTH/BUCKET, such as 1h/1m", at, w)
			}
			win := store.Window{Length: length, Bucket: bucket}
			if err := win.Validate(); err != nil {
				return badf(where, "%s: window %q: %s", at, w, strings.TrimPrefix(err.Error(), "store: invalid argument: "))
			}
			f.Windows = append(f.Windows, win)
		}
		// The library takes a negative limit for "none for this window"; a
		// file says "no limit" by leaving the window out, so that a typo
		// cannot switch a limit off.
		switch {
		case k != features.Limit && len(y.Limits) > 0:
			return badf(where, "%s: limits are for kind limit", at)
		case k != features.Limit && y.SpendAmount:
			return badf(where, "%s: spend_amount is for kind limit", at)
		case k == features.Limit && len(y.Limits) != len(y.Windows):
			return badf(where, "%s: %d limits for %d windows: want one limit per window", at, len(y.Limits), len(y.Windows))
		}
		for j, lim := range y.Limits {
			if lim < 1 {
				return badf(where, "%s: limit %d (of window %s) is %d: a limit is at least 1; a window without a limit is one the feature leaves out",
					at, j+1, y.Windows[j], lim)
			}
		}
		fs = append(fs, f)
	}
	c.sets[d.FeatureSet] = fs
	c.setNames = append(c.setNames, d.FeatureSet)
	var ents []string // the set's entities (Entity and Of), sorted
	for _, f := range fs {
		for _, e := range []string{f.Entity, f.Of} {
			if e != "" && !slices.Contains(ents, e) {
				ents = append(ents, e)
			}
		}
	}
	slices.Sort(ents)
	c.setEntities[d.FeatureSet] = ents
	return nil
}

// eachRule calls fn with every rule of the domains.
func (c *config) eachRule(fn func(*rule)) {
	var walk func(n *node)
	walk = func(n *node) {
		if n.rule != nil {
			fn(n.rule)
		}
		for _, c := range n.children {
			walk(c)
		}
	}
	for _, d := range c.domains {
		walk(d)
	}
}

// shapes returns every window the domains' rules use, each once.
func (c *config) shapes() []store.Window {
	seen := map[store.Window]bool{}
	var ws []store.Window
	c.eachRule(func(r *rule) {
		if !r.unlimited && !r.gcra && !seen[r.window] {
			seen[r.window] = true
			ws = append(ws, r.window)
		}
	})
	sort.Slice(ws, func(i, j int) bool {
		if ws[i].Length != ws[j].Length {
			return ws[i].Length < ws[j].Length
		}
		return ws[i].Bucket < ws[j].Bucket
	})
	return ws
}
