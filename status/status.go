// Package status keeps what a running parapply tells operators about itself
// in a table on the target, parapply.status, one row per slot, so that
// `parapply status` (or any SQL client) can answer "how far behind, and why"
// from the target alone, whether parapply is running or has stopped.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/targetdb"
)

// Record is one slot's row of parapply.status.
type Record struct {
	Slot            string    `json:"slot"`
	State           string    `json:"state"`
	PID             int       `json:"pid"`
	Host            string    `json:"host"`
	Version         string    `json:"version"`
	ApplicationName string    `json:"application_name"`
	StartedAt       time.Time `json:"started_at"`
	UpdatedAt       time.Time `json:"updated_at"`
	// Positions on the publisher's WAL (see subscriber.Status).
	Received     parapply.LSN `json:"received_lsn"`
	Applied      parapply.LSN `json:"applied_lsn"`
	Flushed      parapply.LSN `json:"flushed_lsn"`
	SourceWALEnd parapply.LSN `json:"source_wal_end_lsn"`
	// LagBytes is SourceWALEnd minus Applied; LagSeconds the age of the
	// last applied source commit while more is waiting.
	LagBytes   int64      `json:"lag_bytes"`
	LagSeconds float64    `json:"lag_seconds"`
	LastCommit *time.Time `json:"last_commit_time"`
	// Totals since the run started, and rates over the last interval.
	SourceTxns    int64      `json:"source_transactions"`
	TargetTxns    int64      `json:"target_transactions"`
	Rows          int64      `json:"rows"`
	Missing       int64      `json:"missing_rows"`
	TxnsPerSecond float64    `json:"transactions_per_second"`
	RowsPerSecond float64    `json:"rows_per_second"`
	QueueBytes    int64      `json:"queue_bytes"`
	Workers       []Worker   `json:"workers"`
	Copy          *Copy      `json:"copy,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	LastErrorAt   *time.Time `json:"last_error_at,omitempty"`
	// Faults counts the faults ridden out since the start, by cause
	// (subscriber.FaultCauses); Sequences is the last sequence sync.
	Faults    map[string]int64 `json:"faults,omitempty"`
	Sequences *Sequences       `json:"sequences,omitempty"`
	// Apply says who applies: the stream reader or workers, and with
	// workers = auto why.
	Apply *Apply `json:"apply,omitempty"`
	// DDL counts the schema changes from the publisher run on the target
	// since the start (ddl = apply).
	DDL int64 `json:"ddl_statements,omitempty"`
	// Waiting is what parapply waits for on the target while it lacks a
	// resource or takes no writes (nil: nothing).
	Waiting *Wait `json:"waiting,omitempty"`
	// Age (how long ago the row was written, by the target's clock) and
	// LockHeld (a target session holds the slot's lock) are read with
	// the row, never written: they tell a live run from a dead one
	// (Liveness).
	Age      time.Duration `json:"-"`
	LockHeld bool          `json:"lock_held"`
}

// Wait is what parapply waits for on the target in a Record: the reason
// (one of subscriber.WaitReasons), since when, the last error, and the
// fix.
type Wait struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	Error  string    `json:"error"`
	What   string    `json:"what"`
	Fix    string    `json:"fix"`
}

// Apply is who applies in a Record: with workers = auto (Auto), the
// workers applying now (0: the stream reader), the switches made, and the
// read-wait share of the last judged window.
type Apply struct {
	Auto          bool    `json:"auto"`
	WorkersActive int     `json:"workers_active"`
	Switches      int64   `json:"switches"`
	ReadWaitShare float64 `json:"read_wait_share"`
}

// Sequences is the last sequence sync in a Record: the running parapply's
// (By "run") or a parapply sync-sequences run's, whichever is later.
type Sequences struct {
	At         time.Time `json:"at"`
	By         string    `json:"by,omitempty"`
	Sequences  int       `json:"sequences"`
	Moved      int       `json:"moved"`
	Missing    int       `json:"missing"`
	Unreadable int       `json:"unreadable"`
	// Unchanged, Ahead (left alone beyond the publisher's), Refused (the
	// target role may not read or set them) and Unused: the rest of the
	// sync's outcomes, so that Sequences is not read as all synced.
	Unchanged int    `json:"unchanged"`
	Ahead     int    `json:"ahead"`
	Refused   int    `json:"refused"`
	Unused    int    `json:"unused"`
	Error     string `json:"error,omitempty"`
	// Detail is what the sync did to each sequence, the first
	// MaxSequenceDetail of them; DetailOmitted counts the others.
	Detail        []SequenceResult `json:"detail,omitempty"`
	DetailOmitted int              `json:"detail_omitted,omitempty"`
}

// Who synced sequences, in Sequences.By.
const (
	SyncedByRun     = "run"
	SyncedByCommand = "sync-sequences"
)

// SequenceResult is what a sync did to one sequence.
type SequenceResult struct {
	Sequence string `json:"sequence"`
	// Outcome is one of the Sequence* outcomes.
	Outcome string `json:"outcome"`
	// PublisherValue is the publisher's last value (absent if it never
	// handed one out or cannot be read); TargetBefore the target's before
	// the sync (absent if it handed none out).
	PublisherValue *int64 `json:"publisher_last_value,omitempty"`
	TargetBefore   *int64 `json:"target_last_value_before,omitempty"`
}

// Outcomes of a SequenceResult.
const (
	SequenceMoved      = "moved"      // set forward to the publisher's value
	SequenceLeft       = "left"       // the target's was already there
	SequenceAhead      = "ahead"      // the target's is beyond the publisher's: left alone
	SequenceRefused    = "refused"    // the target role may not read and set it: left untouched
	SequenceUnused     = "unused"     // never used on the publisher
	SequenceMissing    = "missing"    // not on the target
	SequenceUnreadable = "unreadable" // the source role may not read it
)

// MaxSequenceDetail bounds the sequences listed in a Record (the row is
// written every second).
const MaxSequenceDetail = 1000

// SequenceSync turns a sync's results (and its error) into what a Record
// shows of it.
func SequenceSync(sum sequences.Summary, rs []sequences.Result, by, syncErr string) *Sequences {
	q := &Sequences{At: sum.At, By: by, Sequences: sum.Sequences, Moved: sum.Moved, Missing: sum.Missing, Unreadable: sum.Unread,
		Unchanged: sum.Unchanged, Ahead: sum.Ahead, Refused: sum.Refused, Unused: sum.Unused, Error: syncErr}
	for i, r := range rs {
		if i == MaxSequenceDetail {
			q.DetailOmitted = len(rs) - i
			break
		}
		d := SequenceResult{Sequence: r.QualifiedName(), Outcome: SequenceLeft}
		if r.Used && r.Readable {
			v := r.Last
			d.PublisherValue = &v
		}
		if r.Called {
			v := r.Before
			d.TargetBefore = &v
		}
		switch {
		case r.Missing:
			d.Outcome = SequenceMissing
		case !r.Readable:
			d.Outcome = SequenceUnreadable
		case !r.Used:
			d.Outcome = SequenceUnused
		case r.Refused():
			d.Outcome = SequenceRefused
		case r.Ahead:
			d.Outcome = SequenceAhead
		case r.Moved:
			d.Outcome = SequenceMoved
		}
		q.Detail = append(q.Detail, d)
	}
	return q
}

// health is what the health column holds.
type health struct {
	Faults    map[string]int64 `json:"faults,omitempty"`
	Sequences *Sequences       `json:"sequences,omitempty"`
	Apply     *Apply           `json:"apply,omitempty"`
	DDL       int64            `json:"ddl_statements,omitempty"`
	Waiting   *Wait            `json:"waiting,omitempty"`
}

// Worker is one worker's figures in a Record.
type Worker struct {
	Worker             int     `json:"worker"`
	SourceTxns         int64   `json:"source_transactions"`
	TargetTxns         int64   `json:"target_transactions"`
	Units              int64   `json:"units"`
	Rows               int64   `json:"rows"`
	BusySeconds        float64 `json:"busy_seconds"`
	DependencyWaitSecs float64 `json:"dependency_wait_seconds"`
	CommitWaitSecs     float64 `json:"commit_order_wait_seconds"`
	Retries            int64   `json:"retries"`
}

// Copy is the initial copy's progress in a Record.
type Copy struct {
	Tables         int     `json:"tables"`
	TablesDone     int     `json:"tables_done"`
	Rows           int64   `json:"rows"`
	RowsEstimated  int64   `json:"rows_estimated"`
	Bytes          int64   `json:"bytes"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Indexes and IndexesBuilt: the index phase's statements, and those
	// done; Building: every table's rows are in, only they are left (see
	// tablesync.Progress).
	Indexes      int  `json:"indexes,omitempty"`
	IndexesBuilt int  `json:"indexes_built,omitempty"`
	Building     bool `json:"building_indexes,omitempty"`
	// Percent and ETASeconds: see subscriber.CopyEstimate (absent while
	// nothing can be estimated).
	Percent    *float64 `json:"percent,omitempty"`
	ETASeconds *float64 `json:"eta_seconds,omitempty"`
}

