package apply

import (
	"context"
	"fmt"
)

// A round trip, top to bottom: the statements queued (see queue) are
// taken once the round trip before them has finished (takeOps); then
// roundTrip waits for the rows they change to be read ahead (readAhead,
// when reads wait on a disk), makes them resolving when the group is
// applied with resolving statements (detector), and sends them (sender); when one meets a conflict,
// the target transaction is rolled back and applied again from its start
// with resolving statements, which resolve and log conflicts (detector,
// resolve.go). sendQueued waits for the round trip; sendQueuedAsync lets
// it run while the next statements are built.

// sendQueued performs one round trip with everything queued, after the one
// in flight (if any) has finished.
func (a *Applier) sendQueued(ctx context.Context) error {
	ops, err := a.takeOps()
	if err != nil || len(ops) == 0 {
		return err
	}
	return a.roundTrip(ctx, ops, a.describe())
}

// sendQueuedAsync starts a round trip with everything queued and returns
// at once, so that the next statements are built while the target executes
// these; their outcome is taken by the next wait (every send, and anything
// else that uses the connection, waits first). after, when set, runs once
// the round trip has succeeded, in its goroutine.
//
// While statements wait for their rows to be read ahead (readAhead.slow),
// the round trip does not wait for the one in flight before it is started:
// it follows it (sender.follow), so that the builder goes on at once to the
// next statements and offers their keys to the prefetcher. Waiting, the
// builder offered nothing while the round trip before ran, the prefetch
// connections ran dry of keys and the next statement then waited for all
// of its reads (slow-read-cold at scale 1: 8.77 s against 9.15 in one
// invocation, 8.66 against 10.18 in another (with a cap since taken
// out), medians of 3;
// docs/history/2026-11-29-round-trips-follow.md).
func (a *Applier) sendQueuedAsync(ctx context.Context, after func() error) error {
	var prev *inflight
	if a.readAhead.slow() {
		prev = a.sender.follow()
	}
	var ops []op
	if prev == nil {
		var err error
		if ops, err = a.takeOps(); err != nil {
			return err
		}
	} else {
		ops = a.take()
	}
	if len(ops) == 0 {
		return nil
	}
	f := &inflight{done: make(chan struct{}), ahead: prev}
	desc := a.describe()
	a.sender.inflight = f
	go func() {
		defer close(f.done)
		if prev != nil {
			// Ordered after it, as takeOps would have waited; its failure is
			// this one's, and nothing of this one is sent.
			if <-prev.done; prev.err != nil {
				f.err = prev.err
				return
			}
		}
		f.err = a.roundTrip(ctx, ops, desc)
		if f.err == nil && after != nil {
			f.err = after()
		}
	}()
	return nil
}

// takeOps waits for the round trip in flight, if any, and takes what is
// queued for the next one.
func (a *Applier) takeOps() ([]op, error) {
	if err := a.wait(); err != nil {
		return nil, err
	}
	return a.take(), nil
}

// take takes what is queued for the next round trip.
func (a *Applier) take() []op {
	ops := a.ops
	a.ops, a.qbytes, a.qrows = a.ops[:0:0], 0, 0
	return ops
}

// roundTrip sends ops, which desc names for errors (see the top of this
// file). It runs on the goroutine of sendQueuedAsync: what it writes
// belongs to the sender and the detector, never to the builder.
func (a *Applier) roundTrip(ctx context.Context, ops []op, desc txns) error {
	a.readAhead.await(ctx, ops, &a.Stats.PrefetchWait)
	d := &a.detector
	if len(ops) > 0 && ops[0].sql == "BEGIN" {
		d.beginGroup(d.resolvingNow() && a.alone())
		a.reread.beginGroup()
	}
	ops, err := d.resolvingIfAsked(a.reread.swap(ops))
	if err != nil {
		return err
	}
	err = a.sender.send(ctx, ops, desc)
	for try := 1; err != nil && d.conflictFound(err); try++ {
		if d.keep.lost || try > maxReplays || a.conn.IsClosed() || !a.alone() {
			return d.unresolved(err)
		}
		a.Stats.ConflictReplays.Add(1)
		if _, rerr := a.conn.Exec(ctx, "ROLLBACK"); rerr != nil {
			return err
		}
		// Before deciding: the target's description of the tables may
		// have changed since it was read (a trigger that suppresses
		// changes, created since).
		a.sender.short = a.sender.short[:0]
		if rerr := a.rereadTables(ctx, ops); rerr != nil {
			return desc.wrap(fmt.Errorf("%w (met after: %v)", rerr, err)) //nolint:errorlint // the reread's error decides what follows; err is told, not matched
		}
		d.keep.ops = a.reread.swap(d.keep.ops)
		if ops, err = d.replay(a.reread.swap(ops)); err != nil {
			return err
		}
		err = a.sender.send(ctx, ops, desc)
	}
	if err == nil {
		err = a.settle(ctx)
	} else {
		a.sender.short = a.sender.short[:0]
	}
	d.keep.add(ops, d.on)
	return err
}

// alone reports whether conflicts met now are the target's own (see
// MayResolve).
func (a *Applier) alone() bool { return a.MayResolve == nil || a.MayResolve() }

// wait waits for the round trip in flight and returns its error (see
// sender.wait): everything that uses the connection waits first.
func (a *Applier) wait() error { return a.sender.wait() }
