package subscriber

import (
	"context"
	"fmt"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/spill"
	"github.com/parapply/parapply/subscriber/flow"
)

// stream is a transaction the publisher streams before it commits: its
// changes go to a spill file, and to an inflight applier when there is one.
type stream struct {
	// Stream is what the loop's core decides of it: the offsets of its
	// subtransactions, whether it is applied at its commit only (DDL,
	// or no inflight applier), whether what came before the current
	// block is committed (see handOver), and its origin (the Origin
	// message of its first block).
	*flow.Stream
	log *spill.Log
	// published is the end of what was handed to the inflight applier.
	published int64
	inflight  *inflight
	counted   int64 // live bytes, as counted in Subscriber.streamBytes
}

// streamed handles a message between StreamStart and StreamStop: changes go
// to the stream's spill file; at StreamStop the chunk goes to its inflight
// applier.
func (l *loop) streamed(ctx context.Context, m pgoutput.Message, f source.Frame) error {
	st := l.streams[l.core.StreamXID()]
	switch m := m.(type) {
	case *pgoutput.StreamStop:
		l.core.StreamStop()
		return l.handOver(ctx, st)
	case *pgoutput.RelationMessage:
		if st.DDL {
			// It may describe what the DDL changes, which the target
			// has not yet: loaded when the stream is applied.
			return l.spillChange(ctx, st, m.XID, f)
		}
		rel := m.Relation
		if err := l.app.Relation(ctx, &rel); err != nil {
			return err
		}
		l.rels[rel.ID] = &rel
		// Later transactions' changes to it come without one.
		l.sink.relation(&rel, nil)
		return l.spillChange(ctx, st, m.XID, f)
	case *pgoutput.Origin:
		st.Origin = m.Name
		return nil
	case *pgoutput.LogicalMessage:
		if !l.wantsDDL(m) {
			return nil
		}
		// Applied at its commit, with its DDL at its place.
		st.MarkDDL()
		if st.inflight != nil {
			st.inflight.abort()
			st.inflight = nil
		}
		return l.spillChange(ctx, st, m.XID, f)
	case *pgoutput.TypeMessage:
		return nil
	}
	return fmt.Errorf("unexpected %T inside a streamed transaction (protocol error)", m)
}

// inflightPart is how much of a stream block is handed to its inflight
// applier at a time: the target applies a large block while the rest of it
// arrives, not after it.
const inflightPart = 256 << 10

// spillChange appends a streamed message, as received, to its stream's
// spill file; xid is the (sub)transaction it belongs to.
func (l *loop) spillChange(ctx context.Context, st *stream, xid parapply.XID, f source.Frame) error {
	off, err := st.log.Append(f.Data)
	if err != nil {
		return err
	}
	st.Spilled(xid, off, f.WALStart)
	n := int64(len(f.Data) + 4)
	st.counted += n
	l.s.stats.streamBytes.Add(n)
	l.s.stats.spilled.Add(n)
	if !st.AtCommit && st.log.Size()-st.published >= inflightPart {
		return l.handOver(ctx, st)
	}
	return nil
}

// handOver hands what was received of the stream since the last hand-over
// to its inflight applier, starting one if the stream may have it. It is
// called at the end of each stream block and every inflightPart bytes
// within one.
func (l *loop) handOver(ctx context.Context, st *stream) error {
	if err := st.log.Flush(); err != nil {
		return err
	}
	if st.AtCommit || st.log.Size() == st.published {
		return nil
	}
	if st.inflight == nil {
		if !l.inflightAllowed(st) {
			st.AtCommit = true
			return nil
		}
		xid := l.core.StreamXID()
		f, err := l.startInflight(ctx, xid, st)
		if err != nil {
			l.s.log.Warn("cannot open a connection to apply a streamed transaction in flight; it will be applied at its commit", "xid", xid, "error", err)
			st.AtCommit = true
			return nil
		}
		st.inflight = f
	}
	// What came before this block takes its locks on the target first;
	// nothing else arrives within a block.
	if !st.Settled {
		if err := l.commitTaken(ctx); err != nil {
			return err
		}
		st.Settled = true
	}
	st.inflight.push(streamEvent{kind: 'c', from: st.published, to: st.log.Size()})
	st.published = st.log.Size()
	return nil
}

// inflightAllowed decides whether a stream is applied as it arrives: there
// is a connection to spare, and no table's initial copy could hold the
// transaction already (which only its commit LSN, unknown yet, would tell).
func (l *loop) inflightAllowed(st *stream) bool {
	if int(l.s.stats.inflight.Load()) >= l.s.cfg.StreamWorkers {
		return false
	}
	if l.s.runs.atCommitOnly.Load() {
		// The last run stalled on a lock; this one takes no chance.
		return false
	}
	for _, lsn := range l.app.Synced() {
		if lsn > st.FirstLSN {
			return false
		}
	}
	return true
}