// Liveness is what a Record read from the target (Read) says of its
// process, one of the Run* values: a live parapply holds the slot's lock
// on the target from its claim of the slot to its end and writes its row
// every Interval; a killed one writes no more, and its target sessions
// end as soon as their backends notice it gone, taking the lock with them.
func (r Record) Liveness() string {
	switch {
	case r.State == subscriber.StateStopped || r.State == subscriber.StateFailed:
		return RunEnded
	case !r.LockHeld && r.Age > NotRunningAfter:
		return RunNotRunning
	case r.Age > StaleAfter:
		return RunNotUpdated
	}
	return RunLive
}

// Stale reports whether a record that says parapply is running is not
// believed: not updated for NotRunningAfter with no target session
// holding the slot's lock, or for StaleAfter.
func (r Record) Stale() bool {
	l := r.Liveness()
	return l == RunNotRunning || l == RunNotUpdated
}

// Live reports whether a parapply process is believed to run on the
// slot: its row says so and is fresh, or the slot's lock is held on the
// target (a process that has claimed the slot and not yet recorded
// itself).
func (r Record) Live() bool {
	return r.Liveness() == RunLive || r.LockHeld
}

// What Liveness says of a record's process.
const (
	RunLive       = "live"        // its row says running and is fresh
	RunEnded      = "ended"       // it recorded its end: stopped or failed
	RunNotRunning = "not running" // not updated for NotRunningAfter, the slot's lock free
	RunNotUpdated = "not updated" // not updated for StaleAfter, the slot's lock held
)

