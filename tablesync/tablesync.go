// Package tablesync copies the rows a publication already holds to the target
// before streaming starts, from one consistent snapshot of the publisher, over
// several connections at once.
//
// # Consistency
//
// A logical slot created with an exported snapshot marks a point: the
// snapshot holds exactly the transactions committed before the slot's
// consistent point, and the slot streams exactly those committed after it.
// Every table is copied under that snapshot (SET TRANSACTION SNAPSHOT), and
// the table's sync LSN is recorded as the consistent point: the applier
// skips a change to the table whose transaction committed at or before it.
// A table synced later (added to the publication, or left unfinished by a
// crash) is copied under the snapshot of a temporary slot created for the
// purpose, with that slot's consistent point as its sync LSN; the stream,
// resumed from an earlier position, skips the changes the copy already
// holds. So no change is lost or applied twice at the boundary.
//
// # Interruption
//
// A table counts as synced only when the row saying so in parapply.sync_state
// is committed, after all its rows and its index phase. A table whose copy
// was interrupted is found in state "copying" at the next start: its partial
// rows are truncated (in the one TRUNCATE of every table the copy empties;
// deleted instead if a table outside that statement references it, see
// examine) and it is copied again, whole, under a new snapshot. Indexes the
// copy dropped are saved in parapply.deferred_index; each statement of the
// index phase commits with the deletion of its row (a constraint's index
// with its row rewritten to the ALTER TABLE that attaches it), so the next
// copy of the table rebuilds just what the interrupted one had not, the
// indexes built before staying in place through the copy.
//
// # Parallelism
//
// Large tables are split into ranges of pages (ctid ranges, which
// PostgreSQL scans with a TID range scan), so one big table keeps every
// worker busy. Each range is one COPY from the publisher piped into one COPY
// on the target, committed on the target in a transaction of its own. Once
// a table's rows are in, the indexes deferred for it are built on whichever
// workers are free, before the next range (see batches for which run beside
// one another), so the last table's indexes do not leave the other workers
// idle.
//
// # Binary or text
//
// A range goes in binary format when the column types on both sides are the
// same built-in types with binary send and receive functions and binary is
// not turned off (Config.Text), in text otherwise. PostgreSQL's binary
// functions do not always agree with each other (an empty tsquery is sent
// in binary, and its receive function refuses it): a binary range refused
// for a value's binary form (pgerr.BinaryInput) is rolled back on the
// target and copied again in text, as are the table's ranges after it, with
// one warning per table. The rows of the ranges committed before stay:
// each range commits alone, and the one refused committed nothing.
package tablesync

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/enum"
	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/targetdb"
)

// ExistingData is what the copy does with a target table that already
// holds rows parapply did not copy (the existing_data setting).
type ExistingData string

// Existing-data policies for target tables that already hold rows.
const (
	ExistingError    ExistingData = "error"
	ExistingTruncate ExistingData = "truncate"
	ExistingKeep     ExistingData = "keep"
)

// ExistingDatas lists existing_data's values, for ParseExistingData and the
// help text.
var ExistingDatas = []ExistingData{ExistingError, ExistingTruncate, ExistingKeep}

// ParseExistingData reads the existing_data setting, naming it and its
// values when s is none of them.
func ParseExistingData(s string) (ExistingData, error) {
	return enum.Parse("existing_data", s, ExistingDatas)
}

// Table is one published table to copy.
type Table struct {
	Schema, Name string
	// Columns are the published columns; the publication's column list
	// when it has one.
	Columns []string
	// RowFilter is the publication's row filter (a SQL expression), "" for
	// none.
	RowFilter string
}

// QualifiedName is the quoted, schema-qualified name.
func (t Table) QualifiedName() string {
	return parapply.QuoteIdent(t.Schema) + "." + parapply.QuoteIdent(t.Name)
}

