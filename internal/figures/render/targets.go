package render

import (
	"fmt"
	"slices"
	"strings"

	"github.com/windowstore/windowstore/internal/figures"
)

// A Target is one of the design's server-time targets: Op's server time per
// operation at most Max times Base's, both measured at 10 buckets in one
// invocation of the bench. The bench measures its ratio in back-to-back
// pairs of short runs of the two (seconds apart), and the table's rows give
// it round by round (a round's two runs can be a minute apart, where the
// medians of the whole invocation can be ten minutes apart on a machine
// whose speed drifts): each as the median of the ratios, with their range.
type Target struct {
	Op, Base string
	Max      float64
	What     string // what Op is, for the docs
}

// Targets are the bench's targets, in the docs' order. The last one, add at
// 1,440 buckets against add at 10, is the second invocation's (see
// AddGrowthMax).
var Targets = []Target{
	{Op: "allow3", Base: "allow", Max: 1.5, What: "`store.AllowAll` of 3 policies on one key (three stores)"},
	{Op: "windows3", Base: "allow", Max: 1.5, What: "the same 3 windows as one `limit.NewWindows`"},
	{Op: "attack", Base: "allow", Max: 0.2, What: "a limiter's key under attack, 9 calls in 10 refused (its refusal cache)"},
	{Op: "sum100", Base: "sum", Max: 15, What: "`Store.SumMany` of 100 keys against one `Store.Sum`"},
	{Op: "record6", Base: "add", Max: 3, What: "`features.Set.Record` of 6 features over 2 entities"},
	{Op: "distinct", Base: "add", Max: 2, What: "`Store.RecordStat` of `StatDistinct`, add and count"},
	{Op: "add", Base: "naive", Max: 0.5, What: "`Store.Add` against the naive script"},
	{Op: "allow", Base: "zsetlog", Max: 0.5, What: "`Store.Allow` against the ZSET log"},
}

// AddGrowthMax is the target of add at 1,440 buckets against add at 10,
// over the same keys in one invocation.
const AddGrowthMax = 1.2

// RoundRatios returns the ratios op[i] / base[i] of the rounds both have
// (a round without a figure, 0 or less, is left out): their median, least
// and greatest, and how many rounds there were (0: none).
func RoundRatios(op, base []float64) (med, lo, hi float64, n int) {
	var r []float64
	for i := range min(len(op), len(base)) {
		if op[i] > 0 && base[i] > 0 {
			r = append(r, op[i]/base[i])
		}
	}
	med, lo, hi = Median(r)
	return med, lo, hi, len(r)
}

// runs returns the per-round server times recorded for op at nb buckets
// (bench/NB/OP/server_us_run1 ...).
func runs(f figures.File, nb int, op string) []float64 {
	var v []float64
	for i := 1; ; i++ {
		x, ok := f[fmt.Sprintf("bench/%d/%s/server_us_run%d", nb, op, i)]
		if !ok {
			return v
		}
		v = append(v, x.Value)
	}
}

// targets is the targets' table under the bench's.
func targets(f figures.File) string {
	var b strings.Builder
	b.WriteString("\n| target | ratio in back-to-back pairs at one pace, median (range) | ratio round by round, median (range) | at most | met |\n" +
		"|---|---|---|---|---|\n")
	met := func(med, lo, hi, max float64, of string) string {
		switch {
		case hi <= max:
			return "yes, every " + of
		case med <= max:
			return "the median only"
		case lo <= max:
			return "no (some " + of + "s)"
		}
		return "no"
	}
	for _, t := range Targets {
		rounds, pairs, verdict := "n/m", "n/m", "n/m"
		if med, lo, hi, n := RoundRatios(runs(f, 10, t.Op), runs(f, 10, t.Base)); n > 0 {
			rounds = fmt.Sprintf("%.2fx (%.2f-%.2f)", med, lo, hi)
		}
		p := fmt.Sprintf("bench/10/target/%s/%s/", t.Op, t.Base)
		if r, ok := f[p+"ratio"]; ok {
			lo, hi := f[p+"ratio_min"].Value, f[p+"ratio_max"].Value
			pairs = fmt.Sprintf("%.2fx (%.2f-%.2f)", r.Value, lo, hi)
			if ko, kb := f[p+"op_keys"], f[p+"base_keys"]; ko.Value > 0 && kb.Value > 0 {
				pairs += fmt.Sprintf(", over %s and %s keys", thousands(ko.Value), thousands(kb.Value))
			}
			verdict = met(r.Value, lo, hi, t.Max, "pair")
		}
		fmt.Fprintf(&b, "| `%s` / `%s`: %s | %s | %s | %.1fx | %s |\n", t.Op, t.Base, t.What, pairs, rounds, t.Max, verdict)
	}
	p := "bench/1440/add/"
	if v, ok := f[p+"cpu_vs_add_base"]; ok {
		// The ratio of the medians, with the rounds' range when recorded.
		lo, okl := f[p+"cpu_vs_add_base_min"]
		hi, okh := f[p+"cpu_vs_add_base_max"]
		what := fmt.Sprintf("| `add` at 1,440 buckets / `add` at %s, over the same 1,000 keys | n/m", thousands(f[p+"base_buckets"].Value))
		if okl && okh {
			fmt.Fprintf(&b, "%s | %.2fx (%.2f-%.2f) | %.1fx | %s |\n", what, v.Value, lo.Value, hi.Value, AddGrowthMax,
				met(v.Value, lo.Value, hi.Value, AddGrowthMax, "round"))
		} else {
			fmt.Fprintf(&b, "%s | %.2fx | %.1fx | %s |\n", what, v.Value, AddGrowthMax,
				met(v.Value, v.Value, v.Value, AddGrowthMax, "round"))
		}
	}
	b.WriteString("\nIn pairs: after the table's rounds, the bench runs each target's two operations back to back, half a run " +
		"each after a warm-up of a quarter of a run (not measured), in as many pairs as the line above the table says, the order alternating (base " +
		"first, then the operation first), so that the two runs of a pair are seconds apart. At one pace: the slower " +
		"operation of a pair runs over fewer keys (the operation's keys, then the base's), in proportion to the two " +
		"throughputs in the table, so that both see as many operations per key and second, as two operations on one " +
		"stream of events do; over the same keys, the slower one would start a bucket (a move) on more of its " +
		"operations, and its ratio would grow as the machine slows. Round by round (both over every key): the ratio of the two operations' runs within each round of " +
		"the table (which can be a minute apart). The last row, from the second invocation (another window length, so " +
		"not in pairs), is the ratio of the two medians, with the rounds' range.\n")
	return b.String()
}

// Median returns the median of v (the mean of the middle two for an even
// count) and its range; zeros for none. v is not changed.
func Median(v []float64) (med, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Sorted(slices.Values(v))
	med = s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return med, s[0], s[len(s)-1]
}
