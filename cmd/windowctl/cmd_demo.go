package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/internal/redisaddr"
	"github.com/windowstore/windowstore/store"
)

var demoCmd = &command{
	name:    "demo",
	summary: "play a short risk-control scenario",
	details: "Plays a login guard (allow) and a card-spend total (add, sum) over a one-minute\n" +
		"window of 10 s buckets, on a simulated clock, as a table. With no --addr (and\n" +
		"no $WINDOWSTORE_ADDR) it runs on an embedded in-process server and says so.\n" +
		"Its window is fixed (--window, --bucket and --prefix do not apply); keys go\n" +
		"under a random prefix \"windowctl-demo:NNNNNN:\". With --json, stdout has only\n" +
		"the table's rows and the notes go to stderr.",
	json: `{"time_s":N,"event":"…","sum":N,"decision":"…"} per row of the table`,
	setup: func(fs *flag.FlagSet) func([]string) (action, error) {
		return func(pos []string) (action, error) {
			if len(pos) != 0 {
				return nil, noArgsError("demo")
			}
			return func(e *env) error { return demo(e) }, nil
		}
	},
}

// demo plays a short risk-control scenario on a simulated clock: a login guard
// (Allow) and a card-spend total (Add, Sum, and Sum over the last 30 s) over a one-minute window of
// 10 s buckets. With no address it starts an embedded in-process server. With
// --json, stdout gets one object per row of the table and the notes go to
// stderr.
func demo(e *env) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := e.g
	notes := e.stdout
	if g.json {
		notes = e.stderr
	}

	var client rueidis.Client
	be := g.backend
	if addr, source := g.address(); source == "default" {
		mr, err := embeddedServer()
		if err != nil {
			return fmt.Errorf("demo: start the embedded server: %w", err)
		}
		defer mr.Close()
		client, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true})
		if err != nil {
			return fmt.Errorf("demo: connect to the embedded server: %w", err)
		}
		fmt.Fprintf(notes, "Running on an EMBEDDED in-process server (miniredis at %s): nothing to install.\n", mr.Addr())
		fmt.Fprintf(notes, "It stands in for Redis in this demo only; pass --addr HOST:PORT to run it on a real server.\n\n")
		be = "nativehash-plain" // the embedded server lists HPEXPIREAT but cannot run it
	} else {
		var err error
		if client, err = connect(g); err != nil {
			return err
		}
		fmt.Fprintf(notes, "Running on %s.\n\n", redisaddr.Redact(addr))
	}
	defer client.Close()

	w := store.Window{Length: time.Minute, Bucket: 10 * time.Second}
	prefix := fmt.Sprintf("windowctl-demo:%06d:", rand.IntN(1000000))
	st, err := store.New(ctx, client, w, store.WithPrefix(prefix), store.WithBackend(be))
	if err != nil {
		return err
	}
	d := st.Detection()
	fmt.Fprintf(notes, "Backend %s (field TTL: %v): %s.\n", d.Backend, d.FieldTTL, d.Reason)
	fmt.Fprintf(notes, "Window %v in buckets of %v; keys under %q. The clock is simulated, so the\n", w.Length, w.Bucket, prefix)
	fmt.Fprintf(notes, "scenario's 95 seconds take a moment. Rules: at most 5 login attempts per user\n")
	fmt.Fprintf(notes, "per minute (Allow); card spend summed over the last minute (Add).\n\n")

	t0 := time.Now().Truncate(time.Minute)
	tw := &table{e.p}
	login := func(sec int, user string) error {
		at := t0.Add(time.Duration(sec) * time.Second)
		r, err := st.At(at).Allow(ctx, "login:"+user, 5, 1)
		if err != nil {
			return err
		}
		verdict := fmt.Sprintf("ALLOWED, %d left", r.Remaining)
		if !r.Allowed {
			verdict = fmt.Sprintf("REFUSED, retry in %v", r.RetryAfter)
		}
		tw.row(sec, "login attempt by "+user, r.Sum, verdict)
		return nil
	}
	spend := func(sec int, card string, amount int64) error {
		at := t0.Add(time.Duration(sec) * time.Second)
		sum, err := st.At(at).Add(ctx, "spend:"+card, amount)
		if err != nil {
			return err
		}
		verdict := ""
		if sum > 1000 {
			verdict = "FLAG: over 1000 in a minute"
		}
		tw.row(sec, fmt.Sprintf("card %s spends %d", card, amount), sum, verdict)
		return nil
	}
	look := func(sec int, card string) error {
		at := t0.Add(time.Duration(sec) * time.Second)
		all, err := st.At(at).Sum(ctx, "spend:"+card)
		if err != nil {
			return err
		}
		last30, err := st.At(at).Over(30*time.Second).Sum(ctx, "spend:"+card)
		if err != nil {
			return err
		}
		tw.row(sec, "read card "+card, all, fmt.Sprintf("last 30s only: %d", last30))
		return nil
	}
	steps := []func() error{
		func() error { return login(0, "user42") },
		func() error { return login(3, "user42") },
		func() error { return spend(5, "4242", 120) },
		func() error { return login(14, "user42") },
		func() error { return login(15, "user42") },
		func() error { return login(18, "user42") },
		func() error { return login(22, "user42") },
		func() error { return login(23, "user7") },
		func() error { return spend(31, "4242", 300) },
		func() error { return spend(44, "4242", 650) },
		func() error { return login(59, "user42") },
		func() error { return login(61, "user42") },
		func() error { return look(66, "4242") },
		func() error { return spend(70, "4242", 50) },
		func() error { return login(81, "user42") },
		func() error { return look(95, "4242") },
	}
	tw.header()
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	fmt.Fprintf(notes, "\nWhat happened: user42's 5th attempt used the last slot; at +22s and +59s the\n")
	fmt.Fprintf(notes, "window still held 5, so Allow refused and said when a slot frees up (when the\n")
	fmt.Fprintf(notes, "bucket of +0s..+10s leaves, at +60s). At +61s two attempts had slid out. The\n")
	fmt.Fprintf(notes, "card's sum crossed 1000 at +44s and slid back down as its buckets aged out.\n")
	return demoFeatures(ctx, client, be, prefix, t0.Add(time.Hour), tw, notes)
}

