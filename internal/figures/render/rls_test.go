package render

import (
	"strings"
	"testing"

	"github.com/windowstore/windowstore/internal/figures"
)

// TestRLS: the table beside envoyproxy/ratelimit takes envoyproxy/ratelimit's
// row from the first setting's invocation and each setting's ratio from its
// own; a setting not measured has no row, and none measured says how to
// measure it.
func TestRLS(t *testing.T) {
	if got := rls(figures.File{}); !strings.Contains(got, "RECORD=sliding60") {
		t.Fatalf("no figures: %q", got)
	}
	f := figures.File{"rls/sliding60/how": {How: "how"}}
	put := func(p string, dec, cpu float64) {
		for k, v := range map[string]float64{"decisions": dec, "decisions_min": dec - 1, "decisions_max": dec + 1,
			"cpu_us": cpu, "cpu_us_min": cpu - 0.5, "cpu_us_max": cpu + 0.5} {
			f[p+k] = figures.Figure{Value: v}
		}
	}
	put("rls/sliding60/envoy/", 1000, 10)
	put("rls/sliding60/windowstored/", 1500, 12)
	f["rls/sliding60/cpu_vs_envoy"] = figures.Figure{Value: 1.2}
	put("rls/bucket6s/envoy/", 2000, 20) // another invocation's: not a row of its own
	got := rls(f)
	want := "how\n\n| service | decisions/s | Redis CPU per decision | CPU vs envoyproxy/ratelimit |\n|---|---:|---:|---:|\n" +
		"| envoyproxy/ratelimit (fixed windows) | 1,000 (999-1,001) | 10.0 µs (9.5-10.5) | 1.00x |\n" +
		"| windowstored (sliding windows of 60 buckets, all or nothing) | 1,500 (1,499-1,501) | 12.0 µs (11.5-12.5) | 1.20x |\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