// Interval is how often a running parapply updates its record;
// NotRunningAfter how old a running record may get, with no target
// session holding the slot's lock, before status calls the run not
// running (three missed updates); StaleAfter how old it may get while
// the lock is held (a process whose recorder cannot write).
const (
	Interval        = time.Second
	NotRunningAfter = 3 * Interval
	StaleAfter      = 15 * time.Second
)

// Sample turns a subscriber status into a record; prev (the previous sample
// and its time, zero for the first) gives the rates.
func Sample(st subscriber.Status, prev subscriber.Status, elapsed time.Duration) Record {
	r := Record{
		State: st.State, StartedAt: st.Started,
		Received: st.Received, Applied: st.Applied, Flushed: st.Durable, SourceWALEnd: st.SourceWALEnd,
		LagSeconds: st.Lag.Seconds(), SourceTxns: st.Txns, TargetTxns: st.Groups, Rows: st.Rows, Missing: st.Missing,
		QueueBytes: st.QueueBytes + st.StreamBytes, Workers: []Worker{}, DDL: st.DDL,
	}
	r.LagBytes = st.LagBytes()
	if !st.LastCommit.IsZero() {
		t := st.LastCommit
		r.LastCommit = &t
	}
	if elapsed > 0 {
		r.TxnsPerSecond = float64(st.Txns-prev.Txns) / elapsed.Seconds()
		r.RowsPerSecond = float64(st.Rows-prev.Rows) / elapsed.Seconds()
	}
	r.Apply = &Apply{Auto: st.AutoWorkers, WorkersActive: st.ActiveWorkers, Switches: st.WorkerSwitches, ReadWaitShare: st.ReadWaitShare}
	for _, w := range st.Workers {
		r.Workers = append(r.Workers, Worker{Worker: w.Worker, SourceTxns: w.Txns, TargetTxns: w.Units, Units: w.UnitsApplied, Rows: w.Rows,
			BusySeconds: w.Busy.Seconds(), DependencyWaitSecs: w.DependencyWait.Seconds(), CommitWaitSecs: w.CommitWait.Seconds(), Retries: w.Retries})
	}
	for i, n := range st.Reconnects {
		if n > 0 {
			if r.Faults == nil {
				r.Faults = map[string]int64{}
			}
			r.Faults[subscriber.FaultCauses[i]] = n
		}
	}
	if w := st.Waiting; w != nil {
		r.Waiting = &Wait{Reason: w.Reason, Since: w.Since, Error: w.Error, What: w.What, Fix: w.Fix}
	}
	if sq := st.Sequences; !sq.At.IsZero() || st.SequenceError != "" {
		r.Sequences = SequenceSync(sq, st.SequenceResults, SyncedByRun, st.SequenceError)
	}
	if p := st.Copy; p != nil {
		r.Copy = &Copy{Tables: p.Tables, TablesDone: p.TablesDone, Rows: p.Rows, RowsEstimated: p.EstRows, Bytes: p.Bytes, ElapsedSeconds: p.Elapsed.Seconds(),
			Indexes: p.Indexes, IndexesBuilt: p.IndexesBuilt, Building: p.Building}
		if pct, left, ok := subscriber.CopyEstimate(*p); ok {
			eta := left.Seconds()
			r.Copy.Percent, r.Copy.ETASeconds = &pct, &eta
		}
	}
	return r
}

