package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/store"
)

// demo plays a short risk-control scenario on a simulated clock: a login guard
// (Allow) and a card-spend total (Add, SumWithin) over a one-minute window of
// 10 s buckets. With no address it starts an embedded in-process server.
func demo(g *globals, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var client rueidis.Client
	be := store.Backend(g.backend)
	if !g.addrSet && strings.TrimSpace(g.address()) == defaultAddr && !envAddrSet() {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("demo: start the embedded server: %w", err)
		}
		defer mr.Close()
		client, err = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()}, DisableCache: true})
		if err != nil {
			return fmt.Errorf("demo: connect to the embedded server: %w", err)
		}
		fmt.Fprintf(out, "Running on an EMBEDDED in-process server (miniredis at %s): nothing to install.\n", mr.Addr())
		fmt.Fprintf(out, "It stands in for Redis in this demo only; pass --addr redis://HOST:PORT to run it on a real server.\n\n")
		be = store.NativeHashPlain // the embedded server lists HPEXPIREAT but cannot run it
	} else {
		var err error
		if client, err = connect(g); err != nil {
			return err
		}
		fmt.Fprintf(out, "Running on %s.\n\n", redact(g.address()))
	}
	defer client.Close()

	w := store.Window{Length: time.Minute, Bucket: 10 * time.Second}
	prefix := fmt.Sprintf("windowctl-demo:%06d:", rand.IntN(1000000))
	st, err := store.New(ctx, client, w, store.WithPrefix(prefix), store.WithBackend(be))
	if err != nil {
		return err
	}
	d := st.Detection()
	fmt.Fprintf(out, "Backend %s (field TTL: %v): %s.\n", d.Backend, d.FieldTTL, d.Reason)
	fmt.Fprintf(out, "Window %v in buckets of %v; keys under %q. The clock is simulated, so the\n", w.Length, w.Bucket, prefix)
	fmt.Fprintf(out, "scenario's 95 seconds take a moment. Rules: at most 5 login attempts per user\n")
	fmt.Fprintf(out, "per minute (Allow); card spend summed over the last minute (Add).\n\n")

	t0 := time.Now().Truncate(time.Minute)
	tw := newTable(out)
	login := func(sec int, user string) error {
		at := t0.Add(time.Duration(sec) * time.Second)
		r, err := st.AllowAt(ctx, at, "login:"+user, 5, 1)
		if err != nil {
			return err
		}
		verdict := fmt.Sprintf("ALLOWED, %d left", r.Remaining)
		if !r.Allowed {
			verdict = fmt.Sprintf("REFUSED, retry in %v", r.RetryAfter)
		}
		tw.row(sec, "login attempt by "+user, fmt.Sprint(r.Sum), verdict)
		return nil
	}
	spend := func(sec int, card string, amount int64) error {
		at := t0.Add(time.Duration(sec) * time.Second)
		sum, err := st.AddAt(ctx, at, "spend:"+card, amount)
		if err != nil {
			return err
		}
		verdict := ""
		if sum > 1000 {
			verdict = "FLAG: over 1000 in a minute"
		}
		tw.row(sec, fmt.Sprintf("card %s spends %d", card, amount), fmt.Sprint(sum), verdict)
		return nil
	}
	look := func(sec int, card string) error {
		at := t0.Add(time.Duration(sec) * time.Second)
		all, err := st.SumAt(ctx, at, "spend:"+card)
		if err != nil {
			return err
		}
		last30, err := st.SumWithinAt(ctx, at, "spend:"+card, 30*time.Second)
		if err != nil {
			return err
		}
		tw.row(sec, "read card "+card, fmt.Sprint(all), fmt.Sprintf("last 30s only: %d", last30))
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
	fmt.Fprintf(out, "\nWhat happened: user42's 5th attempt used the last slot; at +22s and +59s the\n")
	fmt.Fprintf(out, "window still held 5, so Allow refused and said when a slot frees up (when the\n")
	fmt.Fprintf(out, "bucket of +0s..+10s leaves, at +60s). At +61s two attempts had slid out. The\n")
	fmt.Fprintf(out, "card's sum crossed 1000 at +44s and slid back down as its buckets aged out.\n")
	return nil
}

func envAddrSet() bool { return strings.TrimSpace(getenv("WINDOWSTORE_ADDR")) != "" }

type table struct{ out io.Writer }

func newTable(out io.Writer) *table { return &table{out} }

func (t *table) header() {
	fmt.Fprintf(t.out, "%-6s  %-28s  %10s  %s\n", "time", "event", "window sum", "decision")
	fmt.Fprintf(t.out, "%-6s  %-28s  %10s  %s\n", "------", strings.Repeat("-", 28), "----------", strings.Repeat("-", 28))
}

func (t *table) row(sec int, event, sum, verdict string) {
	fmt.Fprintf(t.out, "%-6s  %-28s  %10s  %s\n", fmt.Sprintf("+%ds", sec), event, sum, verdict)
}
