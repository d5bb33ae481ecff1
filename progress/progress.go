// Package progress keeps parapply's exactly-once promise. What was applied is
// recorded in a row of parapply.progress on the target, written in the same
// transaction as the data, so the target's own durability decides what counts
// as applied. After a restart the position is read back from that row. The
// publisher is told only positions whose target commit is flushed to disk
// (Tracker), so the slot never discards a change the target could still lose.
package progress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/targetdb"
)

// Schema is the target schema holding parapply's own state.
const Schema = targetdb.Schema

// Position is what the progress row says was applied last.
type Position struct {
	// CommitLSN is the publisher's commit LSN of the last applied
	// transaction: a transaction whose commit LSN is not above it has
	// been applied already and is skipped.
	CommitLSN parapply.LSN
	// EndLSN is the end of that commit record: where streaming resumes.
	EndLSN     parapply.LSN
	XID        parapply.XID
	CommitTime time.Time
	AppliedAt  time.Time
}

// Statement is a statement of this package's for another session's
// pipeline: its text and parameters, so that the applier sends it inside
// the transaction it belongs to, without building that SQL itself.
type Statement struct {
	SQL  string
	Args []any
}

// Update records a transaction (the last of a group) as applied; it runs
// inside the applying transaction.
func Update(slot string, commitLSN, end parapply.LSN, xid parapply.XID, commitTime time.Time) Statement {
	return Statement{updateSQL, []any{slot, commitLSN.String(), end.String(), int64(xid), commitTime}}
}

// RecordApplied records, inside the applying transaction, a group of source
// transactions committed while earlier ones may not be (commit_order =
// dependency): the progress row cannot say so, since it holds one position.
func RecordApplied(slot string, first, last, end parapply.LSN) Statement {
	return Statement{recordAppliedSQL, []any{slot, first.String(), last.String(), end.String()}}
}

// RecordPrepared notes, inside a transaction being prepared, which source
// transaction it is.
func RecordPrepared(slot, gid string, xid parapply.XID, prepareLSN, end parapply.LSN) Statement {
	return Statement{recordPreparedSQL, []any{slot, gid, int64(xid), prepareLSN.String(), end.String()}}
}

// ForgetPrepared drops the row of a prepared transaction, inside the
// transaction that commits it.
func ForgetPrepared(slot, gid string) Statement {
	return Statement{forgetPreparedSQL, []any{slot, gid}}
}

// Advance moves the progress row to a transaction every earlier one of
// which is applied, never backwards, and forgets the groups of
// parapply.applied it covers; it runs as a transaction of its own.
func Advance(ctx context.Context, conn *pgx.Conn, slot string, commitLSN, end parapply.LSN, xid parapply.XID, commitTime time.Time) error {
	_, err := conn.Exec(ctx, advanceSQL, slot, commitLSN.String(), end.String(), int64(xid), commitTime)
	return err
}

// PreparedDone tells whether the prepared transaction gid committed: its
// row of parapply.prepared is visible only then.
func PreparedDone(ctx context.Context, conn *pgx.Conn, slot, gid string) (bool, error) {
	var done bool
	if err := conn.QueryRow(ctx, preparedDoneSQL, slot, gid).Scan(&done); err != nil {
		return false, fmt.Errorf("reading %s.prepared: %w", Schema, err)
	}
	return done, nil
}

// Parameters: slot, commit LSN, end LSN, xid, commit time.
const updateSQL = `UPDATE parapply.progress SET commit_lsn = $2::text::pg_lsn, end_lsn = $3::text::pg_lsn, source_xid = $4, commit_time = $5, applied_at = now() WHERE slot_name = $1`

// Parameters: slot, first and last commit LSN, end LSN.
const recordAppliedSQL = `INSERT INTO parapply.applied (slot_name, commit_lsn, last_commit_lsn, end_lsn) VALUES ($1, $2::text::pg_lsn, $3::text::pg_lsn, $4::text::pg_lsn)`