// Create makes the parapply schema, parapply.status with it, if it is
// missing or older than this release's.
func Create(ctx context.Context, conn *pgx.Conn) error {
	return targetdb.Migrate(ctx, conn)
}

const upsertSQL = `INSERT INTO parapply.status AS s (slot_name, state, pid, host, version, application_name, started_at, updated_at,
	received_lsn, applied_lsn, flushed_lsn, source_wal_end, lag_bytes, lag_seconds, last_commit_time,
	source_txns, target_txns, rows, missing_rows, txns_per_second, rows_per_second, queue_bytes, workers, copy, last_error, last_error_at, health)
VALUES ($1, $2, $3, $4, $5, $6, $7, now(), $8::text::pg_lsn, $9::text::pg_lsn, $10::text::pg_lsn, $11::text::pg_lsn, $12, $13, $14,
	$15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)
ON CONFLICT (slot_name) DO UPDATE SET state = excluded.state, pid = excluded.pid, host = excluded.host, version = excluded.version,
	application_name = excluded.application_name, started_at = excluded.started_at, updated_at = excluded.updated_at,
	received_lsn = excluded.received_lsn, applied_lsn = excluded.applied_lsn, flushed_lsn = excluded.flushed_lsn,
	source_wal_end = excluded.source_wal_end, lag_bytes = excluded.lag_bytes, lag_seconds = excluded.lag_seconds,
	last_commit_time = excluded.last_commit_time, source_txns = excluded.source_txns, target_txns = excluded.target_txns,
	rows = excluded.rows, missing_rows = excluded.missing_rows, txns_per_second = excluded.txns_per_second,
	rows_per_second = excluded.rows_per_second, queue_bytes = excluded.queue_bytes, workers = excluded.workers,
	copy = excluded.copy, last_error = excluded.last_error, last_error_at = excluded.last_error_at, health = excluded.health`

// Write records r as its slot's row.
func Write(ctx context.Context, conn *pgx.Conn, r Record) error {
	workers, err := json.Marshal(r.Workers)
	if err != nil {
		return err
	}
	var cp []byte
	if r.Copy != nil {
		if cp, err = json.Marshal(r.Copy); err != nil {
			return err
		}
	}
	var lastErr *string
	if r.LastError != "" {
		lastErr = &r.LastError
	}
	h, err := json.Marshal(health{r.Faults, r.Sequences, r.Apply, r.DDL, r.Waiting})
	if err != nil {
		return err
	}
	_, err = conn.Exec(ctx, upsertSQL, r.Slot, r.State, r.PID, r.Host, r.Version, r.ApplicationName, nullTime(r.StartedAt),
		r.Received.String(), r.Applied.String(), r.Flushed.String(), r.SourceWALEnd.String(), r.LagBytes, r.LagSeconds, r.LastCommit,
		r.SourceTxns, r.TargetTxns, r.Rows, r.Missing, r.TxnsPerSecond, r.RowsPerSecond, r.QueueBytes, string(workers), nullBytes(cp),
		lastErr, r.LastErrorAt, string(h))
	if err != nil {
		return fmt.Errorf("writing parapply.status: %w", err)
	}
	return nil
}

