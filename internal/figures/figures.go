// Package figures keeps the measured figures the docs quote in one place,
// tests/figures.json, so that the docs (README.md and docs/*.md) and the
// measurements agree mechanically:
//
//   - a test that measures a figure calls Check, which compares it with the
//     committed value and fails when it has drifted beyond the tolerance;
//   - with WINDOWSTORE_FIGURES=update, Check records instead, and TestMain
//     writes the file anew (Save);
//   - the docs' figure tables are rendered from the file by
//     `go run ./tools/figures` (between <!-- figures:NAME --> markers),
//     and TestREADMEFigures fails when they differ from what it would render.
//
// Figures that timing decides (the benchmark's) are recorded by
// scripts/bench.sh from the bench's --json lines (tools/bench), never checked by a test.
package figures

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Figure is one measured value.
type Figure struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
	// How says how it was measured, for the docs' readers.
	How string `json:"how,omitempty"`
	// Server is the server that measured it, as INFO server names it
	// ("Redis 7.0.15", "Valkey 8.1.1": harness's Server.Version): the
	// docs' tables name the server from here, never by hand.
	Server string `json:"server,omitempty"`
}

// File is the file's content: figures by name ("memory/redis70/plain/60").
type File map[string]Figure

var (
	mu       sync.Mutex
	measured = File{}
)

// Path is tests/figures.json.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "tests", "figures.json")
}

// Load reads a figures file.
func Load(path string) (File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := File{}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Updating reports whether this run records figures instead of checking them.
func Updating() bool { return os.Getenv("WINDOWSTORE_FIGURES") == "update" }

// Check compares a measured figure with the committed one: it fails the test
// when they differ by more than tol (a fraction: 0.05 is 5%; 0 means equal),
// or when the committed figure names another server than the one that
// measured it now (f.Server, which must be set), and tells how to record the
// new value. With WINDOWSTORE_FIGURES=update it records the value, with its
// server, instead.
func Check(t testing.TB, name string, f Figure, tol float64) {
	t.Helper()
	if f.Server == "" {
		t.Fatalf("figure %s names no server: set Figure.Server to the measuring server's Version", name)
	}
	mu.Lock()
	measured[name] = f
	mu.Unlock()
	t.Logf("FIGURE %s = %g %s (%s)", name, f.Value, f.Unit, f.Server)
	if Updating() {
		return
	}
	committed, err := Load(Path())
	if err != nil {
		t.Fatalf("figures: %v", err)
	}
	c, ok := committed[name]
	if !ok {
		t.Fatalf("figure %s (%g %s) is not in tests/figures.json: record it with WINDOWSTORE_FIGURES=update ./scripts/test.sh -run %s, "+
			"then go run ./tools/figures", name, f.Value, f.Unit, t.Name())
	}
	if c.Server != f.Server {
		t.Errorf("figure %s was recorded on %q, and this run measured it on %q: the docs would name a server that did not "+
			"measure it: record it with WINDOWSTORE_FIGURES=update ./scripts/test.sh -run %s, then go run ./tools/figures",
			name, c.Server, f.Server, t.Name())
	}
	if !Close(c.Value, f.Value, tol) {
		t.Errorf("figure %s drifted: measured %g %s, the docs say %g (tolerance %.0f%%): if the change is meant, record it with "+
			"WINDOWSTORE_FIGURES=update ./scripts/test.sh -run %s, then go run ./tools/figures", name, f.Value, f.Unit, c.Value, tol*100, t.Name())
	}
}

// Close reports whether a and b differ by at most tol of a.
func Close(a, b, tol float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= tol*math.Abs(a)
}

// Save merges the figures this run recorded into tests/figures.json, when
// updating. TestMain calls it.
func Save() error {
	if !Updating() {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	if len(measured) == 0 {
		return nil
	}
	f, err := Load(Path())
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if f == nil {
		f = File{}
	}
	for k, v := range measured {
		f[k] = v
	}
	return f.Write(Path())
}

// Write writes the file with its names sorted, one figure per line.
func (f File) Write(path string) error {
	names := make([]string, 0, len(f))
	for k := range f {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("{\n")
	for i, k := range names {
		v, _ := json.Marshal(f[k])
		fmt.Fprintf(&b, "  %q: %s", k, v)
		if i < len(names)-1 {
			b.WriteString(",")
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Names returns the names under a prefix, sorted.
func (f File) Names(prefix string) []string {
	var out []string
	for k := range f {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
