package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/features"
	"github.com/windowstore/windowstore/httplimit"
	"github.com/windowstore/windowstore/internal/refusal"
	"github.com/windowstore/windowstore/limit"
	"github.com/windowstore/windowstore/store"
)

// server is windowstored's state: the client, and the configuration in force,
// swapped whole on a reload so that a call sees one configuration from start
// to end.
type server struct {
	client rueidis.Client
	log    *slog.Logger
	rec    httplimit.Recorder
	obs    store.Observer // OpenTelemetry's, or nil
	rt     atomic.Pointer[runtime]
	// timeout bounds every rate-limit and feature call end to end
	// (--timeout), a frozen server's too: past it the call answers
	// UNAVAILABLE or 503. 0: no bound but the caller's.
	timeout time.Duration
	// refusals remembers refused requests of window limits (--refusal-cache;
	// nil: off), emptied when a configuration is put in force.
	refusals *refusal.Cache

	mu     sync.Mutex // guards stores
	stores map[string]*store.Store

	failure string // the last reload error logged (the reload loop's alone)
}

// runtime is a configuration bound to the server: its stores and feature sets.
type runtime struct {
	cfg  *config
	sets map[string]*features.Set
	gcra map[*rule]limit.Limiter // the GCRA rules' limiters
}

// bounded is ctx bounded by the server's timeout.
func (s *server) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

// storeKey names a store by its prefix and window.
func storeKey(prefix string, w store.Window) string { return prefix + " " + w.String() }

// storeFor returns the store of a rate limit's window under the prefix in
// force.
func (s *server) storeFor(ctx context.Context, w store.Window) (*store.Store, error) {
	return s.storeOf(ctx, s.rt.Load().cfg.settings.prefix, w)
}

// storeOf returns the store of a prefix and window, made once (store.New
// detects the backend: one round trip) and kept across reloads.
func (s *server) storeOf(ctx context.Context, prefix string, w store.Window) (*store.Store, error) {
	k := storeKey(prefix, w)
	s.mu.Lock()
	st := s.stores[k]
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := store.New(ctx, s.client, w, s.storeOptions(prefix)...)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.stores[k]; old != nil {
		return old, nil
	}
	s.stores[k] = st
	return st, nil
}

// storeOptions are the options of every store under prefix.
func (s *server) storeOptions(prefix string) []store.Option {
	opts := []store.Option{store.WithPrefix(prefix)}
	if s.obs != nil {
		opts = append(opts, store.WithObserver(s.obs))
	}
	return opts
}

// bind makes the stores and feature sets of a configuration, so that a
// configuration is in force only once everything it needs is ready.
func (s *server) bind(ctx context.Context, cfg *config) (*runtime, error) {
	rt := &runtime{cfg: cfg, sets: map[string]*features.Set{}, gcra: map[*rule]limit.Limiter{}}
	var err error
	cfg.eachRule(func(r *rule) {
		if !r.gcra || err != nil {
			return
		}
		// One name for every GCRA key: a rate changed by a reload carries
		// the keys' state over (the script converts it).
		var opts []limit.Option
		if s.obs != nil {
			opts = append(opts, limit.WithObserver(s.obs))
		}
		rt.gcra[r], err = limit.NewGCRA(s.client, "gcra", r.limit, r.window.Length, r.burst,
			append(opts, limit.WithPrefix(cfg.settings.prefix))...)
	})
	if err != nil {
		return nil, fmt.Errorf("windowstored: %w", err)
	}
	for _, w := range cfg.shapes() {
		if _, err := s.storeOf(ctx, cfg.settings.prefix, w); err != nil {
			return nil, fmt.Errorf("windowstored: window %v: %w", w, err)
		}
	}
	for _, name := range cfg.setNames {
		set, err := features.New(ctx, s.client, cfg.sets[name], s.storeOptions(cfg.settings.featurePrefix)...)
		if err != nil {
			return nil, fmt.Errorf("windowstored: feature_set %s: %w", name, err)
		}
		rt.sets[name] = set
	}
	return rt, nil
}

// load reads the configuration at path and puts it in force. On any error the
// configuration in force stays, and the error says why. One goroutine calls it
// at a time (at start, then the reload loop).
func (s *server) load(ctx context.Context, path string) error {
	files, digest, err := readConfig(path)
	if err != nil {
		return err
	}
	return s.put(ctx, path, files, digest)
}

// put puts in force the configuration at path whose files were read as
// digest (readConfig): errUnchanged if it is the one in force.
func (s *server) put(ctx context.Context, path string, files []configFile, digest string) error {
	cur := s.rt.Load()
	if cur != nil && cur.cfg.digest == digest {
		return errUnchanged
	}
	cfg, err := parseConfig(path, files, digest)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rt, err := s.bind(ctx, cfg)
	if err != nil {
		return err
	}
	s.rt.Store(rt)
	if s.refusals != nil {
		s.refusals.ForgetAll() // its limits may have changed
	}
	return nil
}

var errUnchanged = fmt.Errorf("windowstored: config unchanged")

// summary describes a configuration for the log.
func (c *config) summary() []any {
	var domains []string
	for d := range c.domains {
		domains = append(domains, d)
	}
	return []any{"domains", domains, "feature_sets", c.setNames, "shadow_mode", c.settings.shadow, "on_error", c.settings.onError}
}
