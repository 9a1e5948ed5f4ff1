// Command risk records login and payment events through a feature set of
// nine features over four entities (user, IP, card, device), the way a
// risk-control engine would, and prints each decision with the features it
// read, in one round trip per event:
//
//	go run ./examples/risk --addr redis://127.0.0.1:6379
//
// The events carry their own times (a simulated morning), ids (one is
// delivered twice, as a queue redelivers) and, for one, a late arrival.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/store"
)

func main() {
	addr := flag.String("addr", "redis://127.0.0.1:6379", "Redis URL")
	flag.Parse()
	opt, err := rueidis.ParseURL(*addr)
	if err != nil {
		log.Fatalf("risk: --addr: %v", err)
	}
	// rueidis turns client-side caching on by default (CLIENT TRACKING on
	// each connection); windowstore reads through scripts and never uses it,
	// and some proxies and ACLs refuse that command.
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		log.Fatalf("risk: connect: %v", err)
	}
	defer client.Close()
	if err := run(context.Background(), client, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "risk:", err)
		os.Exit(1)
	}
}

var (
	minute = store.Window{Length: time.Minute, Bucket: time.Second}
	hour   = store.Window{Length: time.Hour, Bucket: time.Minute}
	day    = store.Window{Length: 24 * time.Hour, Bucket: time.Hour}
)

// riskFeatures is what the engine reads for every login and payment.
func riskFeatures() []features.Feature {
	return []features.Feature{
		{Name: "logins", Entity: "user", Kind: features.Count, Windows: []store.Window{minute, hour, day}},
		{Name: "login_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{minute, hour}, Limits: []int64{3, 10}},
		{Name: "ip_logins", Entity: "ip", Kind: features.Count, Windows: []store.Window{hour}},
		{Name: "ip_users", Entity: "ip", Kind: features.Distinct, Of: "user", Windows: []store.Window{hour}},
		{Name: "spend", Entity: "card", Kind: features.Sum, Windows: []store.Window{hour, day}},
		{Name: "spend_limit", Entity: "card", Kind: features.Limit, SpendAmount: true, Windows: []store.Window{day}, Limits: []int64{2000}},
		{Name: "card_devices", Entity: "card", Kind: features.Distinct, Of: "device", Windows: []store.Window{day}},
		{Name: "device_cards", Entity: "device", Kind: features.Distinct, Of: "card", Windows: []store.Window{day}},
		{Name: "largest_payment", Entity: "card", Kind: features.Max, Windows: []store.Window{day}},
	}
}

type step struct {
	at     time.Duration // after 09:00
	what   string
	ev     features.Event
	late   time.Duration // the event happened this much earlier than it arrives
	reread []string      // features to print
}

func run(ctx context.Context, client rueidis.Client, out io.Writer) error {
	prefix := fmt.Sprintf("risk-example:%06d:", rand.IntN(1000000))
	set, err := features.New(ctx, client, riskFeatures(), store.WithPrefix(prefix))
	if err != nil {
		return err
	}
	login := func(id, user, ip string) features.Event {
		return features.Event{ID: id, Entities: map[string]string{"user": user, "ip": ip}}
	}
	pay := func(id, card, device string, amount int64) features.Event {
		return features.Event{ID: id, Entities: map[string]string{"card": card, "device": device}, Amount: amount}
	}
	steps := []step{
		{0, "alice logs in", login("e1", "alice", "198.51.100.7"), 0, []string{"logins", "ip_users"}},
		{10 * time.Second, "alice logs in", login("e2", "alice", "198.51.100.7"), 0, []string{"logins", "login_limit"}},
		{15 * time.Second, "alice logs in", login("e3", "alice", "198.51.100.7"), 0, []string{"logins", "login_limit"}},
		{20 * time.Second, "alice logs in (4th in a minute)", login("e4", "alice", "198.51.100.7"), 0, []string{"logins", "login_limit"}},
		{20 * time.Second, "the same event, redelivered", login("e4", "alice", "198.51.100.7"), 0, []string{"logins"}},
		{25 * time.Second, "bob logs in from alice's IP", login("e5", "bob", "198.51.100.7"), 0, []string{"ip_logins", "ip_users"}},
		{90 * time.Second, "alice logs in again", login("e6", "alice", "198.51.100.7"), 0, []string{"logins", "login_limit"}},
		{2 * time.Minute, "card 4242 pays 800 on phone-1", pay("p1", "4242", "phone-1", 800), 0, []string{"spend", "spend_limit"}},
		{5 * time.Minute, "card 4242 pays 900 on laptop-9", pay("p2", "4242", "laptop-9", 900), 0, []string{"spend", "card_devices", "largest_payment"}},
		{6 * time.Minute, "card 5555 pays 50 on laptop-9", pay("p3", "5555", "laptop-9", 50), 0, []string{"device_cards"}},
		{7 * time.Minute, "card 4242 pays 400 (arrives 4 min late)", pay("p4", "4242", "phone-1", 400), 4 * time.Minute, []string{"spend", "spend_limit", "largest_payment"}},
	}
	t0 := time.Now().UTC().Truncate(24 * time.Hour).Add(-15 * time.Hour) // 09:00 yesterday
	fmt.Fprintf(out, "%-7s  %-42s  %-8s  %s\n", "time", "event", "decision", "features read")
	for _, s := range steps {
		now := t0.Add(s.at)
		e := s.ev
		if s.late > 0 {
			e.Time = now.Add(-s.late)
		}
		r, err := set.At(now).Record(ctx, e)
		if err != nil {
			return err
		}
		decision := "allow"
		switch {
		case r.Duplicate:
			decision = "dup"
		case !r.Allowed:
			decision = "REFUSE"
		}
		var vals []string
		for _, name := range s.reread {
			v, _ := r.Get(name)
			vals = append(vals, show(v))
		}
		if !r.Allowed && !r.Duplicate {
			vals = append(vals, fmt.Sprintf("refused by %s, retry in %v", strings.Join(r.RefusedBy, ", "), r.RetryAfter))
		}
		fmt.Fprintf(out, "%-7s  %-42s  %-8s  %s\n", "+"+s.at.String(), s.what, decision, strings.Join(vals, "; "))
	}
	return nil
}

// show prints a feature's value over each of its windows.
func show(v features.Value) string {
	var parts []string
	for i, w := range windows(v.Feature) {
		parts = append(parts, fmt.Sprintf("%s/%s=%d", v.Feature, compact(w.Length), v.Sums[i]))
	}
	if v.Decision != nil { // a Limit feature
		parts = append(parts, fmt.Sprintf("remaining %d", v.Decision.Remaining))
	}
	return strings.Join(parts, " ")
}

func windows(name string) []store.Window {
	for _, f := range riskFeatures() {
		if f.Name == name {
			return f.Windows
		}
	}
	return nil
}

func compact(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%dm", d/time.Minute)
}
