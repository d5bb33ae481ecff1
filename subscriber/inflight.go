package subscriber

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/spill"
	"github.com/parapply/parapply/targetdb"
)

// A streamed transaction is applied as its chunks arrive, in an open target
// transaction on a connection of its own, so that at the publisher's commit
// little is left to do. Its changes are also kept in a spill file: if
// applying in flight fails for any reason (a lock held longer than
// inflightLockTimeout, a lost connection, an error), it is rolled back and
// the transaction is applied from the file at its commit, on the main path,
// like one that was never applied in flight.
//
// Lock order follows the publisher's: before a chunk is handed over,
// everything before it in the stream is committed on the target, and the
// stream's own commit waits for everything before it. A lock wait the
// publisher did not have ends at the lock timeout, always on the stream's
// side (the target's deadlock_timeout is longer), so the main path never
// deadlocks with it.

// inflightLockTimeout bounds a streamed transaction's lock waits on the
// target; PostgreSQL's default deadlock_timeout is 1s.
const inflightLockTimeout = "500ms"

type streamEvent struct {
	kind   byte // 'c' chunk, 's' subtransaction abort, 'C' commit, 'A' abort
	from   int64
	to     int64
	subxid parapply.XID
	txn    apply.Txn
	end    parapply.LSN
	reply  chan inflightResult
}

type inflightResult struct {
	c   apply.Committed
	err error
	// pid is the target backend of a commit that failed: it may have
	// committed all the same.
	pid uint32
}

// inflight applies one streamed transaction on its own target connection.
type inflight struct {
	xid    parapply.XID
	spill  *spill.Log
	log    *slog.Logger
	app    *apply.Applier
	proto  int
	rels   map[uint32]*parapply.Relation
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	cond   *sync.Cond
	events []streamEvent

	failed     error
	savepoints []parapply.XID
}

// streamConn is a target connection kept for streamed transactions between
// them, with the relation descriptions its applier holds (opening one and
// loading its tables costs more than a small streamed transaction).
type streamConn struct {
	app    *apply.Applier
	rels   map[uint32]*parapply.Relation
	origin int // its replication origin's number (see streamConns.origins)
}

// streamConns keeps up to StreamWorkers idle stream connections, and hands
// out the replication origins of stream sessions: s1, s2, ... (the lowest
// free), each active in one session at a time.
type streamConns struct {
	mu      sync.Mutex
	idle    []streamConn
	closed  bool
	origins map[int]bool // in use
}

// takeOrigin returns the lowest origin number no open stream session has,
// up to most: stream sessions use s1 to s<stream_workers> only, since every
// origin once used keeps one of the target's few origin states.
func (c *streamConns) takeOrigin(most int) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.origins == nil {
		c.origins = map[int]bool{}
	}
	i := 1
	for c.origins[i] {
		i++
	}
	if i > most {
		return 0, false
	}
	c.origins[i] = true
	return i, true
}

func (c *streamConns) putOrigin(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.origins, i)
}

// take returns an idle connection, if there is one.
func (c *streamConns) take() (streamConn, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.idle) == 0 {
		return streamConn{}, false
	}
	sc := c.idle[len(c.idle)-1]
	c.idle = c.idle[:len(c.idle)-1]
	return sc, true
}

// release keeps a connection whose transaction ended cleanly, or closes it.
func (c *streamConns) release(sc streamConn, reusable bool) {
	c.mu.Lock()
	keep := reusable && !c.closed
	if keep {
		c.idle = append(c.idle, sc)
	}
	c.mu.Unlock()
	if !keep {
		sc.app.Close(context.Background())
		c.putOrigin(sc.origin)
	}
}

// close closes the idle connections, and any released later.
func (c *streamConns) close() {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, sc := range idle {
		sc.app.Close(context.Background())
		c.putOrigin(sc.origin)
	}
}

