// Package workload holds the operations the measuring tools share
// (tools/bench, tools/cgprobe), so that a figure from one is of the
// same work as a figure from the other.
package workload

import (
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
)

// Record6 is the bench's record6 feature set: six features over two
// entities (a user and an IP), each over window one: per user a count, a
// limit (of 2^40, so that it admits), the distinct IPs; per IP a count, a
// sum of the amount, the distinct users.
func Record6(one store.Window) []features.Feature {
	w := []store.Window{one}
	return []features.Feature{
		{Name: "user_logins", Entity: "user", Kind: features.Count, Windows: w},
		{Name: "user_limit", Entity: "user", Kind: features.Limit, Windows: w, Limits: []int64{1 << 40}},
		{Name: "user_ips", Entity: "user", Kind: features.Distinct, Of: "ip", Windows: w},
		{Name: "ip_logins", Entity: "ip", Kind: features.Count, Windows: w},
		{Name: "ip_amount", Entity: "ip", Kind: features.Sum, Windows: w},
		{Name: "ip_users", Entity: "ip", Kind: features.Distinct, Of: "user", Windows: w},
	}
}
