package harness

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Area is a part of the suite that needs something of the machine: a kind of
// server, a cluster, replication, TLS, fault injection. Every skip in the
// suite names its area (Skip), and TestMain prints which areas ran and which
// were skipped, and why (Report).
type Area string

// The areas. A Kind is an area too (Area(k)).
const (
	AreaRedis70          = Area(Redis70)
	AreaRedis80          = Area(Redis80)
	AreaValkey           = Area(Valkey)
	AreaValkey9          = Area(Valkey9)
	AreaTairHash         = Area(TairHash)
	AreaCluster     Area = "cluster"     // a 3-master, 3-replica Redis Cluster
	AreaReplication Area = "replication" // a master and its replica
	AreaTLS         Area = "tls"         // a TLS-only server with client certificates
	AreaFaults      Area = "faults"      // servers killed, restarted, stalled, filled
)

// Areas lists every area, in the order Report prints them.
var Areas = []Area{AreaRedis70, AreaRedis80, AreaValkey, AreaValkey9, AreaTairHash, AreaCluster, AreaReplication, AreaTLS, AreaFaults}

type areaStats struct {
	ran, failed int
	skipped     map[string]int // reason -> tests
}

var (
	areaMu sync.Mutex
	stats  = map[Area]*areaStats{}
)

func statsOf(a Area) *areaStats {
	s := stats[a]
	if s == nil {
		s = &areaStats{skipped: map[string]int{}}
		stats[a] = s
	}
	return s
}

// Required tells whether WINDOWSTORE_REQUIRE (a comma-separated list of
// areas, or "all") names area a: a test that cannot have it then fails
// instead of skipping. scripts/test.sh sets it to every area it can provide.
func Required(a Area) bool {
	for _, r := range strings.Split(os.Getenv("WINDOWSTORE_REQUIRE"), ",") {
		if r = strings.TrimSpace(r); r == string(a) || r == "all" {
			return true
		}
	}
	return false
}

// Skip is the suite's one way to skip a test: the test cannot have area a,
// for the reason why. When WINDOWSTORE_REQUIRE names a, the test fails
// instead. Either way the reason goes into the report.
func Skip(t testing.TB, a Area, why string) {
	t.Helper()
	areaMu.Lock()
	statsOf(a).skipped[why]++
	areaMu.Unlock()
	if Required(a) {
		t.Fatalf("%s is required (WINDOWSTORE_REQUIRE=%s) but cannot run: %s", a, os.Getenv("WINDOWSTORE_REQUIRE"), why)
	}
	t.Skipf("*** SKIPPED: no %s: %s ***", a, why)
}

// Use records that the test runs in the given areas: the report counts it as
// run (or failed) when the test ends, unless it was skipped. Shared, Fresh,
// Replica, FreshTLS and NewCluster call it; tests call it for the areas they
// exercise without a server of their own (AreaFaults).
func Use(t testing.TB, areas ...Area) {
	t.Cleanup(func() {
		if t.Skipped() {
			return
		}
		areaMu.Lock()
		defer areaMu.Unlock()
		seen := map[Area]bool{}
		for _, a := range areas {
			if seen[a] {
				continue
			}
			seen[a] = true
			statsOf(a).ran++
			if t.Failed() {
				statsOf(a).failed++
			}
		}
	})
}

// Report writes which areas ran (in how many tests, how many failed) and
// which were skipped, with the reasons. It returns the areas that
// WINDOWSTORE_REQUIRE names but no test ran: with the whole suite run
// (filtered is false), each of them is a failure of the run.
func Report(w io.Writer, filtered bool) (missing []Area) {
	areaMu.Lock()
	defer areaMu.Unlock()
	fmt.Fprintln(w, "== areas of the integration suite")
	for _, a := range Areas {
		s := statsOf(a)
		var reasons []string
		for why, n := range s.skipped {
			reasons = append(reasons, fmt.Sprintf("%s (%d tests)", why, n))
		}
		sort.Strings(reasons)
		skips := 0
		for _, n := range s.skipped {
			skips += n
		}
		switch {
		case s.ran > 0 && s.failed > 0:
			fmt.Fprintf(w, "  %-12s ran in %d tests, FAILED in %d\n", a, s.ran, s.failed)
		case s.ran > 0:
			fmt.Fprintf(w, "  %-12s ran in %d tests\n", a, s.ran)
		case skips > 0:
			fmt.Fprintf(w, "  %-12s SKIPPED in %d tests: %s\n", a, skips, strings.Join(reasons, "; "))
		default:
			fmt.Fprintf(w, "  %-12s not run (no test asked for it)\n", a)
		}
		if s.ran > 0 && skips > 0 {
			fmt.Fprintf(w, "  %-12s and SKIPPED in %d tests: %s\n", "", skips, strings.Join(reasons, "; "))
		}
		if s.ran == 0 && Required(a) && !filtered {
			missing = append(missing, a)
		}
	}
	return missing
}
