// Package batch coalesces concurrent script calls: a Batcher sends the
// operations that arrive while earlier ones are in flight together, many in
// one script call, each still atomic and answered on its own. Package store
// runs its writes and sums through it, and package limit its windows
// limiter.
package batch

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/windowstore/windowstore/internal/backend"
	"github.com/windowstore/windowstore/internal/keyspace"
)

// DefaultOps and DefaultCalls are the default batching of a store's writes
// and sums (store.WithBatching) and of a windows limiter: at most 64
// operations per script call, and 4 calls in flight before operations queue.
const (
	DefaultOps   = 64
	DefaultCalls = 4
)

var errShortReply = errors.New("the batch reply has the wrong number of entries")

// Observer is told of every script call a Batcher makes: the script's name,
// the operations it carried, how long it took and its error.
type Observer interface {
	Call(script string, ops int, took time.Duration, err error)
}

// Batcher coalesces concurrent operations (the store's writes; a windows
// limiter's Allow) into few script calls: one
// script runs a batch of operations, each atomic on its own.
//
// It never waits on a timer. A write that finds fewer than calls script calls
// in flight is sent at once, alone; the writes that arrive while calls are in
// flight queue up, and the first call to finish takes the queue (up to ops
// operations) as its next batch:
//
//	goroutines   W1  W2  W3 ... W9
//	             │   │   └───┬───┘  queued while W1, W2 are in flight
//	in flight    [W1][W2]    │
//	             └─ done ──> [W3 ... W9]  one FCALL, seven operations
//
// So a lone caller pays nothing, and under load each script call (and each
// round trip, and the server's per-call cost) carries many operations. On a
// cluster a batch holds the operations of one slot; one DoMulti sends every
// slot's batch, in parallel per node.
type Batcher struct {
	client  rueidis.Client
	runner  *backend.Runner
	script  *backend.Script
	name    string   // the script's name for the observer: "write", "sum"
	obs     Observer // nil: none
	ops     int
	calls   int
	Cluster bool // the client is a cluster client: a batch holds one slot's operations
	// Flat reports a script whose reply is one flat array: for each
	// operation the number of its values, then the values, or -1 then an
	// error (the store's write script): an operation's answer is its Vals.
	Flat bool
	// Runs reports a script that reads "*r" before an operation's
	// arguments as r operations of those arguments, over the keys that
	// follow (the store's Write and Sum scripts): the operations of a call
	// whose arguments are equal, one after another, go as one run.
	Runs bool

	mu     sync.Mutex
	queue  []*Op
	active int // batches being run
}

// Op is one operation waiting for its batch; Res and Err are its reply once
// it has run.
type Op struct {
	ctx  context.Context
	keys []string
	hdr  []string // the ARGV header: shared by every server-clock operation
	args []string // the operation's arguments (backend.OpAdd ...)
	slot uint16

	queued bool                   // in batcher.queue; guarded by batcher.mu
	with   *Op                    // the first op of a DoAll of several: they go in one flush
	Res    rueidis.RedisMessage   // the reply (not Flat)
	Vals   []rueidis.RedisMessage // the reply's values (Flat)
	Err    error
	done   chan struct{}
}

// New returns a Batcher of script run through run, named name for obs (nil:
// none), that sends at most ops operations per script call and keeps at most
// calls script calls in flight before it queues.
func New(c rueidis.Client, run *backend.Runner, script *backend.Script, name string, obs Observer, ops, calls int) *Batcher {
	return &Batcher{client: c, runner: run, script: script, name: name, obs: obs, ops: ops, calls: calls, Cluster: c.Mode() == rueidis.ClientModeCluster}
}

// Flatten makes b a Flat batcher, and returns it.
func (b *Batcher) Flatten() *Batcher {
	b.Flat = true
	return b
}

// NewOp makes an operation; on a cluster it notes the key's slot, as only
// operations of one slot can share a script call.
func (b *Batcher) NewOp(ctx context.Context, keys []string, hdr, args []string) *Op {
	o := &Op{ctx: ctx, keys: keys, hdr: hdr, args: args, done: make(chan struct{}, 1)}
	if b.Cluster {
		o.slot = keyspace.Slot(keys[0])
	}
	return o
}