// WriteExisting records the end of a start refused before it ran over
// its slot's row, if the slot has one and no other process holds the
// slot (its lock on the target), and reports whether it did: such a start
// leaves no row of its own (bad input would otherwise leave rows that
// keep the parapply schema alive), but a slot that ran before shows the
// refusal, with the positions its row held (what the target holds), the
// totals of a run that did nothing, and no wait; the process that holds
// the slot keeps its row.
func WriteExisting(ctx context.Context, conn *pgx.Conn, r Record) (bool, error) {
	var lastErr *string
	if r.LastError != "" {
		lastErr = &r.LastError
	}
	tag, err := conn.Exec(ctx, `UPDATE parapply.status SET state = $2, pid = $3, host = $4, version = $5, application_name = $6,
		started_at = coalesce($7::timestamptz, now()), updated_at = now(), source_txns = 0, target_txns = 0, rows = 0, missing_rows = 0, txns_per_second = 0,
		rows_per_second = 0, queue_bytes = 0, workers = '[]', copy = NULL, last_error = $8, last_error_at = $9, health = health - 'waiting'
		WHERE slot_name = $1 AND NOT `+targetdb.LockHeld("slot_name"),
		r.Slot, r.State, r.PID, r.Host, r.Version, r.ApplicationName, nullTime(r.StartedAt), lastErr, r.LastErrorAt)
	if err != nil {
		return false, fmt.Errorf("writing parapply.status: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullBytes(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// Read returns the records of slot ("" for every slot), oldest slot name
// first, each with the later of its own last sequence sync and the last
// parapply sync-sequences run of the slot. A target parapply never ran
// against has no table: that is an error that says so.
func Read(ctx context.Context, conn *pgx.Conn, slot string) ([]Record, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('parapply.status') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("reading parapply.status: %w", err)
	}
	if !exists {
		return nil, errors.New("the target has no parapply.status table: parapply has not run against this database (check --target)")
	}
	rows, err := conn.Query(ctx, `SELECT slot_name, state, coalesce(pid, 0), coalesce(host, ''), coalesce(version, ''), coalesce(application_name, ''),
		coalesce(started_at, 'epoch'), updated_at, coalesce(received_lsn, '0/0')::text, coalesce(applied_lsn, '0/0')::text,
		coalesce(flushed_lsn, '0/0')::text, coalesce(source_wal_end, '0/0')::text, coalesce(lag_bytes, 0), coalesce(lag_seconds, 0),
		last_commit_time, coalesce(source_txns, 0), coalesce(target_txns, 0), coalesce(rows, 0), coalesce(missing_rows, 0),
		coalesce(txns_per_second, 0), coalesce(rows_per_second, 0), coalesce(queue_bytes, 0), coalesce(workers, '[]')::text, copy::text,
		coalesce(last_error, ''), last_error_at, coalesce(health, '{}')::text,
		greatest(extract(epoch FROM pg_catalog.clock_timestamp() - updated_at)::float8, 0), `+targetdb.LockHeld("slot_name")+`
		FROM parapply.status WHERE $1 = '' OR slot_name = $1 ORDER BY slot_name`, slot)
	if err != nil {
		return nil, fmt.Errorf("reading parapply.status: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var r Record
		var recv, appl, flus, end, workers, hl string
		var cp *string
		var age float64
		if err := rows.Scan(&r.Slot, &r.State, &r.PID, &r.Host, &r.Version, &r.ApplicationName, &r.StartedAt, &r.UpdatedAt,
			&recv, &appl, &flus, &end, &r.LagBytes, &r.LagSeconds, &r.LastCommit, &r.SourceTxns, &r.TargetTxns, &r.Rows, &r.Missing,
			&r.TxnsPerSecond, &r.RowsPerSecond, &r.QueueBytes, &workers, &cp, &r.LastError, &r.LastErrorAt, &hl, &age, &r.LockHeld); err != nil {
			return nil, fmt.Errorf("reading parapply.status: %w", err)
		}
		for _, p := range []struct {
			s   string
			lsn *parapply.LSN
		}{{recv, &r.Received}, {appl, &r.Applied}, {flus, &r.Flushed}, {end, &r.SourceWALEnd}} {
			if *p.lsn, err = parapply.ParseLSN(p.s); err != nil {
				return nil, err
			}
		}
		var h health
		if err := json.Unmarshal([]byte(hl), &h); err != nil {
			return nil, fmt.Errorf("parapply.status of slot %s: health: %w", r.Slot, err)
		}
		r.Faults, r.Sequences, r.Apply, r.DDL, r.Waiting = h.Faults, h.Sequences, h.Apply, h.DDL, h.Waiting
		r.Age = time.Duration(age * float64(time.Second))
		if err := json.Unmarshal([]byte(workers), &r.Workers); err != nil {
			return nil, fmt.Errorf("parapply.status of slot %s: workers: %w", r.Slot, err)
		}
		if cp != nil {
			r.Copy = &Copy{}
			if err := json.Unmarshal([]byte(*cp), r.Copy); err != nil {
				return nil, fmt.Errorf("parapply.status of slot %s: copy: %w", r.Slot, err)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	syncs, err := readSequenceSyncs(ctx, conn)
	if err != nil {
		return nil, err
	}
	for i := range out {
		if q := syncs[out[i].Slot]; q != nil && (out[i].Sequences == nil || q.At.After(out[i].Sequences.At)) {
			out[i].Sequences = q
		}
	}
	return out, nil
}
