package store

import (
	"context"
	"slices"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/batch"
)

// sender sends a store's write operations at one clock (its header), for
// package engine: through the store's batcher, with its resends, its
// server errors made *backend.ScriptError.
type sender struct {
	s   *Store
	hdr []string
}

func (x sender) Send(ctx context.Context, keys []string, retry bool, args ...string) ([]rueidis.RedisMessage, error) {
	vals, err := x.s.run(ctx, keys, x.hdr, retry, args...)
	return vals, x.s.be.Write.AsScriptError(err)
}

// joinable returns the header (the clock) that the batches of plans ps share
// when they can run in one script call: more than one batch, on a server
// that is not a cluster (where a script may touch any key), through stores
// of one client, backend and way of running scripts, at one instant. It
// returns nil otherwise: then each batch goes through its store's batcher
// (on a cluster, one script call per slot, in one DoMulti per node).
func joinable(ps []*plan) []string {
	if len(ps) < 2 {
		return nil
	}
	f := ps[0].st
	if f.writes.Cluster {
		return nil
	}
	hdr := f.header()
	for _, p := range ps[1:] {
		s := p.st
		if s.client != f.client || s.be != f.be || s.runner.Functions() != f.runner.Functions() || !slices.Equal(s.header(), hdr) {
			return nil
		}
	}
	return hdr
}

// run sends one write operation through the batcher: every write goes
// through it. With retry (an operation with an event id, safe to send
// again) it resends it after a connection error, up to the store's retries,
// while ctx lasts. Any write is resent after TRYAGAIN, which says that
// nothing ran (a cluster slot is moving, and the operation's keys are on
// both nodes for now), for as long as ctx lasts and at most maxTryAgain in
// all (tryAgainBackoff): a slot's keys move a few at a time. Retries off
// (0) turn both off.
func (s *Store) run(ctx context.Context, keys, hdr []string, retry bool, args ...string) ([]rueidis.RedisMessage, error) {
	lost, again, waited := 0, 0, time.Duration(0)
	for {
		msg, err := s.writes.DoVals(ctx, keys, hdr, args...)
		if err == nil || s.retries == 0 || ctx.Err() != nil || !resend(err, retry) {
			return msg, err
		}
		var wait time.Duration
		if isTryAgain(err) {
			if waited >= maxTryAgain {
				return msg, err
			}
			wait, again = tryAgainBackoff(again), again+1
		} else {
			if lost >= s.retries {
				return msg, err
			}
			wait, lost = retryBackoff(lost), lost+1
		}
		waited += wait
		select {
		case <-ctx.Done():
			return msg, err
		case <-time.After(wait):
		}
	}
}

// read runs one read (a sum) through the batcher of reads, resent after
// TRYAGAIN as run resends a write (a read is always safe to resend).
func (s *Store) read(ctx context.Context, keys, hdr []string, args ...string) (rueidis.RedisMessage, error) {
	again, waited := 0, time.Duration(0)
	for {
		msg, err := s.reads.Do(ctx, keys, hdr, args...)
		if err == nil || s.retries == 0 || ctx.Err() != nil || !isTryAgain(err) || waited >= maxTryAgain {
			return msg, err
		}
		wait := tryAgainBackoff(again)
		again, waited = again+1, waited+wait
		select {
		case <-ctx.Done():
			return msg, err
		case <-time.After(wait):
		}
	}
}

// readMany is the batcher of reads' Many: one read per entry of keys, each
// resent after TRYAGAIN as read resends it.
func (s *Store) readMany(ctx context.Context, keys [][]string, hdr []string, args ...string) []*batch.Op {
	ops := s.reads.Many(ctx, keys, hdr, args...)
	again, waited := 0, time.Duration(0)
	for s.retries > 0 && ctx.Err() == nil && waited < maxTryAgain {
		var idx []int
		for i, o := range ops {
			if o.Err != nil && isTryAgain(o.Err) {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 {
			break
		}
		wait := tryAgainBackoff(again)
		again, waited = again+1, waited+wait
		select {
		case <-ctx.Done():
			return ops
		case <-time.After(wait):
		}
		sub := make([][]string, len(idx))
		for j, i := range idx {
			sub[j] = keys[i]
		}
		for j, o := range s.reads.Many(ctx, sub, hdr, args...) {
			ops[idx[j]] = o
		}
	}
	return ops
}

// isTryAgain reports whether err is the server's TRYAGAIN: nothing ran.
func isTryAgain(err error) bool {
	code, _ := backend.ReplyCode(err)
	return code == "TRYAGAIN"
}

// maxTryAgain bounds the time a write keeps being resent after TRYAGAIN.
const maxTryAgain = 5 * time.Second

// tryAgainBackoff is the wait before resending after the attempt-th
// TRYAGAIN: 10 ms, doubling, at most 100 ms.
func tryAgainBackoff(attempt int) time.Duration {
	return min(time.Duration(10<<min(attempt, 4))*time.Millisecond, 100*time.Millisecond)
}

// resend reports whether a write that failed with err is sent again: after
// TRYAGAIN, which says that nothing ran (a cluster slot is moving), and,
// with retry (an event id makes it safe), after a lost reply.
func resend(err error, retry bool) bool {
	if isTryAgain(err) {
		return true
	}
	return retry && backend.Classify(err) == backend.Lost
}

// retryBackoff is the wait before resending after the attempt-th failure:
// 10 ms, doubling, at most maxBackoff. Uncapped, the twelfth wait was 40 s
// and the twentieth three hours: a connection that broke a dozen times in a
// row parked its write past any deadline.
func retryBackoff(attempt int) time.Duration {
	if attempt >= 7 {
		return maxBackoff
	}
	return min(time.Duration(10<<attempt)*time.Millisecond, maxBackoff)
}

// maxBackoff caps the wait between two sends of a write with an event id.
const maxBackoff = 500 * time.Millisecond