// Parameters: slot, commit LSN, end LSN, xid, commit time.
const advanceSQL = `WITH moved AS (UPDATE parapply.progress SET commit_lsn = $2::text::pg_lsn, end_lsn = $3::text::pg_lsn, source_xid = $4, commit_time = $5, applied_at = now()
		WHERE slot_name = $1 AND commit_lsn < $2::text::pg_lsn RETURNING 1)
	DELETE FROM parapply.applied WHERE slot_name = $1 AND last_commit_lsn <= $2::text::pg_lsn`

// Range is a run of source transactions by commit LSN, both ends included.
type Range struct{ First, Last parapply.LSN }

// ReadApplied returns the groups committed ahead of the progress row, in
// order, after removing those it already covers.
func ReadApplied(ctx context.Context, conn *pgx.Conn, slot string) ([]Range, error) {
	if _, err := conn.Exec(ctx, `DELETE FROM parapply.applied a USING parapply.progress p WHERE a.slot_name = $1 AND p.slot_name = $1 AND a.last_commit_lsn <= p.commit_lsn`, slot); err != nil {
		return nil, fmt.Errorf("reading %s.applied: %w", Schema, err)
	}
	rows, err := conn.Query(ctx, `SELECT commit_lsn::text, last_commit_lsn::text FROM parapply.applied WHERE slot_name = $1 ORDER BY commit_lsn`, slot)
	if err != nil {
		return nil, fmt.Errorf("reading %s.applied: %w", Schema, err)
	}
	defer rows.Close()
	var out []Range
	for rows.Next() {
		var f, l string
		if err := rows.Scan(&f, &l); err != nil {
			return nil, err
		}
		var r Range
		if r.First, err = parapply.ParseLSN(f); err != nil {
			return nil, err
		}
		if r.Last, err = parapply.ParseLSN(l); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Parameters: slot, gid, xid, prepare LSN, end LSN.
const recordPreparedSQL = `INSERT INTO parapply.prepared (slot_name, gid, source_xid, prepare_lsn, end_lsn) VALUES ($1, $2, $3, $4::text::pg_lsn, $5::text::pg_lsn)`

// Parameters: slot, gid.
const preparedDoneSQL = `SELECT EXISTS (SELECT 1 FROM parapply.prepared WHERE slot_name = $1 AND gid = $2)`

// Parameters: slot, gid.
const forgetPreparedSQL = `DELETE FROM parapply.prepared WHERE slot_name = $1 AND gid = $2`

// Applied reports whether the progress row (or parapply.applied) says the
// transaction committed at commitLSN has been applied: after a connection died during COMMIT, whether
// the commit happened.
func Applied(ctx context.Context, conn *pgx.Conn, slot string, commitLSN parapply.LSN) (bool, error) {
	var done bool
	err := conn.QueryRow(ctx, `SELECT commit_lsn >= $2::text::pg_lsn OR EXISTS (SELECT 1 FROM parapply.applied a WHERE a.slot_name = $1 AND $2::text::pg_lsn BETWEEN a.commit_lsn AND a.last_commit_lsn)
		FROM parapply.progress WHERE slot_name = $1`, slot, commitLSN.String()).Scan(&done)
	if err != nil {
		return false, fmt.Errorf("reading %s.progress: %w", Schema, err)
	}
	return done, nil
}

// Read returns the slot's progress row without creating anything; false
// when the target has no row for the slot.
func Read(ctx context.Context, conn *pgx.Conn, slot string) (Position, bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('parapply.progress') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return Position{}, false, err
	}
	p, _, found, err := readRow(ctx, conn, slot)
	return p, found, err
}

// readRow reads the slot's progress row and the publisher it belongs to.
func readRow(ctx context.Context, conn *pgx.Conn, slot string) (p Position, sourceID string, found bool, err error) {
	var commit, end string
	var xid *int64
	var ct, at *time.Time
	err = conn.QueryRow(ctx, `SELECT source_id, commit_lsn::text, end_lsn::text, source_xid, commit_time, applied_at FROM parapply.progress WHERE slot_name = $1`, slot).
		Scan(&sourceID, &commit, &end, &xid, &ct, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, "", false, nil
	}
	if err != nil {
		return p, "", false, fmt.Errorf("reading %s.progress: %w", Schema, err)
	}
	if p.CommitLSN, err = parapply.ParseLSN(commit); err != nil {
		return p, "", false, err
	}
	if p.EndLSN, err = parapply.ParseLSN(end); err != nil {
		return p, "", false, err
	}
	if xid != nil {
		p.XID = parapply.XID(*xid)
	}
	if ct != nil {
		p.CommitTime = *ct
	}
	if at != nil {
		p.AppliedAt = *at
	}
	return p, sourceID, true, nil
}

// Forget deletes, in tx, the slot's progress row and the groups recorded
// ahead of it: for a start that created its slot and was refused, so that
// the next start is a first start again.
func Forget(ctx context.Context, tx pgx.Tx, slot string) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.to_regclass('parapply.progress') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM parapply.progress WHERE slot_name = $1`, slot); err != nil {
		return fmt.Errorf("deleting slot %s from %s.progress: %w", slot, Schema, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM parapply.applied WHERE slot_name = $1`, slot); err != nil {
		return fmt.Errorf("deleting slot %s from %s.applied: %w", slot, Schema, err)
	}
	return nil
}

