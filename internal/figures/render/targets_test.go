package render

import (
	"fmt"
	"strings"
	"testing"

	"github.com/windowstore/windowstore/internal/figures"
)

func TestRoundRatios(t *testing.T) {
	for _, c := range []struct {
		name        string
		op, base    []float64
		med, lo, hi float64
		n           int
	}{
		{"none", nil, nil, 0, 0, 0, 0},
		{"odd", []float64{10, 30, 12}, []float64{5, 10, 4}, 3, 2, 3, 3},
		// Per round, not of the medians: the medians' ratio would be 12/5.
		{"drift", []float64{10, 20, 40}, []float64{5, 10, 20}, 2, 2, 2, 3},
		{"even", []float64{2, 6}, []float64{1, 2}, 2.5, 2, 3, 2},
		{"a round without a figure", []float64{-1, 6, 8}, []float64{1, 2, 0}, 3, 3, 3, 1},
		{"fewer base rounds", []float64{4, 6, 8}, []float64{2, 2}, 2.5, 2, 3, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			med, lo, hi, n := RoundRatios(c.op, c.base)
			if med != c.med || lo != c.lo || hi != c.hi || n != c.n {
				t.Fatalf("RoundRatios(%v, %v) = %v, %v, %v, %d; want %v, %v, %v, %d", c.op, c.base, med, lo, hi, n, c.med, c.lo, c.hi, c.n)
			}
		})
	}
}

func TestTargetsTable(t *testing.T) {
	f := figures.File{}
	set := func(op string, v ...float64) {
		for i, x := range v {
			f[figureName(op, i+1)] = figures.Figure{Value: x}
		}
	}
	set("allow", 10, 10, 10)
	set("windows3", 14, 16, 13) // 1.3, 1.6, 1.4: met by the median only
	set("add", 5, 5, 5)
	set("record6", 50, 50, 50)
	f["bench/10/target/windows3/allow/ratio"] = figures.Figure{Value: 1.45}
	f["bench/10/target/windows3/allow/ratio_min"] = figures.Figure{Value: 1.4}
	f["bench/10/target/windows3/allow/ratio_max"] = figures.Figure{Value: 1.48}
	f["bench/10/target/windows3/allow/op_keys"] = figures.Figure{Value: 6200}
	f["bench/10/target/windows3/allow/base_keys"] = figures.Figure{Value: 10000}
	f["bench/1440/add/cpu_vs_add_base"] = figures.Figure{Value: 1.1}
	f["bench/1440/add/cpu_vs_add_base_min"] = figures.Figure{Value: 1.0}
	f["bench/1440/add/cpu_vs_add_base_max"] = figures.Figure{Value: 1.15}
	f["bench/1440/add/base_buckets"] = figures.Figure{Value: 10}
	out := targets(f)
	for _, want := range []string{
		"| `windows3` / `allow`: the same 3 windows as one `limit.NewWindows` | 1.45x (1.40-1.48), over 6,200 and 10,000 keys | 1.40x (1.30-1.60) | 1.5x | yes, every pair |",
		"| `record6` / `add`: `features.Set.Record` of 6 features over 2 entities | n/m | 10.00x (10.00-10.00) | 3.0x | n/m |",
		"| `allow3` / `allow`: `store.AllowAll` of 3 policies on one key (three stores) | n/m | n/m | 1.5x | n/m |",
		"| `add` at 1,440 buckets / `add` at 10, over the same 1,000 keys | n/m | 1.10x (1.00-1.15) | 1.2x | yes, every round |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the targets' table lacks %q:\n%s", want, out)
		}
	}
}

func figureName(op string, run int) string {
	return fmt.Sprintf("bench/10/%s/server_us_run%d", op, run)
}
