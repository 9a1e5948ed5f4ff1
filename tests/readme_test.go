package tests

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/internal/figures"
	"github.com/windowstore/windowstore/internal/figures/render"
	"github.com/windowstore/windowstore/tests/harness"
)

// TestREADMEFigures: the figure tables of README.md and docs/*.md are
// exactly what tests/figures.json renders (go run ./tools/figures), so
// no figure is copied by hand.
func TestREADMEFigures(t *testing.T) {
	f, err := figures.Load(figures.Path())
	require.NoError(t, err)
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	for _, doc := range append([]string{filepath.Join("..", "README.md")}, docs...) {
		readme, err := os.ReadFile(doc)
		require.NoError(t, err)
		out, err := render.README(string(readme), f)
		require.NoError(t, err, doc)
		require.Equal(t, string(readme), out, "%s's figure tables differ from tests/figures.json: run go run ./tools/figures", doc)
	}
}

// TestREADMESize: README.md is a front door of at most 15,000 bytes; the
// manual is in docs/.
func TestREADMESize(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	require.LessOrEqual(t, len(readme), 15000, "README.md is at most 15,000 bytes: move detail to docs/")
}

// snippetDocs are the Markdown files whose Go snippets must compile, and
// the names their snippets share, as the docs say (the README's "The
// snippets share ctx and the client of the first") or their prose names:
// windows, stores, limiters and instants made before.
var snippetDocs = []struct{ doc, names string }{
	{"README.md", "ctx context.Context, client rueidis.Client, st *store.Store, mux *http.ServeMux, paidAt time.Time"},
	{"docs/counters.md", "ctx context.Context, client rueidis.Client, st, devices *store.Store, paidAt, loggedInAt time.Time, minute, hour, day store.Window"},
	{"docs/production.md", "ctx context.Context, client rueidis.Client, st *store.Store"},
	{"docs/ratelimiting.md", "ctx context.Context, client rueidis.Client, st, minute, hour, perMinute *store.Store, mux *http.ServeMux, " +
		"perIP, perUser limit.Limiter, inflight *limit.Concurrency, rec *prom.Recorder"},
}

// goBlock matches a Go snippet of a Markdown file.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestREADMESnippetsCompile: every Go snippet of README.md, and every one of
// the manual's that is statements (not a fragment of a list), compiles
// against the packages as they are, as a reader who copies it gets it. Each
// snippet becomes a function of the names its file's snippets share
// (snippetDocs), its own import block dropped and its variables marked
// used, and the whole is built with the go command.
func TestREADMESnippetsCompile(t *testing.T) {
	var blocks [][]string // doc, snippet, names
	for _, d := range snippetDocs {
		b, err := os.ReadFile(filepath.Join("..", d.doc))
		require.NoError(t, err)
		for _, m := range goBlock.FindAllStringSubmatch(string(b), -1) {
			blocks = append(blocks, []string{d.doc, m[1], d.names})
		}
	}
	require.NotEmpty(t, blocks)
	imports := regexp.MustCompile(`(?s)^import \(.*?\)\n`)
	var src strings.Builder
	src.WriteString(`package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/metrics/prom"
	"github.com/windowstore/windowstore/store"
)

var (
	_ = fmt.Sprint
	_ = prom.New
	_ = features.New
	_ = httplimit.New
	_ = limit.NewGCRA
	_ = store.New
)

func main() {}
`)
	for i, b := range blocks {
		body := imports.ReplaceAllString(b[1], "")
		f, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc f() {\n"+body+"\n}", 0)
		if err != nil && b[0] != "README.md" {
			t.Logf("%s: a fragment, not statements, left out:\n%s", b[0], body)
			continue
		}
		require.NoError(t, err, "a Go snippet of %s does not parse:\n%s", b[0], body)
		seen := map[string]bool{}
		var used []string
		ast.Inspect(f, func(n ast.Node) bool {
			var ids []*ast.Ident
			switch n := n.(type) {
			case *ast.AssignStmt:
				if n.Tok == token.DEFINE {
					for _, e := range n.Lhs {
						if id, ok := e.(*ast.Ident); ok {
							ids = append(ids, id)
						}
					}
				}
			case *ast.ValueSpec:
				ids = n.Names
			}
			for _, id := range ids {
				if id.Name != "_" && !seen[id.Name] {
					seen[id.Name] = true
					used = append(used, "_ = "+id.Name)
				}
			}
			return true
		})
		fmt.Fprintf(&src, "\n// a Go snippet of %s\nfunc snippet%d(%s) {\n{\n%s\n%s\n}\n}\n",
			b[0], i+1, b[2], body, strings.Join(used, "\n"))
	}
	dir, err := os.MkdirTemp(".", "_readmesnippets")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o644))
	out, err := exec.Command("go", "build", "-gcflags=-e", "-o", os.DevNull, "./"+filepath.Base(dir)).CombinedOutput()
	if err != nil {
		lines := strings.Split(src.String(), "\n")
		for i := range lines {
			lines[i] = fmt.Sprintf("%4d %s", i+1, lines[i])
		}
		t.Fatalf("Go snippets do not compile:\n%s\nthe program built (main.go):\n%s", out, strings.Join(lines, "\n"))
	}
}