// ErrOtherSource means the progress row belongs to a slot on another
// publisher: resuming from it would skip or repeat changes.
var ErrOtherSource = errors.New("progress row belongs to another publisher")

// record creates the slot's progress row if the target had none (found
// false) and returns the position to resume from (zero when new). sourceID
// names the publisher (its system identifier and database) so that a slot
// name reused against another publisher is refused instead of silently
// skipping changes.
func record(ctx context.Context, conn *pgx.Conn, slot, sourceID string, p Position, rowSource string, found bool) (Position, bool, error) {
	if !found {
		_, err := conn.Exec(ctx, `INSERT INTO parapply.progress (slot_name, source_id, commit_lsn, end_lsn) VALUES ($1, $2, '0/0', '0/0')`, slot, sourceID)
		if err != nil {
			return p, false, fmt.Errorf("recording slot %s in %s.progress: %w", slot, Schema, err)
		}
		return p, false, nil
	}
	if rowSource != sourceID {
		return p, false, fmt.Errorf("slot %s: %w (%s, now %s); use another --slot, or delete its row from %s.progress if the target was re-seeded", slot, ErrOtherSource, rowSource, sourceID, Schema)
	}
	return p, p.EndLSN != 0, nil
}

// Opened is what the target recorded of a slot, read once at a run's
// start: where to resume, what was applied ahead of that, and what is to be
// skipped.
type Opened struct {
	// Position is the progress row's (zero when new); Resumed, that
	// there was one to resume from; Created, that this Open made the row.
	Position Position
	Resumed  bool
	Created  bool
	// Ahead are the groups committed ahead of Position (ReadApplied).
	Ahead []Range
	// Skips are the pending skip requests; Passed, the commit LSNs of
	// the requests Position has passed, removed now (ReadSkips).
	Skips  []SkipRequest
	Passed []parapply.LSN
}

// Open is a run's one reading of the slot's records on the target: it
// creates the progress row if missing, then reads the groups applied ahead and
// the skip requests, so that the run starts from one consistent answer.
// slotMissing says the publisher has no slot of the name (the run is to
// create it): progress recorded from an earlier slot of the name is then
// refused, since the changes between that slot's loss and the new one's
// creation never reached the target.
func Open(ctx context.Context, conn *pgx.Conn, slot, sourceID string, slotMissing bool) (Opened, error) {
	var o Opened
	p, rowSource, found, err := readRow(ctx, conn, slot)
	if err != nil {
		return o, err
	}
	if slotMissing && found && p.EndLSN != 0 {
		return o, fmt.Errorf("slot %s does not exist on the publisher, but the target records progress from an earlier slot of that name (last applied commit %s): %s", slot, p.CommitLSN, targetdb.LostSlotFix)
	}
	if o.Position, o.Resumed, err = record(ctx, conn, slot, sourceID, p, rowSource, found); err != nil {
		return o, err
	}
	o.Created = !found
	if o.Ahead, err = ReadApplied(ctx, conn, slot); err != nil {
		return o, err
	}
	if o.Skips, o.Passed, err = ReadSkips(ctx, conn, slot, o.Position.CommitLSN); err != nil {
		return o, err
	}
	return o, nil
}