// Do runs one operation and returns its reply. Its result is the same as running
// it alone: each operation of a batch is atomic, and one failing does not fail
// the others. If ctx ends while the write is still queued, it is dropped and
// never sent; if it was already sent, do returns ctx's error at once, and
// the write may still be counted.
func (b *Batcher) Do(ctx context.Context, keys []string, hdr []string, args ...string) (rueidis.RedisMessage, error) {
	ops := []*Op{b.NewOp(ctx, keys, hdr, args)}
	b.DoAll(ctx, ops)
	return ops[0].Res, ops[0].Err
}

// DoVals is Do for a Flat script: it returns the operation's values.
func (b *Batcher) DoVals(ctx context.Context, keys []string, hdr []string, args ...string) ([]rueidis.RedisMessage, error) {
	ops := []*Op{b.NewOp(ctx, keys, hdr, args)}
	b.DoAll(ctx, ops)
	return ops[0].Vals, ops[0].Err
}

// DoAll runs operations that arrive together (the batches of one
// store.Apply) as Do runs one: sent at once when fewer than calls script
// calls are in flight, else queued together, so that they share script calls
// with other callers' operations, still in one round trip: a flush of the
// queue never parts them. Each stays atomic on its own. When DoAll returns,
// every op's Res and Err are set. If ctx ends first, the ops still queued are
// dropped and never sent, and each op not yet answered is replaced in ops by
// one whose Err is ctx's error (one already sent may still be counted).
func (b *Batcher) DoAll(ctx context.Context, ops []*Op) {
	if b.ops == 1 {
		b.Run(ops)
		return
	}
	b.mu.Lock()
	if b.active < b.calls && len(b.queue) == 0 {
		b.active++
		b.mu.Unlock()
		b.Run(ops)
		b.release()
		return
	}
	for _, o := range ops {
		o.queued = true
		if len(ops) > 1 {
			o.with = ops[0]
		}
	}
	b.queue = append(b.queue, ops...)
	b.mu.Unlock()
	for i, o := range ops {
		select {
		case <-o.done:
			continue
		case <-ctx.Done():
		}
		b.mu.Lock()
		b.queue = slices.DeleteFunc(b.queue, func(q *Op) bool { return q.queued && slices.Contains(ops[i:], q) })
		b.mu.Unlock()
		// The ops not answered yet may have been sent: Run still writes
		// their Res and Err, so their answer goes in fresh ops.
		for j := i; j < len(ops); j++ {
			select {
			case <-ops[j].done:
			default:
				ops[j] = &Op{Err: ctx.Err()}
			}
		}
		return
	}
}

// release ends a batch: if writes queued meanwhile, a goroutine takes them on.
func (b *Batcher) release() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.active--
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	go b.drain()
}

// drain runs queued batches until the queue is empty.
func (b *Batcher) drain() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.ops)
		for n < len(b.queue) && b.queue[n].with != nil && b.queue[n].with == b.queue[n-1].with {
			n++ // the rest of a DoAll (Run splits what is past b.ops into more calls of one DoMulti)
		}
		if n == 0 {
			b.active--
			b.mu.Unlock()
			return
		}
		batch := make([]*Op, n)
		copy(batch, b.queue)
		for _, o := range batch {
			o.queued = false
		}
		b.queue = append(b.queue[:0], b.queue[n:]...)
		b.mu.Unlock()
		b.Run(batch)
	}
}

// manyOps is how many operations of one Many share a script call at most, so
// that a read of many keys is one call per slot, and no call holds the
// server for long.
const manyOps = 1024

// Many runs one operation per entry of keys (each operation's keys: a
// counter's, see store's counterKeys), each with the same arguments (reads),
// at once, without queueing: one DoMulti of script calls of at most manyOps
// (or b.ops, if more) operations per clock and slot. It answers in the order
// of keys.
func (b *Batcher) Many(ctx context.Context, keys [][]string, hdr []string, args ...string) []*Op {
	ops := make([]*Op, len(keys))
	for i, k := range keys {
		ops[i] = b.NewOp(ctx, k, hdr, args)
	}
	b.run(ops, max(b.ops, manyOps))
	return ops
}

// Run sends a batch: one script call per header (clock) and slot, of at most
// b.ops operations, all in one DoMulti. Server-clock operations share one
// header slice; client-clock ones share a call when their instants are equal.
func (b *Batcher) Run(batch []*Op) { b.run(batch, b.ops) }