// streamConnFor returns a connection for the streamed transaction xid: an
// idle one brought up to date (relations described since it was last
// used, synced tables), or a new one.
func (l *loop) streamConnFor(ctx context.Context, xid parapply.XID) (streamConn, error) {
	cfg := l.s.cfg.Target
	cfg.AppName = fmt.Sprintf("%s stream %d", l.s.targetName(), xid)
	if sc, ok := l.streamConns.take(); ok {
		err := sc.refresh(ctx, l.rels)
		if err == nil {
			_, err = sc.app.Conn().Exec(ctx, "SET application_name = "+parapply.QuoteLiteral(cfg.AppName))
		}
		if err == nil {
			sc.app.SetSynced(l.app.Synced())
			return sc, nil
		}
		l.s.log.Debug("an idle stream connection could not be reused", "error", err)
		sc.app.Close(context.Background())
		l.streamConns.putOrigin(sc.origin)
	}
	cfg.Prefetch = false // the loop's applier alone reads ahead
	cfg.LockTimeout = inflightLockTimeout
	var busy []int
	defer func() {
		for _, i := range busy {
			l.streamConns.putOrigin(i)
		}
	}()
	for {
		// An origin may still be held by the backend of a session just
		// closed, which ends a moment later: the next is tried.
		origin, ok := l.streamConns.takeOrigin(l.s.cfg.StreamWorkers)
		if !ok {
			return streamConn{}, fmt.Errorf("the replication origins of all %d stream sessions are in use", l.s.cfg.StreamWorkers)
		}
		cfg.Origin = targetdb.OriginName(cfg.Slot, fmt.Sprintf("s%d", origin))
		app, err := l.s.open(ctx, cfg, true, true)
		if err != nil {
			busy = append(busy, origin)
			if errors.Is(err, targetdb.ErrOriginInUse) {
				continue
			}
			return streamConn{}, err
		}
		app.SetSynced(l.app.Synced())
		app.Warn = l.app.Warn
		return streamConn{app: app, rels: maps.Clone(l.rels), origin: origin}, nil
	}
}

// refresh reloads the tables whose description changed since the
// connection was last used; current holds the latest descriptions.
func (sc *streamConn) refresh(ctx context.Context, current map[uint32]*parapply.Relation) error {
	for id, r := range sc.rels {
		if cur, ok := current[id]; ok && cur != r && sc.app.HasRelation(id) {
			if err := sc.app.Relation(ctx, cur); err != nil {
				return err
			}
		}
	}
	maps.Copy(sc.rels, current)
	return nil
}

// startInflight takes a target connection for streamed transaction xid,
// and starts applying its chunks as they come.
func (l *loop) startInflight(ctx context.Context, xid parapply.XID, st *stream) (*inflight, error) {
	sc, err := l.streamConnFor(ctx, xid)
	if err != nil {
		return nil, err
	}
	app := sc.app
	gctx, cancel := context.WithCancel(context.Background())
	f := &inflight{xid: xid, spill: st.log, log: l.s.log, app: app, proto: l.dec.ProtoVersion, rels: sc.rels, cancel: cancel, done: make(chan struct{})}
	f.cond = sync.NewCond(&f.mu)
	// The commit LSN is not known yet; the first change's position stands
	// in for it (the commit comes after it), so tables copied at a sync
	// position before it are applied (see loop.inflightAllowed).
	app.Begin(apply.Txn{XID: xid, CommitLSN: st.FirstLSN, Origin: st.Origin})
	l.s.stats.inflight.Add(1)
	go func() {
		defer close(f.done)
		defer l.s.stats.inflight.Add(-1)
		clean := f.run(gctx)
		conn := app.Conn()
		l.streamConns.release(sc, clean && !conn.IsClosed() && conn.PgConn().TxStatus() == 'I')
	}()
	return f, nil
}

func (f *inflight) push(e streamEvent) {
	f.mu.Lock()
	f.events = append(f.events, e)
	f.mu.Unlock()
	f.cond.Signal()
}

// commit asks for the transaction to be committed once everything handed
// over is applied, and waits for the outcome.
func (f *inflight) commit(txn apply.Txn, end parapply.LSN) inflightResult {
	reply := make(chan inflightResult, 1)
	f.push(streamEvent{kind: 'C', txn: txn, end: end, reply: reply})
	return <-reply
}