// TestTestingDocNamesTests: every test and fuzz target that docs/testing.md
// names exists in some test file of the repository, so its map from claims
// to tests never points at a renamed or deleted test.
func TestTestingDocNamesTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "testing.md"))
	require.NoError(t, err)
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	require.NoError(t, err)
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Z][A-Za-z0-9_]*)`").FindAllStringSubmatch(string(doc), -1)
	require.NotEmpty(t, named)
	for _, m := range named {
		require.True(t, defined[m[1]], "docs/testing.md names %s, which no test file defines", m[1])
	}
}

// TestTestingDocNamesFiles: docs/testing.md's table of the suite's files
// names every test file of tests/, and only those, so a reader finds a
// capability's file from the page.
func TestTestingDocNamesFiles(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "testing.md"))
	require.NoError(t, err)
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		assert.True(t, strings.Contains(string(doc), "`"+f+"`"), "docs/testing.md does not name tests/%s", f)
	}
	for _, m := range regexp.MustCompile("`([a-z0-9_]+_test\\.go)`").FindAllStringSubmatch(string(doc), -1) {
		assert.True(t, slices.Contains(files, m[1]), "docs/testing.md names %s, which tests/ does not have", m[1])
	}
}

// TestExamplesPrintWhatTheySay runs the examples that need a server, whose
// output is written as "// Prints:" so that go test only compiles them, on a
// real server of their own: with an overlay that makes their "Prints:" an
// "Output:" and their address the server's, go test checks every line they
// say they print.
func TestExamplesPrintWhatTheySay(t *testing.T) {
	srv := harness.Fresh(t, harness.Redis70) // the examples' keys are fixed: a server of their own
	files, err := filepath.Glob(filepath.Join("..", "*", "example_test.go"))
	require.NoError(t, err)
	replace := map[string]string{}
	var pkgs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if !strings.Contains(string(b), "\t// Prints:\n") {
			continue
		}
		src := strings.ReplaceAll(string(b), "\t// Prints:\n", "\t// Output:\n")
		src = strings.ReplaceAll(src, `"127.0.0.1:6379"`, strconv.Quote(srv.Addr))
		tmp := filepath.Join(t.TempDir(), filepath.Base(f))
		require.NoError(t, os.WriteFile(tmp, []byte(src), 0o644))
		abs, err := filepath.Abs(f)
		require.NoError(t, err)
		replace[abs] = tmp
		pkgs = append(pkgs, "./"+filepath.Base(filepath.Dir(f)))
	}
	require.NotEmpty(t, pkgs, "no example says what it prints")
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	require.NoError(t, err)
	ov := filepath.Join(t.TempDir(), "overlay.json")
	require.NoError(t, os.WriteFile(ov, overlay, 0o644))
	cmd := exec.Command("go", append([]string{"test", "-count=1", "-p", "1", "-overlay", ov, "-run", "^Example"}, pkgs...)...)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the examples of %v on %s:\n%s", pkgs, srv.Addr, out)
	t.Logf("%v: examples print what they say, on %s", pkgs, srv)
}
