package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/tests/figures"
	"github.com/windowstore/windowstore/tests/figures/render"
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