// Config says what to copy from where.
type Config struct {
	SourceDSN, TargetDSN string
	// Snapshot is the exported snapshot every copy runs under.
	Snapshot string
	// SyncLSN is the consistent point that goes with the snapshot.
	SyncLSN parapply.LSN
	Slot    string
	// Origins, when set, makes copy worker i commit under the replication
	// origin targetdb.OriginName(Slot, "c<i>"), as the appliers do under
	// theirs: copied rows are replicated ones, for downstream subscriptions
	// with origin = none too.
	Origins bool
	// Workers is the number of connection pairs copying at once.
	Workers int
	// Existing says what to do with a target table that already holds rows
	// parapply did not copy: ExistingError (default), ExistingTruncate or
	// ExistingKeep.
	Existing ExistingData
	// DeferIndexes drops the indexes of an empty target table before its
	// copy and builds them once its rows are in: a sorted index build is
	// far cheaper than inserting every row into every index. Definitions
	// are kept in parapply.deferred_index until rebuilt, so a crash in
	// between loses nothing. Indexes other tables' foreign keys depend on
	// are left in place, and so are those of a table the role may not
	// drop and rebuild them on (it does not own the table, or may not
	// create in its schema): that table is copied with its indexes, and
	// one line of the log names every such table and the fix.
	DeferIndexes bool
	// Text copies every table in text (binary = off): the publisher
	// prints each value and the target parses it, as the built-in
	// subscription's copy does.
	Text bool
	Log  *slog.Logger
	// Progress, if set, is called about every ProgressEvery with the
	// state of the copy.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Progress is a snapshot of a running copy.
type Progress struct {
	Tables, TablesDone int
	Rows, EstRows      int64
	Bytes              int64
	Elapsed            time.Duration
	// Indexes are the statements of the index phase (the indexes and
	// constraints deferred, see Config.DeferIndexes), IndexesBuilt those
	// done; Building is set once every table's rows are in and only they
	// are left; IndexLeft is the time they are estimated to need still
	// (see indexLeft), which the copy's ETA adds to the rows'.
	Indexes, IndexesBuilt int
	Building              bool
	IndexLeft             time.Duration
	PerTable              []TableProgress
}

// TableProgress is one table's share of a Progress.
type TableProgress struct {
	// Name is schema.table as regclass prints it (parapply.TableName),
	// as every metric names a table.
	Name          string
	Rows, EstRows int64
	Bytes         int64
	Done          bool
}

// State is what the target records about a table's sync.
type State struct {
	State   string
	SyncLSN parapply.LSN
}

// LoadState reads the sync state of every table of a slot, keyed by
// qualified name (parapply's schema is targetdb.Migrate's: the run's claim
// phase brought it up to date).
func LoadState(ctx context.Context, conn *pgx.Conn, slot string) (map[string]State, error) {
	rows, err := conn.Query(ctx, `SELECT table_name, state, sync_lsn::text FROM parapply.sync_state WHERE slot_name = $1`, slot)
	if err != nil {
		return nil, fmt.Errorf("reading parapply.sync_state: %w", err)
	}
	defer rows.Close()
	out := map[string]State{}
	for rows.Next() {
		var name, state, lsn string
		if err := rows.Scan(&name, &state, &lsn); err != nil {
			return nil, err
		}
		l, err := parapply.ParseLSN(lsn)
		if err != nil {
			return nil, err
		}
		out[name] = State{State: state, SyncLSN: l}
	}
	return out, rows.Err()
}

// Pending returns the tables of a start that are to be copied (or marked
// synced, with copy_data = off): those the target does not record as done,
// whether never begun or left "copying" by an interrupted copy, in the
// order given.
func Pending(tables []Table, state map[string]State) []Table {
	var pending []Table
	for _, t := range tables {
		if state[t.QualifiedName()].State != "done" {
			pending = append(pending, t)
		}
	}
	return pending
}

// MarkSynced records tables as in sync without copying (copy_data off).
func MarkSynced(ctx context.Context, conn *pgx.Conn, slot string, tables []Table, lsn parapply.LSN) error {
	for _, t := range tables {
		if _, err := conn.Exec(ctx, `INSERT INTO parapply.sync_state (slot_name, table_name, state, sync_lsn, finished_at) VALUES ($1, $2, 'done', $3::text::pg_lsn, now())
			ON CONFLICT (slot_name, table_name) DO UPDATE SET state = 'done', sync_lsn = EXCLUDED.sync_lsn, finished_at = now()`, slot, t.QualifiedName(), lsn.String()); err != nil {
			return fmt.Errorf("recording %s as synced: %w", t.QualifiedName(), err)
		}
	}
	return nil
}

// chunk is one COPY: a whole table or a range of its pages.
type chunk struct {
	t      *tableJob
	lo, hi int64 // page range [lo, hi); hi < 0: to the end; lo < 0: no range
}

type tableJob struct {
	Table
	format     string      // as planned: "binary" or "text"
	inText     atomic.Bool // a binary range was refused: the rest goes in text
	only       bool        // ONLY on the source (plain table)
	pages      int64
	estRows    int64
	chunks     int
	left       atomic.Int64
	rows       atomic.Int64
	bytes      atomic.Int64
	done       atomic.Bool
	targetCols string
	sourceSel  string
	deferred   []deferred // statements rebuilding the indexes dropped for the copy
	// The index phase, from deferred (see batches): the batches still to
	// come and the steps of the current one running (both under the
	// queue's lock), the builds left (for the ETA) and the statements done.
	batches    [][]*step
	running    int
	buildsLeft atomic.Int64
	built      atomic.Int64
	rowsIn     atomic.Bool
	phaseStart time.Time // when the rows were in, for the log
}

// DefaultWorkers is the copy's connection pairs unless told otherwise: as
// many as the built-in's max_sync_workers_per_subscription. The copy waits
// on the target's heap, index and WAL writes, which more pairs only contend
// for (figures: docs/benchmarks.md, "Figures behind the code's constants").
const DefaultWorkers = 2

// Copy copies tables under cfg.Snapshot and records each as synced at
// cfg.SyncLSN. It returns once every table is done, or at the first error.
func Copy(ctx context.Context, cfg Config, tables []Table) error {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Existing == "" {
		cfg.Existing = ExistingError
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if len(tables) == 0 {
		return nil
	}
	src, err := pgx.Connect(ctx, cfg.SourceDSN)
	if err != nil {
		return fmt.Errorf("copy: connecting to the source: %w", pgerr.Short(err))
	}
	defer src.Close(context.Background())
	dst, err := pgx.Connect(ctx, cfg.TargetDSN)
	if err != nil {
		return fmt.Errorf("copy: connecting to the target: %w", pgerr.Short(err))
	}
	defer dst.Close(context.Background())
	jobs, err := prepareJobs(ctx, src, dst, cfg, tables)
	if err != nil {
		return err
	}
	chunks := chunksOf(jobs, cfg.Workers)
	start := time.Now()
	q := newQueue(chunks)
	if err := copyChunks(ctx, cfg, jobs, q, start); err != nil {
		return err
	}
	p := progressOf(jobs, q, cfg.Workers, start)
	cfg.Log.Info("initial copy done", "tables", p.Tables, "rows", p.Rows, "bytes", p.Bytes, "indexes", p.Indexes, "seconds", p.Elapsed.Seconds())
	return nil
}

// prepareJobs plans each table's copy and readies the target for it,
// under the slot's shared lock on dst: every refusal before anything is
// emptied; then every table the copy empties in one statement (see
// examine), and the indexes deferred.
func prepareJobs(ctx context.Context, src, dst *pgx.Conn, cfg Config, tables []Table) ([]*tableJob, error) {
	if err := targetdb.Share(ctx, dst, cfg.Slot); err != nil {
		return nil, err
	}
	state, err := LoadState(ctx, dst, cfg.Slot)
	if err != nil {
		return nil, err
	}
	jobs := make([]*tableJob, 0, len(tables))
	for _, t := range tables {
		j, err := plan(ctx, src, dst, t)
		if err != nil {
			return nil, err
		}
		if cfg.Text {
			j.format = "text"
		}
		jobs = append(jobs, j)
	}
	ex, err := examine(ctx, dst, cfg.Existing, tables, state)
	if err != nil {
		return nil, err
	}
	if err := prepareTargets(ctx, dst, cfg, jobs, ex); err != nil {
		return nil, err
	}
	var kept []string
	for _, j := range jobs {
		may, err := deferIndexes(ctx, dst, cfg, j, ex.held[j.QualifiedName()] && cfg.Existing == ExistingKeep)
		if err != nil {
			return nil, err
		}
		if !may {
			kept = append(kept, j.QualifiedName())
		}
	}
	if len(kept) > 0 {
		cfg.Log.Info("copying these tables with their indexes in place, slower: the role may not drop and rebuild them (copy_defer_indexes builds the indexes after the rows where the role owns the table and may create in its schema); to defer them, make the role own the tables (ALTER TABLE ... OWNER TO it) and GRANT CREATE on their schemas",
			"tables", strings.Join(kept, ", "))
	}
	return jobs, nil
}

// copyChunks copies the chunks queued in q, and builds the indexes
// deferred, on cfg.Workers workers, reporting progress (from start)
// meanwhile; the first worker's error stops the others.
func copyChunks(ctx context.Context, cfg Config, jobs []*tableJob, q *queue, start time.Time) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	steps := 0
	for _, j := range jobs {
		steps += len(j.deferred)
	}
	errs := make(chan error, cfg.Workers)
	var wg sync.WaitGroup
	for i := 0; i < min(cfg.Workers, len(q.chunks)+steps); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := worker(ctx, cfg, i+1, q); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	stopReport := reportProgress(cfg, jobs, q, start)
	wg.Wait()
	stopReport()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// reportProgress tells cfg.Progress, if set, the copy's progress every
// cfg.ProgressEvery (two seconds by default) and once more when stopped;
// stop returns once that last report is made.
func reportProgress(cfg Config, jobs []*tableJob, q *queue, start time.Time) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	every := cfg.ProgressEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	stopReport := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stopReport:
				cfg.Progress(progressOf(jobs, q, cfg.Workers, start))
				return
			case <-t.C:
				cfg.Progress(progressOf(jobs, q, cfg.Workers, start))
			}
		}
	}()
	return func() {
		close(stopReport)
		<-done
	}
}