func (l *loop) streamAbort(m *pgoutput.StreamAbort) {
	l.s.log.Debug("stream abort", "xid", m.XID, "subxid", m.SubXID)
	st, ok := l.streams[m.XID]
	if !ok {
		return
	}
	if flow.WholeAbort(m) {
		l.dropStream(m.XID, st)
		return
	}
	cut, ok := st.Cut(m.SubXID)
	if !ok {
		return
	}
	st.log.Cut(cut)
	live := st.log.Size() - st.log.DeadBytes()
	l.s.stats.streamBytes.Add(live - st.counted)
	st.counted = live
	if st.inflight != nil {
		st.inflight.push(streamEvent{kind: 's', subxid: m.SubXID})
	}
}

// dropStream forgets a stream, rolling back what was applied of it.
func (l *loop) dropStream(xid parapply.XID, st *stream) {
	delete(l.streams, xid)
	if st.inflight != nil {
		st.inflight.abort()
	}
	l.s.stats.streamBytes.Add(-st.counted)
	if err := st.log.Close(); err != nil {
		l.s.log.Warn("removing a spill file", "error", err)
	}
}

func (l *loop) closeStreams() {
	for xid, st := range l.streams {
		l.dropStream(xid, st)
	}
	l.streamConns.close()
}

func (l *loop) streamCommit(ctx context.Context, m *pgoutput.StreamCommit) error {
	st := l.streams[m.XID]
	txn := flow.Txn{XID: m.XID, CommitLSN: m.CommitLSN, CommitTime: m.CommitTime}
	if st == nil {
		// Nothing of it was published (empty, or only unpublished
		// tables).
		if err := l.begin(txn); err != nil {
			return err
		}
		return l.commit(ctx, m.EndLSN)
	}
	defer l.dropStream(m.XID, st)
	txn.Origin = st.Origin
	if f := st.inflight; f != nil {
		st.inflight = nil
		if err := l.commitTaken(ctx); err != nil {
			f.abort()
			return err
		}
		keep := l.core.KeepInflight(&txn)
		l.noted()
		if !keep {
			// Applied before a restart, or to be skipped: the copy
			// applied in flight goes.
			f.abort()
			st.AtCommit = true
		} else {
			began := time.Now()
			res := f.commit(apply.Txn(txn), m.EndLSN)
			<-f.done
			l.s.log.Debug("streamed transaction committed in flight", "xid", m.XID, "seconds", time.Since(began).Seconds(), "error", res.err)
			if res.err == nil {
				l.s.stats.streamedInFlight.Add(1)
				record(l.tracker, res.c)
				return nil
			}
			done, err := l.committedAnyway(ctx, res, m.CommitLSN)
			if err != nil {
				return err
			}
			if done {
				l.s.stats.streamedInFlight.Add(1)
				return nil
			}
			l.s.log.Warn("a streamed transaction could not be applied in flight; applying it from its spill file", "xid", m.XID, "commit_lsn", m.CommitLSN.String(), "error", res.err)
		}
	}
	l.s.stats.streamedAtCommit.Add(1)
	if err := l.begin(txn); err != nil {
		return err
	}
	if err := l.replay(ctx, m.XID, st); err != nil {
		return err
	}
	return l.commit(ctx, m.EndLSN)
}

// replay dispatches a stream's live changes from its spill file.
func (l *loop) replay(ctx context.Context, xid parapply.XID, st *stream) error {
	dec := pgoutput.NewStreamDecoder(l.dec.ProtoVersion)
	return st.log.Replay(func(rec []byte) error {
		c, err := dec.Decode(rec)
		if err != nil {
			return fmt.Errorf("decoding the spill file of transaction %d: %w", xid, err)
		}
		return l.dispatch(ctx, c)
	})
}

// committedAnyway finds out whether an inflight commit that failed reached
// the target all the same (the connection died during COMMIT): its backend
// is ended and waited for, then the progress row tells. If it did, the
// tracker is told.
func (l *loop) committedAnyway(ctx context.Context, res inflightResult, commitLSN parapply.LSN) (bool, error) {
	if res.pid == 0 || res.c.End == 0 {
		return false, nil
	}
	if err := awaitGone(ctx, l.app, res.pid); err != nil {
		return false, err
	}
	done, err := progress.Applied(ctx, l.app.Conn(), l.s.cfg.Source.Slot, commitLSN)
	if err != nil || !done {
		return false, err
	}
	local, flushed, err := l.app.WALPositions(ctx)
	if err != nil {
		return false, err
	}
	record(l.tracker, apply.Committed{End: res.c.End, CommitTime: res.c.CommitTime, Local: local, Flushed: flushed})
	return true, nil
}
