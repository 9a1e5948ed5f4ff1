package tests

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// publicPackages are the root module's packages a user imports.
var publicPackages = []string{"store", "limit", "httplimit", "features", "tairhash", "nativehash", "fieldcodec"}

// surface lists the exported package-level names of the public packages
// ("store.Store") and the exported methods of each exported type.
func surface(t *testing.T) (names []string, methods map[string][]string) {
	t.Helper()
	methods = map[string][]string{}
	for _, pkg := range publicPackages {
		paths, err := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		require.NoError(t, err, pkg)
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			require.NoError(t, err, path)
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv == nil {
						names = append(names, pkg+"."+d.Name.Name)
						continue
					}
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
						methods[pkg+"."+id.Name] = append(methods[pkg+"."+id.Name], d.Name.Name)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								names = append(names, pkg+"."+s.Name.Name)
							}
						case *ast.ValueSpec:
							for _, id := range s.Names {
								if id.IsExported() {
									names = append(names, pkg+"."+id.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names, methods
}

// TestSurface: the public packages export at most 150 names, no type has
// more than 15 exported methods, and one option sets a clock,
// store.WithClientClock (docs/counters.md, "Clocks"): an instant of the
// caller's own is given with At or AllowAt, never with another clock.
// Every limiter constructor returns a limit.Limiter: the one exported type
// that is a Limiter is limit.Degraded, which adds Health and State.
func TestSurface(t *testing.T) {
	names, methods := surface(t)
	require.LessOrEqual(t, len(names), 150, "exported names: %v", names)
	var limiters []string
	for typ, ms := range methods {
		require.LessOrEqual(t, len(ms), 15, "%s has %d exported methods", typ, len(ms))
		if strings.HasPrefix(typ, "limit.") && slices.Contains(ms, "Allow") && slices.Contains(ms, "AllowAt") && slices.Contains(ms, "Policy") {
			limiters = append(limiters, typ)
		}
	}
	require.Equal(t, []string{"limit.Degraded"}, limiters, "exported types that are a limit.Limiter")
	var clocks []string
	for _, n := range names {
		if _, name, _ := strings.Cut(n, "."); strings.HasPrefix(name, "With") && strings.Contains(name, "Clock") {
			clocks = append(clocks, n)
		}
	}
	require.Equal(t, []string{"store.WithClientClock"}, clocks, "one clock option, the store's")
}

// qualified matches a public package's exported name in prose or code:
// "store.Window", "httplimit.Rule" (a field or method after it is left out).
var qualified = regexp.MustCompile(`(?:^|[^\w/.])(store|limit|httplimit|features|fieldcodec|tairhash|nativehash)\.([A-Z]\w*)`)

// TestDocsNameTheSurface: every exported name of a public package that the
// README or a doc names (docs/upgrading.md's old names aside) exists, so a
// snippet a reader copies never names a type that was renamed.
func TestDocsNameTheSurface(t *testing.T) {
	names, _ := surface(t)
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	require.NoError(t, err)
	for _, path := range append(docs, filepath.Join("..", "README.md")) {
		if filepath.Base(path) == "upgrading.md" {
			continue
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range qualified.FindAllStringSubmatch(line, -1) {
				name := m[1] + "." + m[2]
				assert.True(t, have[name], "%s:%d names %s, which the package does not export", path, i+1, name)
			}
		}
	}
}

// TestHookOnlyFromStore: of the root module's production packages, store
// alone imports internal/hook (to register the test hooks it serves); no
// other package reaches another through it.
func TestHookOnlyFromStore(t *testing.T) {
	var importers []string
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			// Other modules (a go.mod of their own), and internal/'s own
			// machinery and test doubles, are not the root module's
			// production packages.
			if rel != "." && (strings.HasPrefix(rel, "internal") || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			if im.Path.Value == `"github.com/windowstore/windowstore/internal/hook"` && !slices.Contains(importers, filepath.Dir(rel)) {
				importers = append(importers, filepath.Dir(rel))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"store"}, importers, "production packages that import internal/hook")
}

// TestToolsApartFromTests: the measuring tools' module requires neither this
// module nor testcontainers, so that building a tool pulls in no test
// machinery; what both share (the recorded figures) is internal/figures.
func TestToolsApartFromTests(t *testing.T) {
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join("..", "tools", name))
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			for _, bad := range []string{"github.com/windowstore/windowstore/tests", "testcontainers"} {
				if strings.Contains(line, bad) {
					t.Errorf("tools/%s:%d names %s: %s", name, i+1, bad, line)
				}
			}
		}
	}
}