// progressOf is the copy's progress: its tables' (jobs), the index
// phase's estimated at the rate of q's builds so far on workers.
func progressOf(jobs []*tableJob, q *queue, workers int, start time.Time) Progress {
	p := Progress{Tables: len(jobs), Elapsed: time.Since(start), Building: true}
	var pending int64
	for _, j := range jobs {
		tp := TableProgress{Name: parapply.TableName(j.Schema, j.Name), Rows: j.rows.Load(), EstRows: j.estRows, Bytes: j.bytes.Load(), Done: j.done.Load()}
		if tp.Done {
			p.TablesDone++
			tp.EstRows = tp.Rows
		}
		p.Rows += tp.Rows
		p.EstRows += max(tp.EstRows, tp.Rows)
		p.Bytes += tp.Bytes
		p.PerTable = append(p.PerTable, tp)
		p.Indexes += len(j.deferred)
		p.IndexesBuilt += int(j.built.Load())
		pending += j.buildsLeft.Load() * j.heapBytes()
		if !j.rowsIn.Load() {
			p.Building = false
		}
	}
	p.Building = p.Building && p.TablesDone < p.Tables && p.IndexesBuilt < p.Indexes
	p.IndexLeft = indexLeft(pending, q.builtBytes.Load(), time.Duration(q.buildNanos.Load()), workers)
	return p
}