// run is Run with calls of at most per operations.
func (b *Batcher) run(batch []*Op, per int) {
	type group struct {
		ops  []*Op
		call backend.Call
	}
	var groups []*group
	find := func(o *Op) *group {
		for _, g := range groups {
			f := g.ops[0]
			if f.slot == o.slot && len(g.ops) < per && (&f.hdr[0] == &o.hdr[0] || slices.Equal(f.hdr, o.hdr)) {
				return g
			}
		}
		g := &group{call: backend.Call{Args: append([]string(nil), o.hdr...)}}
		groups = append(groups, g)
		return g
	}
	for _, o := range batch {
		g := find(o)
		g.ops = append(g.ops, o)
		g.call.Keys = append(g.call.Keys, o.keys...)
		if !b.Runs {
			g.call.Args = append(g.call.Args, o.args...)
		}
	}
	if b.Runs {
		for _, g := range groups {
			g.call.Args = appendRuns(g.call.Args, g.ops)
		}
	}
	calls := make([]backend.Call, len(groups))
	for i, g := range groups {
		calls[i] = g.call
	}
	ctx, cancel := batchContext(batch)
	start := time.Now()
	res := b.runner.ExecMulti(ctx, b.script, calls)
	took := time.Since(start)
	cancel()
	for i, g := range groups {
		vals, err := res[i].ToArray()
		var each [][]rueidis.RedisMessage
		switch {
		case err == nil && b.Flat:
			each, err = flat(vals, len(g.ops))
		case err == nil && len(vals) != len(g.ops):
			err = errShortReply
		}
		if b.obs != nil {
			b.obs.Call(b.name, len(g.ops), took, err)
		}
		for j, o := range g.ops {
			switch {
			case err != nil:
				o.Err = err
			case b.Flat && len(each[j]) == 1 && each[j][0].Error() != nil: // (an operation's values are never errors)
				o.Err = each[j][0].Error()
			case b.Flat:
				o.Vals = each[j]
			default:
				o.Res, o.Err = vals[j], vals[j].Error()
			}
			o.done <- struct{}{}
		}
	}
}

// appendRuns appends the arguments of ops to args, each run of operations
// with equal arguments as "*r" and the arguments once (one operation alone,
// without "*1").
func appendRuns(args []string, ops []*Op) []string {
	for i := 0; i < len(ops); {
		r := 1
		for i+r < len(ops) && slices.Equal(ops[i+r].args, ops[i].args) {
			r++
		}
		if r > 1 {
			args = append(args, "*"+strconv.Itoa(r))
		}
		args = append(args, ops[i].args...)
		i += r
	}
	return args
}

// batchContext is the context of a batch's script call: its operations' own
// when they share one (a lone write, SumMany); else one that is not cancelled with any one caller's context (that
// would fail the others), with the latest of their deadlines, if they all
// have one.
func batchContext(batch []*Op) (context.Context, context.CancelFunc) {
	same := true
	for _, o := range batch[1:] {
		same = same && o.ctx == batch[0].ctx
	}
	if same {
		return batch[0].ctx, func() {}
	}
	var last time.Time
	for _, o := range batch {
		d, ok := o.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), last)
}

// Queued returns how many operations wait for a batch (for tests).
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// flat splits a Flat script's reply into its n operations' values: for
// each, the number of its values, then the values; -1 then an error reply
// (kept as a slice of that one error). A reply that stops after an error
// (the script could not parse that operation, so ran none after it) gives
// that error to every operation after it too: none of them wrote.
func flat(vals []rueidis.RedisMessage, n int) ([][]rueidis.RedisMessage, error) {
	out := make([][]rueidis.RedisMessage, n)
	for j := range n {
		if len(vals) == 0 && j > 0 && len(out[j-1]) == 1 && out[j-1][0].Error() != nil {
			out[j] = out[j-1]
			continue
		}
		if len(vals) == 0 {
			return nil, errShortReply
		}
		c, err := vals[0].AsInt64()
		switch {
		case err != nil:
			return nil, errShortReply
		case c == -1:
			if len(vals) < 2 || vals[1].Error() == nil {
				return nil, errShortReply
			}
			out[j], vals = vals[1:2], vals[2:]
		case c < 0 || int64(len(vals)-1) < c:
			return nil, errShortReply
		default:
			out[j], vals = vals[1:1+c], vals[1+c:]
		}
	}
	if len(vals) != 0 {
		return nil, errShortReply
	}
	return out, nil
}