// abort rolls the transaction back and waits until the connection is
// closed.
func (f *inflight) abort() {
	f.push(streamEvent{kind: 'A'})
	f.cancel()
	<-f.done
}

// run applies events until the transaction ends, and reports whether it
// ended cleanly (committed, or rolled back when asked), leaving the
// connection fit for another.
func (f *inflight) run(ctx context.Context) bool {
	for {
		f.mu.Lock()
		for len(f.events) == 0 {
			f.cond.Wait()
		}
		e := f.events[0]
		f.events = f.events[1:]
		f.mu.Unlock()
		switch e.kind {
		case 'c':
			if f.failed == nil {
				began := time.Now()
				f.fail(f.chunk(ctx, e.from, e.to))
				f.log.Debug("streamed chunk applied in flight", "xid", f.xid, "bytes", e.to-e.from, "seconds", time.Since(began).Seconds(), "error", f.failed)
			}
		case 's':
			if f.failed == nil {
				f.fail(f.subAbort(ctx, e.subxid))
			}
		case 'C':
			if f.failed != nil {
				e.reply <- inflightResult{err: f.failed}
				return false
			}
			f.app.Retitle(e.txn)
			f.app.End(e.end)
			pid := f.app.Conn().PgConn().PID()
			c, err := f.app.Commit(ctx)
			e.reply <- inflightResult{c: c, err: err, pid: pid}
			return err == nil
		case 'A':
			f.app.Abort(context.Background())
			return f.failed == nil
		}
	}
}

func (f *inflight) fail(err error) {
	if err != nil && f.failed == nil {
		f.failed = err
		f.app.Abort(context.Background())
	}
}

// chunk applies the records in [from, to) of the spill file and sends what
// it queued, so the target works while the next chunk arrives.
func (f *inflight) chunk(ctx context.Context, from, to int64) error {
	dec := pgoutput.NewStreamDecoder(f.proto)
	err := f.spill.Read(from, to, func(_ int64, rec []byte) error {
		m, err := dec.Decode(rec)
		if err != nil {
			return err
		}
		var xid parapply.XID
		var rel uint32
		switch m := m.(type) {
		case *pgoutput.RelationMessage:
			r := m.Relation
			f.rels[r.ID] = &r
			return f.app.Relation(ctx, &r)
		case *pgoutput.Insert:
			xid, rel = m.XID, m.RelationID
		case *pgoutput.Update:
			xid, rel = m.XID, m.RelationID
		case *pgoutput.Delete:
			xid, rel = m.XID, m.RelationID
		case *pgoutput.Truncate:
			xid = m.XID
			for _, id := range m.RelationIDs {
				if err := f.load(ctx, id); err != nil {
					return err
				}
			}
		default:
			return nil
		}
		if rel != 0 {
			if err := f.load(ctx, rel); err != nil {
				return err
			}
		}
		if xid != f.xid && !slices.Contains(f.savepoints, xid) {
			f.savepoints = append(f.savepoints, xid)
			if err := f.app.Savepoint(ctx, savepointName(xid)); err != nil {
				return err
			}
		}
		return applyChange(ctx, f.app, m)
	})
	if err != nil {
		return err
	}
	return f.app.Prepare(ctx)
}

func (f *inflight) load(ctx context.Context, id uint32) error {
	if f.app.HasRelation(id) {
		return nil
	}
	r, ok := f.rels[id]
	if !ok {
		return fmt.Errorf("streamed transaction %d: no relation message for relation %d (protocol error)", f.xid, id)
	}
	return f.app.Relation(ctx, r)
}

func (f *inflight) subAbort(ctx context.Context, subxid parapply.XID) error {
	for i, x := range f.savepoints {
		if x == subxid {
			// Savepoints after it go with it.
			f.savepoints = f.savepoints[:i]
			if err := f.app.RollbackTo(ctx, savepointName(subxid)); err != nil {
				return err
			}
			return f.app.Prepare(ctx)
		}
	}
	return nil // nothing of it was applied here
}

func savepointName(xid parapply.XID) string {
	return "parapply_sub_" + strconv.FormatUint(uint64(xid), 10)
}