// plan reads what the copy of one table needs from both catalogs.
func plan(ctx context.Context, src, dst *pgx.Conn, t Table) (*tableJob, error) {
	j := &tableJob{Table: t}
	name := t.QualifiedName()
	var kind string
	var pages, tuples float64
	err := src.QueryRow(ctx, `SELECT c.relkind::text, c.relpages::float8, greatest(c.reltuples, 0)::float8 FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`, name).Scan(&kind, &pages, &tuples)
	if err != nil {
		return nil, fmt.Errorf("copy: reading %s on the source: %w", name, err)
	}
	j.only = kind != "p"
	j.pages, j.estRows = int64(pages), int64(tuples)
	if kind == "p" {
		// A partitioned root: its size is its partitions'.
		if err := src.QueryRow(ctx, `SELECT coalesce(sum(c.relpages), 0)::float8, coalesce(sum(greatest(c.reltuples, 0)), 0)::float8 FROM pg_catalog.pg_partition_tree($1::regclass) p JOIN pg_catalog.pg_class c ON c.oid = p.relid WHERE p.isleaf`, name).Scan(&pages, &tuples); err != nil {
			return nil, fmt.Errorf("copy: reading partitions of %s: %w", name, err)
		}
		j.pages, j.estRows = int64(pages), int64(tuples)
	}
	columns := func(c *pgx.Conn) (map[string]column, error) {
		rows, err := c.Query(ctx, `SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), (a.atttypid >= 16384 OR coalesce(e.oid >= 16384, false)), a.attgenerated <> '',
				t.typsend <> 0 AND t.typreceive <> 0 AND coalesce(e.typsend <> 0 AND e.typreceive <> 0, true) AND t.oid <> ALL (`+targetdb.OIDAliasTypes+`) AND coalesce(e.oid <> ALL (`+targetdb.OIDAliasTypes+`), true)
			FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem
			WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, name)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		out := map[string]column{}
		for rows.Next() {
			var n string
			var c column
			var user bool
			if err := rows.Scan(&n, &c.typ, &user, &c.generated, &c.binary); err != nil {
				return nil, err
			}
			if user {
				c.typ = "user:" + c.typ
			}
			out[n] = c
		}
		return out, rows.Err()
	}
	st, err := columns(src)
	if err != nil {
		return nil, fmt.Errorf("copy: columns of %s on the source: %w", name, err)
	}
	tt, err := columns(dst)
	if err != nil {
		return nil, fmt.Errorf("copy: columns of %s on the target: %w", name, err)
	}
	cols, format, err := copyColumns(name, t.Columns, st, tt)
	if err != nil {
		return nil, err
	}
	j.format = format
	j.targetCols = strings.Join(cols, ", ")
	j.sourceSel = j.targetCols
	return j, nil
}

// column is what the copy needs of a column of one side. Generated ones
// are included: a generated column the publications send (PostgreSQL 18:
// publish_generated_columns = stored, or named in a column list) is copied
// as the stream sends it, and one generated on the target cannot take a
// published value.
type column struct {
	typ       string // format_type, prefixed "user:" for a type (or array of one) not built in
	generated bool
	binary    bool // the type (and an array's element type) has binary send and receive functions, and is no OID alias (targetdb.OIDAliasTypes)
}

// copyColumns chooses the columns of table name to copy, quoted, and the
// COPY format: the published ones (listed; every column but the generated
// ones, in name order, when the publication has no list, as a PostgreSQL 14
// publisher, which never publishes generated columns), in binary when every
// one has the same built-in type on both sides, one with binary send and
// receive functions (not aclitem) whose binary form means the same on both
// (not an OID alias, regclass), in text otherwise. A
// published column missing on either side, or generated on the target,
// refuses the copy.
func copyColumns(name string, listed []string, src, dst map[string]column) (cols []string, format string, err error) {
	if len(listed) == 0 {
		for c, sc := range src {
			if !sc.generated {
				listed = append(listed, c)
			}
		}
		sort.Strings(listed)
	}
	format = "binary"
	for _, c := range listed {
		s, ok := src[c]
		if !ok {
			return nil, "", fmt.Errorf("copy: published column %s of %s is not on the source (dropped since the start?); start again", parapply.QuoteIdent(c), name)
		}
		d, ok := dst[c]
		if !ok {
			return nil, "", fmt.Errorf("copy: column %s of %s is missing on the target", parapply.QuoteIdent(c), name)
		}
		if d.generated {
			return nil, "", fmt.Errorf("copy: %w", targetdb.GeneratedOnTarget(name, c))
		}
		if s.typ != d.typ || strings.HasPrefix(s.typ, "user:") || !s.binary || !d.binary {
			format = "text"
		}
		cols = append(cols, parapply.QuoteIdent(c))
	}
	return cols, format, nil
}

// prepareTargets empties the tables examine chose and records every table
// as being copied, in one transaction: a failure leaves the target as it
// was.
func prepareTargets(ctx context.Context, dst *pgx.Conn, cfg Config, jobs []*tableJob, ex *examined) error {
	tx, err := dst.Begin(ctx)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	defer tx.Rollback(context.Background())
	for _, name := range ex.interrupted {
		cfg.Log.Info("an earlier copy was interrupted; copying the table again", "table", name)
	}
	if len(ex.truncate) > 0 && cfg.Existing == ExistingTruncate {
		cfg.Log.Info("truncating the target tables to copy (existing_data = truncate)", "tables", strings.Join(ex.truncate, ", "))
	}
	if err := ex.empty(ctx, tx); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	for _, j := range jobs {
		_, err := tx.Exec(ctx, `INSERT INTO parapply.sync_state (slot_name, table_name, state, sync_lsn, started_at) VALUES ($1, $2, 'copying', $3::text::pg_lsn, now())
			ON CONFLICT (slot_name, table_name) DO UPDATE SET state = 'copying', sync_lsn = EXCLUDED.sync_lsn, rows = NULL, started_at = now(), finished_at = NULL`, cfg.Slot, j.QualifiedName(), cfg.SyncLSN.String())
		if err != nil {
			return fmt.Errorf("copy: recording %s in parapply.sync_state: %w", j.QualifiedName(), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	return nil
}

// deferIndexes drops the target table's indexes for the copy, after saving
// how to rebuild them, and plans their rebuilding (j.batches); a table
// whose indexes an interrupted copy already dropped picks up the saved
// statements. may is false when the copy would have dropped them but the
// role may not: it does not own the table (each partition of a
// partitioned one) or may not create in its schema.
func deferIndexes(ctx context.Context, dst *pgx.Conn, cfg Config, j *tableJob, keptRows bool) (may bool, err error) {
	name := j.QualifiedName()
	var partitioned bool
	err = dst.QueryRow(ctx, `SELECT c.relkind = 'p', pg_catalog.pg_has_role(c.relowner, 'USAGE') AND pg_catalog.has_schema_privilege(c.relnamespace, 'CREATE')
			AND coalesce((SELECT bool_and(pg_catalog.pg_has_role(p.relowner, 'USAGE') AND pg_catalog.has_schema_privilege(p.relnamespace, 'CREATE'))
				FROM pg_catalog.pg_partition_tree(c.oid) t JOIN pg_catalog.pg_class p ON p.oid = t.relid), true)
		FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`, name).Scan(&partitioned, &may)
	if err != nil {
		return false, fmt.Errorf("copy: reading %s on the target: %w", name, err)
	}
	rows := mustQuery(ctx, dst, `SELECT index_name, recreate, ord FROM parapply.deferred_index WHERE slot_name = $1 AND table_name = $2 ORDER BY ord`, cfg.Slot, name)
	saved, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (deferred, error) {
		var d deferred
		err := r.Scan(&d.index, &d.sql, &d.ord)
		return d, err
	})
	if err != nil {
		return false, fmt.Errorf("copy: reading deferred indexes of %s: %w", name, err)
	}
	defer func() { j.plan(partitioned) }()
	if !dropsIndexes(len(saved) > 0, cfg.DeferIndexes, keptRows) {
		j.deferred = saved
		return true, nil
	}
	if !may {
		return false, nil
	}
	return true, dropIndexes(ctx, dst, cfg, j)
}

// plan readies the table's index phase from its deferred statements.
func (j *tableJob) plan(partitioned bool) {
	j.batches = batches(j, j.deferred, partitioned)
	n := 0
	for _, b := range j.batches {
		for _, s := range b {
			if !s.attach {
				n++
			}
		}
	}
	j.buildsLeft.Store(int64(n))
}

// dropIndexes saves how to rebuild the table's indexes and constraints
// (not those a foreign key of another table depends on, nor exclusion
// constraints, nor a partition's index attached to its partitioned
// table's, which only that one's DROP removes) in parapply.deferred_index
// and drops them, in one transaction.
func dropIndexes(ctx context.Context, dst *pgx.Conn, cfg Config, j *tableJob) error {
	name := j.QualifiedName()
	rows := mustQuery(ctx, dst, `SELECT i.indexrelid::regclass::text,
			CASE WHEN c.oid IS NULL THEN 'DROP INDEX ' || i.indexrelid::regclass::text
			     ELSE 'ALTER TABLE ' || i.indrelid::regclass::text || ' DROP CONSTRAINT ' || quote_ident(c.conname) END,
			CASE WHEN c.oid IS NULL THEN pg_catalog.pg_get_indexdef(i.indexrelid)
			     ELSE 'ALTER TABLE ' || i.indrelid::regclass::text || ' ADD CONSTRAINT ' || quote_ident(c.conname) || ' ' || pg_catalog.pg_get_constraintdef(c.oid) END
		FROM pg_catalog.pg_index i
		LEFT JOIN pg_catalog.pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid AND c.contype IN ('p', 'u', 'x')
		WHERE i.indrelid = $1::regclass
		  AND (c.contype IS NULL OR c.contype <> 'x')
		  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint f WHERE f.contype = 'f' AND f.conindid = i.indexrelid)
		  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits ih WHERE ih.inhrelid = i.indexrelid)
		ORDER BY i.indisprimary DESC, i.indexrelid`, name)
	type idx struct{ name, drop, create string }
	var list []idx
	for rows.Next() {
		var x idx
		if err := rows.Scan(&x.name, &x.drop, &x.create); err != nil {
			rows.Close()
			return err
		}
		list = append(list, x)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("copy: reading indexes of %s: %w", name, err)
	}
	if len(list) == 0 {
		return nil
	}
	tx, err := dst.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	var ds []deferred
	for i, x := range list {
		if _, err := tx.Exec(ctx, `INSERT INTO parapply.deferred_index VALUES ($1, $2, $3, $4, $5)`, cfg.Slot, name, x.name, x.create, i); err != nil {
			return fmt.Errorf("copy: saving index %s: %w", x.name, err)
		}
		if _, err := tx.Exec(ctx, x.drop); err != nil {
			return fmt.Errorf("copy: dropping index %s for the copy: %w", x.name, err)
		}
		ds = append(ds, deferred{index: x.name, sql: x.create, ord: i})
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	j.deferred = ds
	cfg.Log.Info("indexes deferred until the copy is done", "table", name, "indexes", len(list))
	return nil
}

// dropsIndexes tells whether the copy of a table drops its indexes now:
// when asked (copy_defer_indexes), unless an interrupted copy already did
// (saved: parapply.deferred_index holds how to rebuild them) or the table
// keeps rows of its own (existing_data = keep): only an empty table's
// indexes are deferred.
func dropsIndexes(saved, deferIndexes, keptRows bool) bool {
	return !saved && deferIndexes && !keptRows
}

// mustQuery runs a query whose error surfaces from the returned rows.
func mustQuery(ctx context.Context, c *pgx.Conn, sql string, args ...any) pgx.Rows {
	rows, _ := c.Query(ctx, sql, args...)
	return rows
}

func onlyFor(j *tableJob) string {
	if j.only {
		return "ONLY "
	}
	return ""
}

// chunkPages is the smallest range worth a COPY of its own.
const chunkPages = 2048

// chunksOf orders the tables biggest first, so the long tail is small
// tables, and cuts each into its chunks (split), counting them on the table:
// the COPYs of the whole copy, in the order the workers take them.
func chunksOf(jobs []*tableJob, workers int) []chunk {
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].pages > jobs[b].pages })
	var chunks []chunk
	for _, j := range jobs {
		cs := split(j, workers)
		j.chunks = len(cs)
		j.left.Store(int64(len(cs)))
		chunks = append(chunks, cs...)
	}
	return chunks
}

// split cuts a table into page ranges: about four per worker for a big
// table, one chunk for a small one.
func split(j *tableJob, workers int) []chunk {
	n := j.pages / chunkPages
	if n > int64(workers*4) {
		n = int64(workers * 4)
	}
	if n < 2 {
		return []chunk{{t: j, lo: -1, hi: -1}}
	}
	step := (j.pages + n - 1) / n
	var cs []chunk
	for lo := int64(0); lo < j.pages; lo += step {
		hi := lo + step
		if hi >= j.pages {
			hi = -1 // the last range is open: pages added since relpages was read
		}
		cs = append(cs, chunk{t: j, lo: lo, hi: hi})
		if hi < 0 {
			break
		}
	}
	return cs
}

// sourceSQL is the chunk's COPY on the source, in format.
func (c chunk) sourceSQL(format string) string {
	j := c.t
	var where []string
	if j.RowFilter != "" {
		where = append(where, "("+j.RowFilter+")")
	}
	if c.lo >= 0 {
		where = append(where, fmt.Sprintf("ctid >= '(%d,0)'::tid", c.lo))
		if c.hi >= 0 {
			where = append(where, fmt.Sprintf("ctid < '(%d,0)'::tid", c.hi))
		}
	}
	q := "SELECT " + j.sourceSel + " FROM " + onlyFor(j) + j.QualifiedName()
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return "COPY (" + q + ") TO STDOUT (FORMAT " + format + ")"
}

// targetSQL is the chunk's COPY on the target, in format.
func (c chunk) targetSQL(format string) string {
	j := c.t
	if j.targetCols == "" {
		// A table with no columns: its rows carry nothing but their count.
		return "COPY " + j.QualifiedName() + " FROM STDIN (FORMAT " + format + ")"
	}
	return "COPY " + j.QualifiedName() + " (" + j.targetCols + ") FROM STDIN (FORMAT " + format + ")"
}

// formatNow is the format the table's next range goes in: text once a
// binary one was refused.
func (j *tableJob) formatNow() string {
	if j.inText.Load() {
		return "text"
	}
	return j.format
}

// formats says how the table's rows went, for the log: "binary", "text",
// or "binary, then text" after a refused binary range.
func (j *tableJob) formats() string {
	if j.format == "binary" && j.inText.Load() {
		return "binary, then text"
	}
	return j.format
}

// connectSource opens a copy worker's connection to the source.
func connectSource(ctx context.Context, cfg Config) (*pgx.Conn, error) {
	src, err := pgx.Connect(ctx, cfg.SourceDSN)
	if err != nil {
		return nil, fmt.Errorf("copy: connecting to the source: %w", pgerr.Short(err))
	}
	return src, nil
}

// worker copies chunks and builds indexes, as q hands them out, over its
// own pair of connections.
func worker(ctx context.Context, cfg Config, n int, q *queue) error {
	src, err := connectSource(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { src.Close(context.Background()) }()
	dcfg, err := pgx.ParseConfig(cfg.TargetDSN)
	if err != nil {
		return err
	}
	dcfg.RuntimeParams["application_name"] = "parapply copy"
	dst, err := pgx.ConnectConfig(ctx, dcfg)
	if err != nil {
		return fmt.Errorf("copy: connecting to the target: %w", pgerr.Short(err))
	}
	defer dst.Close(context.Background())
	if err := targetdb.Share(ctx, dst, cfg.Slot); err != nil {
		return err
	}
	if _, err := dst.Exec(ctx, "SET session_replication_role = replica; SET synchronous_commit = off"); err != nil {
		return fmt.Errorf("copy: preparing the target session: %w", err)
	}
	origin := targetdb.OriginName(cfg.Slot, fmt.Sprintf("c%d", n))
	if cfg.Origins {
		if err := targetdb.SetupOrigin(ctx, dst, origin); err != nil {
			return fmt.Errorf("copy: %w", err)
		}
	}
	for {
		t, ok := q.take(ctx)
		if !ok {
			break
		}
		var ready []*step
		if t.step != nil {
			ready, err = build(ctx, dst, cfg, q, t.step)
		} else {
			src, ready, err = copyTask(ctx, cfg, src, dst, q, *t.chunk)
		}
		q.done(ready)
		if err != nil {
			return err
		}
	}
	if cfg.Origins {
		// The copy worker's origin is not used again: its state slot on
		// the target, of which there are few, is freed for the workers.
		err := targetdb.ResetOrigin(ctx, dst)
		if err == nil {
			err = targetdb.RetireOrigin(ctx, dst, cfg.Slot, origin)
		}
		if err != nil && cfg.Log != nil {
			cfg.Log.Debug("copy: the copy worker's replication origin is dropped at a later start", "origin", origin, "error", err)
		}
	}
	return nil
}

// copyTask copies chunk c over src and dst (src anew if a refused binary
// range took it), and once it is its table's last, starts the table's
// index phase, returning its first steps, or records the table as done
// when it has none.
func copyTask(ctx context.Context, cfg Config, src, dst *pgx.Conn, q *queue, c chunk) (*pgx.Conn, []*step, error) {
	format := c.t.formatNow()
	err := copyChunk(ctx, cfg, src, dst, c, format)
	if format == "binary" && inText(cfg, c.t, err) {
		// The source's COPY, cut off when the target refused, took its
		// connection with it.
		if src.IsClosed() {
			if src, err = connectSource(ctx, cfg); err != nil {
				return src, nil, err
			}
		}
		err = copyChunk(ctx, cfg, src, dst, c, "text")
	}
	if err != nil || c.t.left.Add(-1) > 0 {
		return src, nil, err
	}
	// The table's rows are in; it is done once its index phase is (a
	// crash before its 'done' row commits means it is copied again).
	j := c.t
	j.rowsIn.Store(true)
	cfg.Log.Info("table copied", "table", j.QualifiedName(), "rows", j.rows.Load(), "bytes", j.bytes.Load(), "format", j.formats(), "chunks", j.chunks, "indexes_to_build", len(j.deferred))
	j.phaseStart = time.Now()
	if ready := q.rowsIn(j); len(ready) > 0 {
		return src, ready, nil
	}
	return src, nil, finish(ctx, dst, cfg, j)
}

// countingWriter counts the bytes written through it in n and in m.
type countingWriter struct {
	w    io.Writer
	n, m *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	c.m.Add(int64(n))
	return n, err
}

// inText tells whether err, a binary range's, is a refusal of a value's
// binary form (pgerr.BinaryInput), after which the range is copied again
// and the rest of table j goes in text; the first such refusal of a table
// is logged.
func inText(cfg Config, j *tableJob, err error) bool {
	column, ok := pgerr.BinaryInput(err)
	if !ok {
		return false
	}
	if !j.inText.Swap(true) {
		cfg.Log.Warn("copying the table in text: a value's binary form was refused (PostgreSQL's binary input does not take every value its binary output writes); the range is copied again",
			"table", j.QualifiedName(), "column", column, "error", err)
	}
	return true
}

// errTargetCopyEnded ends the pipe from the source's COPY once the
// target's COPY has returned.
var errTargetCopyEnded = errors.New("target copy ended")

// copyChunk copies chunk c in format, committed on the target in a
// transaction of its own; on an error nothing of it is.
func copyChunk(ctx context.Context, cfg Config, src, dst *pgx.Conn, c chunk, format string) error {
	name := c.t.QualifiedName()
	if _, err := src.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	defer func() { _, _ = src.Exec(context.Background(), "ROLLBACK") }()
	if _, err := src.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(cfg.Snapshot, "'", "''")+"'"); err != nil {
		return fmt.Errorf("copy %s: importing the snapshot %s (it lives only while the slot's connection is idle): %w", name, cfg.Snapshot, err)
	}
	tx, err := dst.Begin(ctx)
	if err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	defer tx.Rollback(context.Background())
	pr, pw := io.Pipe()
	var readErr error
	var read atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		// CopyTo writes one message per row: buffer them, so the pipe hands
		// the target whole blocks rather than a goroutine switch per row.
		bw := bufio.NewWriterSize(countingWriter{pw, &c.t.bytes, &read}, 256<<10)
		_, readErr = src.PgConn().CopyTo(ctx, bw, c.sourceSQL(format))
		if readErr == nil {
			readErr = bw.Flush()
		}
		pw.CloseWithError(readErr)
	}()
	ct, err := dst.PgConn().CopyFrom(ctx, pr, c.targetSQL(format))
	pr.CloseWithError(errTargetCopyEnded)
	<-done
	if readErr != nil || err != nil {
		// Nothing of the range stays: its bytes are not the copy's.
		c.t.bytes.Add(-read.Load())
	}
	// A source read cut off because the target's copy ended is no cause
	// of its own: the target's error is (a read still in flight when the
	// target failed would otherwise hide it).
	if readErr != nil && (err == nil || !errors.Is(readErr, errTargetCopyEnded)) {
		return fmt.Errorf("copy %s: reading from the source: %w", name, readErr)
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Where != "" && strings.HasPrefix(pe.Code, pgerrcode.DataException[:2]) {
			// A data exception: a value the target column rejects.
			return fmt.Errorf("copy %s: writing to the target: %w (%s); the target's column types must accept the publisher's values", name, err, pe.Where)
		}
		return fmt.Errorf("copy %s: writing to the target: %w", name, err)
	}
	c.t.rows.Add(ct.RowsAffected())
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	return nil
}

// buildMemory is maintenance_work_mem for each statement of the index
// phase: a sort that fits in memory builds an index several times faster.
// As many builds run at once as the copy has workers (copy_workers, 2 by
// default), so the target gives the phase that many times 256MB at most,
// 512MB by default: a small share of the memory of a server sized for
// the data it takes (a 24 GB one gives it about 2%), and freed as each
// build commits.
const buildMemory = "256MB"

// build runs step s of its table's index phase in a transaction that also
// deletes its statement from parapply.deferred_index (or, for a
// constraint's index, saves the ALTER TABLE still to run in its place):
// a crash leaves saved exactly what is not built. It returns the steps of
// the table's next batch once s ends its batch, and records the table as
// done once s was its last.
func build(ctx context.Context, dst *pgx.Conn, cfg Config, q *queue, s *step) ([]*step, error) {
	j := s.j
	name := j.QualifiedName()
	start := time.Now()
	tx, err := dst.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", name, err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET LOCAL maintenance_work_mem = '"+buildMemory+"'"); err != nil {
		return nil, fmt.Errorf("copy %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, s.sql); err != nil {
		return nil, fmt.Errorf("copy %s: rebuilding an index after the copy (%s): %w", name, s.sql, err)
	}
	if s.then != "" {
		_, err = tx.Exec(ctx, `UPDATE parapply.deferred_index SET recreate = $4 WHERE slot_name = $1 AND table_name = $2 AND index_name = $3`, cfg.Slot, name, s.index, s.then)
	} else {
		_, err = tx.Exec(ctx, `DELETE FROM parapply.deferred_index WHERE slot_name = $1 AND table_name = $2 AND index_name = $3`, cfg.Slot, name, s.index)
	}
	if err != nil {
		return nil, fmt.Errorf("copy %s: recording index %s as built: %w", name, s.index, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("copy %s: %w", name, err)
	}
	next, last := q.stepDone(s, time.Since(start))
	if !last {
		return next, nil
	}
	cfg.Log.Info("indexes rebuilt", "table", name, "indexes", len(j.deferred), "seconds", time.Since(j.phaseStart).Seconds())
	return nil, finish(ctx, dst, cfg, j)
}

// finish records the table as done, once its rows are in and its index
// phase is over.
func finish(ctx context.Context, dst *pgx.Conn, cfg Config, j *tableJob) error {
	name := j.QualifiedName()
	if _, err := dst.Exec(ctx, `UPDATE parapply.sync_state SET state = 'done', rows = $3, finished_at = now() WHERE slot_name = $1 AND table_name = $2`, cfg.Slot, name, j.rows.Load()); err != nil {
		return fmt.Errorf("copy %s: recording it as done: %w", name, err)
	}
	j.done.Store(true)
	return nil
}
