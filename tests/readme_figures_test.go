package tests

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/windowstore/windowstore/tests/figures"
	"github.com/windowstore/windowstore/tests/figures/render"
)

// TestREADMEFigures: README.md's figure tables are exactly what
// tests/figures.json renders (go run ./tests/cmd/figures), so no figure is
// copied by hand.
func TestREADMEFigures(t *testing.T) {
	f, err := figures.Load(figures.Path())
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	out, err := render.README(string(readme), f)
	require.NoError(t, err)
	require.Equal(t, string(readme), out, "README.md's figure tables differ from tests/figures.json: run go run ./tests/cmd/figures")
}