// Tracker pairs publisher positions with the target WAL positions of the
// commits that applied them, and releases a publisher position as durable
// only once the target has flushed its commit (as worker.c's
// get_flush_position does). Safe for concurrent use: the applier feeds it,
// the stream reader reads it.
type Tracker struct {
	// Observe, if set before use, is told the source commit time of the
	// last transaction of every target commit, as it is recorded.
	Observe func(commitTime time.Time)

	moved chan struct{} // signalled when applied or durable advance

	mu        sync.Mutex
	pending   []mark
	applied   parapply.LSN
	durable   parapply.LSN
	lastLocal parapply.LSN
	lastTime  time.Time
}

type mark struct{ remote, local parapply.LSN }

// NewTracker starts a tracker at the position already durable on the target.
func NewTracker(start parapply.LSN) *Tracker {
	return &Tracker{applied: start, durable: start, moved: make(chan struct{}, 1)}
}

// Moved is signalled whenever the applied or the durable position advances,
// so that the stream reader can tell the publisher at once (a synchronous
// publisher is waiting for exactly that).
func (t *Tracker) Moved() <-chan struct{} { return t.moved }

func (t *Tracker) signal() {
	select {
	case t.moved <- struct{}{}:
	default:
	}
}

// Committed records that the publisher's position remote is committed on
// the target at local (the target's WAL insert position after the commit),
// with commitTime the source commit time (for lag).
func (t *Tracker) Committed(remote, local parapply.LSN, commitTime time.Time) {
	t.mu.Lock()
	if remote <= t.applied {
		t.mu.Unlock()
		return
	}
	t.applied = remote
	if local > t.lastLocal {
		t.lastLocal = local
	}
	if !commitTime.IsZero() {
		t.lastTime = commitTime
	}
	t.pending = append(t.pending, mark{remote, t.lastLocal})
	observe := t.Observe
	t.mu.Unlock()
	t.signal()
	if observe != nil && !commitTime.IsZero() {
		observe(commitTime)
	}
}

// Reached records that everything up to remote has been applied without a
// target commit of its own (a keepalive or an empty transaction): it becomes
// durable once the last target commit before it is.
func (t *Tracker) Reached(remote parapply.LSN) {
	t.Committed(remote, 0, time.Time{})
}

// Flushed tells the tracker how far the target's WAL is durably flushed.
func (t *Tracker) Flushed(local parapply.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := 0
	for ; i < len(t.pending) && t.pending[i].local <= local; i++ {
		t.durable = t.pending[i].remote
	}
	t.pending = append(t.pending[:0], t.pending[i:]...)
	if i > 0 {
		t.signal()
	}
}

// AllDurable marks every applied position durable; for targets that commit
// synchronously.
func (t *Tracker) AllDurable() {
	t.mu.Lock()
	defer t.mu.Unlock()
	moved := t.durable != t.applied
	t.durable = t.applied
	t.pending = t.pending[:0]
	if moved {
		t.signal()
	}
}

// NeedsFlush reports whether some applied position still waits for the
// target's WAL flush.
func (t *Tracker) NeedsFlush() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending) > 0
}

// Positions returns the last applied and the last durable publisher
// positions, and the source commit time of the last applied transaction.
func (t *Tracker) Positions() (applied, durable parapply.LSN, lastCommit time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied, t.durable, t.lastTime
}