// demoFeatures plays the second part: a feature set, where one call records
// an event in every feature of its entities and decides its limits.
func demoFeatures(ctx context.Context, client rueidis.Client, be, prefix string, t0 time.Time, tw *table, notes io.Writer) error {
	minute, hour := store.Window{Length: time.Minute, Bucket: 10 * time.Second}, store.Window{Length: time.Hour, Bucket: time.Minute}
	set, err := features.New(ctx, client, []features.Feature{
		{Name: "logins", Entity: "user", Kind: features.Count, Windows: []store.Window{minute, hour}},
		{Name: "login_limit", Entity: "user", Kind: features.Limit, Windows: []store.Window{minute}, Limits: []int64{3}},
		{Name: "ip_users", Entity: "ip", Kind: features.Distinct, Of: "user", Windows: []store.Window{hour}},
		{Name: "spend", Entity: "card", Kind: features.Sum, Windows: []store.Window{hour}},
		{Name: "card_ips", Entity: "card", Kind: features.Distinct, Of: "ip", Windows: []store.Window{hour}},
		{Name: "largest_payment", Entity: "card", Kind: features.Max, Windows: []store.Window{hour}},
		{Name: "card_first_seen", Entity: "card", Kind: features.First, Windows: []store.Window{hour}},
	}, store.WithPrefix(prefix+"fx:"), store.WithBackend(be))
	if err != nil {
		return err
	}
	fmt.Fprintf(notes, "\nPart 2: a feature set. One call records an event in every feature of its\n")
	fmt.Fprintf(notes, "entities (user, IP, card) and decides the limits, atomically per entity, in one\n")
	fmt.Fprintf(notes, "round trip. Events carry ids: a redelivered one counts nothing. Besides counts,\n")
	fmt.Fprintf(notes, "sums and distinct counts, a feature can keep a window's max, min, average, or\n")
	fmt.Fprintf(notes, "first and last seen (here: the card's largest payment, and when it was first seen).\n\n")
	type ev struct {
		sec            int
		what, id, user string
		ip, card       string
		amount         int64
	}
	tw.header()
	for _, e := range []ev{
		{0, "login bob from 1.2.3.4", "e1", "bob", "1.2.3.4", "", 0},
		{5, "login eve from 1.2.3.4", "e2", "eve", "1.2.3.4", "", 0},
		{8, "login bob", "e3", "bob", "1.2.3.4", "", 0},
		{9, "login bob", "e4", "bob", "1.2.3.4", "", 0},
		{9, "login bob (redelivered)", "e4", "bob", "1.2.3.4", "", 0},
		{12, "login bob", "e5", "bob", "1.2.3.4", "", 0},
		{20, "card 9 pays 40 from 1.2.3.4", "p1", "", "1.2.3.4", "9", 40},
		{30, "card 9 pays 60 from 5.6.7.8", "p2", "", "5.6.7.8", "9", 60},
	} {
		ents := map[string]string{"ip": e.ip}
		if e.user != "" {
			ents["user"] = e.user
		}
		if e.card != "" {
			ents["card"] = e.card
		}
		r, err := set.At(t0.Add(time.Duration(e.sec)*time.Second)).Record(ctx, features.Event{ID: e.id, Entities: ents, Amount: e.amount})
		if err != nil {
			return err
		}
		verdict := "ALLOWED"
		switch {
		case r.Duplicate:
			verdict = "DUPLICATE, not counted"
		case !r.Allowed:
			verdict = fmt.Sprintf("REFUSED by %s, retry in %v", strings.Join(r.RefusedBy, ", "), r.RetryAfter)
		}
		var sum int64
		if e.user != "" {
			v, _ := r.Get("logins")
			u, _ := r.Get("ip_users")
			sum = v.Sum
			verdict += fmt.Sprintf("; logins/1h %d, users on this IP %d", v.Sums[1], u.Sum)
		} else {
			v, _ := r.Get("spend")
			c, _ := r.Get("card_ips")
			m, _ := r.Get("largest_payment")
			f, _ := r.Get("card_first_seen")
			sum = v.Sum
			at := t0.Add(time.Duration(e.sec) * time.Second)
			verdict += fmt.Sprintf("; IPs of this card %d; largest payment %d; first seen %v ago", c.Sum, m.Sum,
				at.Sub(time.UnixMilli(f.Sum)).Round(time.Second))
		}
		tw.row(3600+e.sec, e.what, sum, verdict)
	}
	fmt.Fprintf(notes, "\nThe fourth login in a minute was refused by the login limit, yet counted as an\n")
	fmt.Fprintf(notes, "attempt; the redelivered event changed nothing. See examples/risk for more.\n")
	return nil
}

// table prints the demo's rows: aligned text, or one JSON object per row.
type table struct{ p *printer }

func (t *table) header() {
	if t.p.json {
		return
	}
	fmt.Fprintf(t.p.w, "%-6s  %-28s  %10s  %s\n", "time", "event", "window sum", "decision")
	fmt.Fprintf(t.p.w, "%-6s  %-28s  %10s  %s\n", "------", strings.Repeat("-", 28), "----------", strings.Repeat("-", 28))
}

func (t *table) row(sec int, event string, sum int64, verdict string) {
	text := fmt.Sprintf("%-6s  %-28s  %10d  %s", fmt.Sprintf("+%ds", sec), event, sum, verdict)
	_ = t.p.emit(demoRow{sec, event, sum, verdict}, strings.TrimRight(text, " "))
}
