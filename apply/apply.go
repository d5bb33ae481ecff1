// Package apply writes decoded changes to the target database. Consecutive
// changes of the same kind and shape on the same table form a run that becomes
// one set-based statement (INSERT ... SELECT FROM unnest, UPDATE ... FROM
// unnest, DELETE ... USING unnest); statements are queued and sent pipelined,
// so a small source transaction costs one round trip, BEGIN to COMMIT.
//
// Order within a source transaction is kept: a run is closed before a change
// whose key (old or new replica identity value) the run already touches, so
// a statement never sees two changes of one row.
package apply

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parapply/parapply"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/schedule"
)

// Config shapes a target connection.
type Config struct {
	DSN string
	// AppName is the connection's application_name on the target.
	AppName string
	// Slot names the progress row this applier writes.
	Slot string
	// SynchronousCommit is the target session's synchronous_commit; "off"
	// (the default, as for built-in subscriptions) is safe because the
	// publisher is only told positions the target has flushed.
	SynchronousCommit string
	// BatchRows caps the rows of one set-based statement.
	BatchRows int
	// PipelineBytes caps the parameter bytes queued before a round trip.
	PipelineBytes int
	// Tallies receives per-table counts; appliers of one run share it.
	// Nil: the applier keeps its own.
	Tallies *Tallies
	// SyncStandby, when set and true, makes every commit synchronous
	// whatever SynchronousCommit says: the publisher is waiting for the
	// target's flush (parapply is its synchronous standby).
	SyncStandby *atomic.Bool
	// AheadOfOrder marks an applier whose groups may commit before earlier
	// ones (commit_order = dependency): each commit then records its
	// group in parapply.applied instead of moving the progress row.
	AheadOfOrder bool
	// LockTimeout is the session's lock_timeout ("" leaves the server's):
	// a wait on a lock held by another session of parapply's (a
	// transaction applied ahead of its turn, a streamed one held open)
	// must end, since parapply's own order would never release it.
	LockTimeout string
	// Prefetch lets the applier read ahead, on a second target connection
	// opened when a table first needs it, the rows of coming updates and
	// deletes of tables larger than shared_buffers (see prefetcher).
	Prefetch bool
	// PrefetchConns is how many connections the prefetcher reads on (0:
	// DefaultPrefetchConns).
	PrefetchConns int
	// PrefetchPieces splits the keys offered at once into pieces of
	// prefetchPiece, so that a worker's short runs are read on every
	// prefetch connection; the single applier's long runs are offered in
	// chunks that spread by themselves.
	PrefetchPieces bool
}

// Defaults for Config.
const (
	DefaultBatchRows     = 10000
	DefaultPipelineBytes = 8 << 20
)

// Stats are the applier's running totals, readable while it works.
type Stats struct {
	Txns, Inserts, Updates, Deletes, Truncates, Statements atomic.Int64
	// Replays counts set-based updates replayed row by row after a unique
	// violation that row order avoids.
	Replays atomic.Int64
	// Missing counts updates and deletes whose row was not found on the
	// target (the built-in subscription's update_missing / delete_missing).
	Missing atomic.Int64
	// Collapsed counts updates folded into an earlier update of the same
	// row in the same statement (see Applier.collapse).
	Collapsed atomic.Int64
	// Groups counts target transactions; Txns/Groups is the grouping factor.
	Groups atomic.Int64
}

// Absorb adds o's totals to s: the totals of a run's appliers carry on into
// the next run after a fault.
func (s *Stats) Absorb(o *Stats) {
	for _, p := range [][2]*atomic.Int64{{&s.Txns, &o.Txns}, {&s.Inserts, &o.Inserts}, {&s.Updates, &o.Updates}, {&s.Deletes, &o.Deletes},
		{&s.Truncates, &o.Truncates}, {&s.Statements, &o.Statements}, {&s.Replays, &o.Replays}, {&s.Missing, &o.Missing},
		{&s.Collapsed, &o.Collapsed}, {&s.Groups, &o.Groups}} {
		p[0].Add(p[1].Load())
	}
}

// Rows returns the number of row changes applied.
func (s *Stats) Rows() int64 { return s.Inserts.Load() + s.Updates.Load() + s.Deletes.Load() }

// Txn identifies the source transaction being applied, for progress and
// for errors.
type Txn struct {
	XID        parapply.XID
	CommitLSN  parapply.LSN
	CommitTime time.Time
}

// Applier owns one target connection and applies one transaction at a time.
// Not goroutine safe.
type Applier struct {
	cfg  Config
	conn *pgx.Conn
	// Warn reports a condition worth an operator's attention; it defaults
	// to doing nothing.
	Warn   func(string)
	tables map[uint32]*Table
	sql    map[string]string
	Stats  Stats
	// tallies counts changes per table; touched lists the tables with
	// changes in the open group.
	tallies *Tallies
	touched []*Table

	txn   Txn
	inTxn bool
	began bool
	grp   group
	ops   []op // queued, in order, for the next round trip
	// ra reads ahead (never without Config.Prefetch): the applier's own,
	// or one shared with other appliers (ShareReadAhead); ownRA says
	// whether this applier reports and closes it. cc is the target's
	// configuration.
	ra       *readAheads
	ownRA    bool
	cc       *pgx.ConnConfig
	qbytes   int
	inflight *inflight // round trip started by sendAsync
	failed   error     // a failed round trip's error, until rollback
	// Open runs, at most one per table, in the order they were opened;
	// cur is the one the change being added goes to.
	runs []*run
	cur  *run

	mask, keybuf, key2buf []byte
	cols, oldCols, all    []int // reused per change
	syncCommit            bool

	// synced holds, when set, the sync LSN of every table whose initial
	// copy is done, by qualified name; tables absent from it are skipped.
	synced map[string]parapply.LSN
	warned map[string]bool
	// Skipped counts changes skipped because the table's copy holds them
	// or the table is not copied yet.
	Skipped atomic.Int64
}

// group is the target transaction being built: one or more consecutive
// source transactions, committed together.
type group struct {
	open          bool
	txns, changes int
	bytes         int // parameter bytes of statements already queued or sent
	first, last   Txn
	end           parapply.LSN // end LSN of the last finished source transaction
	opened        time.Time
}

type op struct {
	sql  string
	what string // for errors: "update of public.t (300 rows)"
	rows int    // expected rows affected, -1 when not checked
	kind byte   // for statements built from a run: the run's kind
	// For statements built from a run: the table and, per parameter, the
	// published column it carries, so a failure can name the column.
	table *Table
	cols  []int
	args  []any
	// scan, when set, receives the single row the statement returns.
	scan []any
	// copy, when set, makes the statement a COPY FROM STDIN of these
	// bytes: it ends the pipelined batch before it (see exec).
	copy []byte
}

type run struct {
	cols     []int // published column carried by each parameter
	split    int   // cols[:split] locate rows (key or old image), cols[split:] carry values
	table    *Table
	kind     byte
	shape    []byte
	sql      string
	params   [][][]byte
	rows     int
	bytes    int
	keys     map[string]int // row index of each key's change; -1: not collapsible
	closed   bool
	fallback bool
	ahead    int // rows whose keys were offered to the prefetcher
}

// Open connects to the target and prepares the session like the built-in
// apply worker's: session_replication_role = replica, so triggers and
// foreign keys act as they do for replicated changes.
func Open(ctx context.Context, cfg Config) (*Applier, error) {
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.PipelineBytes <= 0 {
		cfg.PipelineBytes = DefaultPipelineBytes
	}
	if cfg.SynchronousCommit == "" {
		cfg.SynchronousCommit = "off"
	}
	cc, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("target DSN: %w", err)
	}
	if cfg.AppName != "" {
		cc.RuntimeParams["application_name"] = cfg.AppName
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the target (host %s port %d database %s user %s): %w", cc.Host, cc.Port, cc.Database, cc.User, err)
	}
	if cfg.Tallies == nil {
		cfg.Tallies = NewTallies()
	}
	a := &Applier{cfg: cfg, tallies: cfg.Tallies, conn: conn, tables: map[uint32]*Table{}, sql: map[string]string{}, Warn: func(string) {}, cc: cc}
	if cfg.Prefetch {
		n := cfg.PrefetchConns
		if n <= 0 {
			n = DefaultPrefetchConns
		}
		a.ra, a.ownRA = &readAheads{cc: cc, conns: n, warn: func(m string) { a.Warn(m) }}, true
	}
	registerTextArray(conn)
	a.syncCommit = cfg.SynchronousCommit != "off" && cfg.SynchronousCommit != "local"
	set := []struct{ name, value, hint string }{
		{"session_replication_role", "replica", "the target role must be a superuser, or on PostgreSQL 15+ be granted it: GRANT SET ON PARAMETER session_replication_role TO <role>"},
		{"synchronous_commit", cfg.SynchronousCommit, "use one of on, remote_apply, remote_write, local, off"},
		{"search_path", "pg_catalog", ""},
		{"datestyle", "ISO", ""},
		{"intervalstyle", "postgres", ""},
		{"extra_float_digits", "3", ""},
	}
	if cfg.LockTimeout != "" {
		set = append(set, struct{ name, value, hint string }{"lock_timeout", cfg.LockTimeout, "use a duration such as 10s"})
	}
	for _, s := range set {
		if _, err := conn.Exec(ctx, "SELECT pg_catalog.set_config($1, $2, false)", s.name, s.value); err != nil {
			a.Close(ctx)
			var pe *pgconn.PgError
			if s.hint != "" && errors.As(err, &pe) && (pe.Code == "42501" || pe.Code[:2] == "22") {
				return nil, fmt.Errorf("setting %s = %s on the target: %w; %s", s.name, s.value, err, s.hint)
			}
			return nil, fmt.Errorf("setting %s = %s on the target: %w", s.name, s.value, err)
		}
	}
	return a, nil
}

// Conn exposes the target connection for progress bookkeeping between
// transactions.
func (a *Applier) Conn() *pgx.Conn {
	a.wait()
	return a.conn
}

// SyncCommit reports whether target commits are durable when they return.
func (a *Applier) SyncCommit() bool { return a.syncCommit }

// Close closes the target connection; an open transaction is rolled back by
// the server.
func (a *Applier) Close(ctx context.Context) error {
	a.wait()
	if a.ownRA {
		a.ra.close(ctx)
	}
	return a.conn.Close(ctx)
}

// Prefetched reports the rows read ahead and those dropped while the
// prefetcher was busy, and the error that stopped it, if any (for an
// applier sharing another's prefetcher: nothing, that one reports them).
func (a *Applier) Prefetched() (rows, dropped int64, err error) {
	if !a.ownRA {
		return 0, 0, nil
	}
	return a.ra.counts()
}

// ShareReadAhead makes a read ahead on from's prefetch connections instead
// of opening its own: workers share one prefetcher, so that its
// connections stay few however many workers there are.
func (a *Applier) ShareReadAhead(from *Applier) {
	if !a.cfg.Prefetch || from.ra == nil {
		return
	}
	a.ra, a.ownRA = from.ra, false
}

// readAhead offers the keys of r's rows not offered yet to the prefetcher:
// a chunk at a time while the run fills, and what is left when it becomes a
// statement (final), unless that is a handful of rows.
func (a *Applier) readAhead(r *run, final bool) {
	if !a.cfg.Prefetch || !r.table.Large {
		return
	}
	if r.kind != 'U' && r.kind != 'D' && (r.kind != 'I' || len(r.table.Probes) == 0) {
		return
	}
	n := r.rows - r.ahead
	if n < prefetchChunk && (!final || n < prefetchChunk/8) {
		return
	}
	pf := a.ra.get()
	if pf == nil {
		return
	}
	if r.table.prefetchSQL == "" {
		r.table.prefetchSQL = PrefetchSQL(r.table)
	}
	// In pieces, so that the prefetch connections read them side by side.
	piece := prefetchChunk
	if a.cfg.PrefetchPieces {
		piece = prefetchPiece
	}
	for from := r.ahead; from < r.rows; from += piece {
		to := min(from+piece, r.rows)
		if r.kind == 'I' {
			a.probe(pf, r, from, to)
			continue
		}
		args := make([]any, r.split)
		for i := range args {
			args[i] = encodeTextArray(r.params[i][from:to])
		}
		pf.offer(prefetchJob{sql: r.table.prefetchSQL, args: args, rows: to - from})
	}
	r.ahead = r.rows
}

// probe offers the values that rows from..to of an insert run take in
// each probed column (Table.Probes) to the prefetcher.
func (a *Applier) probe(pf *prefetcher, r *run, from, to int) {
	for _, c := range r.table.Probes {
		i := slices.Index(r.cols, c)
		if i < 0 {
			continue // not sent: the target's default goes in
		}
		sql, ok := r.table.probeSQL[c]
		if !ok {
			if r.table.probeSQL == nil {
				r.table.probeSQL = map[int]string{}
			}
			sql = InsertProbeSQL(r.table, c)
			r.table.probeSQL[c] = sql
		}
		pf.offer(prefetchJob{sql: sql, args: []any{encodeTextArray(r.params[i][from:to])}, rows: to - from})
	}
}

// Relation records (or replaces, on a schema change) the description of a
// published table and maps it onto the target table.
func (a *Applier) Relation(ctx context.Context, rel *parapply.Relation) error {
	if t, ok := a.tables[rel.ID]; ok && sameRelation(t.Rel, rel) {
		// Sent again unchanged (every streamed transaction describes its
		// tables; a kept stream connection has them loaded already).
		return nil
	}
	if r := a.openRun(rel.ID); r != nil {
		if err := a.flushRun(ctx, r); err != nil {
			return err
		}
	}
	if err := a.wait(); err != nil {
		return err
	}
	t, err := LoadTable(ctx, a.conn, rel)
	if errors.Is(err, errNoTable) && a.synced != nil {
		if _, ok := a.synced[rel.QualifiedName()]; !ok {
			// Not among the tables parapply copied (a partition that
			// another publication sends as itself, whose rows arrive
			// through its root's; or a table that joined a publication
			// since the start), and not on the target: its changes are
			// skipped, as those of any table not copied yet.
			t, err = &Table{Rel: rel, Name: rel.QualifiedName(), Full: rel.ReplicaIdentity == parapply.IdentityFull}, nil
		}
	}
	if err != nil {
		return err
	}
	if a.synced != nil {
		lsn, ok := a.synced[t.Name]
		t.SyncLSN, t.Unsynced = lsn, !ok
	}
	t.tally = a.tallies.For(rel.Namespace + "." + rel.Name)
	a.tables[rel.ID] = t
	for k := range a.sql {
		if binary.BigEndian.Uint32([]byte(k)) == rel.ID {
			delete(a.sql, k)
		}
	}
	return nil
}

// sameRelation reports whether two descriptions of a relation agree.
func sameRelation(a, b *parapply.Relation) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.ReplicaIdentity == b.ReplicaIdentity && slices.Equal(a.Columns, b.Columns)
}

func (a *Applier) table(id uint32) (*Table, error) {
	t, ok := a.tables[id]
	if !ok {
		return nil, fmt.Errorf("change for relation id %d before its relation message (protocol error)", id)
	}
	return t, nil
}

// SetSynced tells the applier which tables' initial copies are done and at
// which position, by qualified name.
func (a *Applier) SetSynced(synced map[string]parapply.LSN) {
	a.synced = synced
	for _, t := range a.tables {
		lsn, ok := synced[t.Name]
		t.SyncLSN, t.Unsynced = lsn, !ok
	}
}

// Synced returns what SetSynced was given, for the appliers of workers.
func (a *Applier) Synced() map[string]parapply.LSN { return a.synced }

// skip reports whether a change to t is already in t's initial copy, or t
// has not been copied yet.
func (a *Applier) skip(t *Table) bool {
	if t.Unsynced {
		if a.warned == nil {
			a.warned = map[string]bool{}
		}
		if !a.warned[t.Name] {
			a.warned[t.Name] = true
			a.Warn(fmt.Sprintf("changes to table %s are skipped: it is not among the published tables parapply copied at its start (if it joined a publication since, restart parapply to sync it; a partition whose root is published through the root is reached through its root)", t.Name))
		}
		a.Skipped.Add(1)
		return true
	}
	// The copy's snapshot holds what committed before its consistent
	// point; a commit record starting at that point is not in it (the
	// built-in applies such a transaction too: statelsn <= final LSN).
	if a.txn.CommitLSN < t.SyncLSN {
		a.Skipped.Add(1)
		return true
	}
	return false
}

// Begin starts applying a source transaction: in the open target
// transaction (a group) if there is one, else in a new one. Nothing is sent
// until the first statement is due.
func (a *Applier) Begin(txn Txn) {
	a.txn = txn
	a.inTxn = true
	if !a.grp.open {
		a.grp = group{open: true, first: txn, opened: time.Now()}
		a.began = false
	}
	a.grp.txns++
}

// Retitle names the source transaction being applied anew: a streamed
// transaction is applied before its commit LSN and time are known, and they
// must reach the progress row and the tracker.
func (a *Applier) Retitle(txn Txn) {
	if a.grp.first.XID == a.txn.XID {
		a.grp.first = txn
	}
	a.txn = txn
}

// Savepoint marks the point a later RollbackTo returns to: the start of a
// subtransaction of a streamed transaction applied as it arrives.
func (a *Applier) Savepoint(ctx context.Context, name string) error {
	if err := a.flushRuns(ctx); err != nil {
		return err
	}
	a.queue("SAVEPOINT "+parapply.QuoteIdent(name), "savepoint", -1)
	return nil
}

// RollbackTo undoes everything since Savepoint(name): the publisher rolled
// that subtransaction back.
func (a *Applier) RollbackTo(ctx context.Context, name string) error {
	if err := a.flushRuns(ctx); err != nil {
		return err
	}
	a.queue("ROLLBACK TO SAVEPOINT "+parapply.QuoteIdent(name), "rollback to savepoint", -1)
	return nil
}

// HasRelation reports whether the relation's description is loaded.
func (a *Applier) HasRelation(id uint32) bool {
	_, ok := a.tables[id]
	return ok
}

// End finishes the source transaction being applied; it stays in the open
// group until Commit.
func (a *Applier) End(endLSN parapply.LSN) {
	a.inTxn = false
	a.grp.last, a.grp.end = a.txn, endLSN
}

// InTxn reports whether a source transaction is being applied.
func (a *Applier) InTxn() bool { return a.inTxn }

// InGroup reports whether a target transaction is open (source
// transactions applied but not yet committed).
func (a *Applier) InGroup() bool { return a.grp.open }

// GroupSize reports the open group's source transactions, changes and
// parameter bytes, and how long it has been open.
func (a *Applier) GroupSize() (txns, changes, bytes int, age time.Duration) {
	if !a.grp.open {
		return 0, 0, 0, 0
	}
	return a.grp.txns, a.grp.changes, a.grp.bytes + a.runBytes(), time.Since(a.grp.opened)
}

func (a *Applier) queue(sql string, what string, rows int, args ...any) {
	if !a.began {
		a.ops = append(a.ops, op{sql: "BEGIN", what: "BEGIN", rows: -1})
		a.began = true
	}
	a.ops = append(a.ops, op{sql: sql, what: what, rows: rows, args: args})
}

func (a *Applier) describe() string {
	g := a.grp
	if !g.open || g.txns <= 1 || g.first.XID == a.txn.XID {
		return fmt.Sprintf("source transaction %d (commit %s)", a.txn.XID, a.txn.CommitLSN)
	}
	return fmt.Sprintf("source transactions %d to %d (commits %s to %s, applied as one group of %d; group_max_changes = 1 applies them one by one)",
		g.first.XID, a.txn.XID, g.first.CommitLSN, a.txn.CommitLSN, g.txns)
}

// send performs one round trip with everything queued, after the one in
// flight (if any) has finished.
func (a *Applier) send(ctx context.Context) error {
	if err := a.wait(); err != nil {
		return err
	}
	if len(a.ops) == 0 {
		return nil
	}
	ops := a.ops
	a.ops, a.qbytes = a.ops[:0:0], 0
	return a.exec(ctx, ops, a.describe())
}

// sendAsync starts a round trip with everything queued and returns at once,
// so that the next statements are built while the target executes these;
// their outcome is taken by the next wait (every send, and anything else
// that uses the connection, waits first). Within an open group only: the
// group's COMMIT is sent synchronously after them.
func (a *Applier) sendAsync(ctx context.Context, after func() error) error {
	if err := a.wait(); err != nil {
		return err
	}
	if len(a.ops) == 0 {
		return nil
	}
	ops := a.ops
	a.ops, a.qbytes = a.ops[:0:0], 0
	f := &inflight{done: make(chan struct{})}
	desc := a.describe()
	a.inflight = f
	go func() {
		f.err = a.exec(ctx, ops, desc)
		if f.err == nil && after != nil {
			f.err = after()
		}
		close(f.done)
	}()
	return nil
}

// inflight is a round trip started by sendAsync.
type inflight struct {
	done chan struct{}
	err  error
}

// wait waits for the round trip in flight and returns its error. An error
// stays until the group is rolled back: a statement that failed must never
// be followed by a COMMIT that the target would turn into a rollback.
func (a *Applier) wait() error {
	if f := a.inflight; f != nil {
		<-f.done
		a.inflight = nil
		if f.err != nil {
			a.failed = f.err
		}
	}
	return a.failed
}

// exec sends ops: one pipelined round trip, or one more for each COPY
// among them (a COPY cannot ride in a pipeline); desc names the source
// transactions for errors. After a failure nothing further is sent.
func (a *Applier) exec(ctx context.Context, ops []op, desc string) error {
	for len(ops) > 0 {
		if o := ops[0]; o.copy != nil {
			tag, err := a.conn.PgConn().CopyFrom(ctx, bytes.NewReader(o.copy), o.sql)
			if err != nil {
				return a.explain(ctx, o, err, desc)
			}
			a.done(o, tag)
			ops = ops[1:]
			continue
		}
		n := slices.IndexFunc(ops, func(o op) bool { return o.copy != nil })
		if n < 0 {
			n = len(ops)
		}
		if err := a.pipeline(ctx, ops[:n], desc); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// pipeline sends ops, none of them a COPY, as one pipelined batch.
func (a *Applier) pipeline(ctx context.Context, ops []op, desc string) error {
	batch := &pgx.Batch{}
	for _, o := range ops {
		batch.Queue(o.sql, o.args...)
	}
	br := a.conn.SendBatch(ctx, batch)
	for _, o := range ops {
		if o.scan != nil {
			if err := br.QueryRow().Scan(o.scan...); err != nil {
				br.Close()
				return fmt.Errorf("%s after %s: %w", o.what, desc, err)
			}
			continue
		}
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return a.explain(ctx, o, err, desc)
		}
		a.done(o, tag)
	}
	return br.Close()
}

// done counts a statement built from a run, and the rows it was expected to
// change but did not find.
func (a *Applier) done(o op, tag pgconn.CommandTag) {
	if o.table != nil {
		a.Stats.Statements.Add(1)
	}
	if o.rows >= 0 {
		if n := tag.RowsAffected(); n < int64(o.rows) {
			a.Stats.Missing.Add(int64(o.rows) - n)
			missing(o.table, o.kind, int64(o.rows)-n)
		}
	}
}

// sqlFor returns the statement for a run of one table, kind and column
// set, building it once.
func (a *Applier) sqlFor(r *run) string {
	key := make([]byte, 5, 5+len(r.shape))
	binary.BigEndian.PutUint32(key, r.table.Rel.ID)
	key[4] = r.kind
	key = append(key, r.shape...)
	if s, ok := a.sql[string(key)]; ok {
		return s
	}
	t, head, tail := r.table, r.cols[:r.split], r.cols[r.split:]
	var s string
	switch r.kind {
	case 'I':
		if len(tail) == 1 && tail[0] < 0 {
			tail = nil // a row with no column the target takes
		}
		s = InsertSQL(t, tail)
	case 'U':
		s = UpdateSQL(t, head, tail)
	case 'D':
		s = DeleteSQL(t, head)
	case 'F':
		s = UpdateFullSQL(t, head, tail)
	case 'X':
		s = DeleteFullSQL(t, head)
	}
	a.sql[string(key)] = s
	return s
}

// openRun returns the open run of the table with relation id rel, if any.
func (a *Applier) openRun(rel uint32) *run {
	if a.cur != nil && a.cur.table.Rel.ID == rel {
		return a.cur // the common case: the same table as the last change
	}
	for _, r := range a.runs {
		if r.table.Rel.ID == rel {
			return r
		}
	}
	return nil
}

// fits reports whether a change of this table and kind, whose parameters
// a.mask describes, can join r.
func (a *Applier) fits(r *run, t *Table, kind byte) bool {
	return r != nil && r.table == t && r.kind == kind && !r.closed && bytes.Equal(r.shape, a.mask) && r.rows < a.cfg.BatchRows
}

// startRun makes a.cur a run for a change of this table and kind whose
// parameters are the columns head then tail (a.mask describing them), and
// which touches none of keys: the table's open run when it can take the
// change, else a new one, after the table's open run has become a
// statement.
//
// Runs of different tables stay open side by side, so interleaved changes to
// several tables still become one statement per table: their statements may
// then run in another order than the changes arrived in, which no one can
// observe (the group commits at once, and session_replication_role = replica
// keeps foreign key checks out), unless a trigger fires on the target: a run
// of such a table is only ever open alone.
func (a *Applier) startRun(ctx context.Context, t *Table, kind byte, head, tail []int, keys ...[]byte) error {
	r := a.openRun(t.Rel.ID)
	if a.fits(r, t, kind) && !slices.ContainsFunc(keys, r.has) {
		a.cur = r
		return nil
	}
	if r != nil {
		if err := a.flushRun(ctx, r); err != nil {
			return err
		}
	}
	if len(a.runs) > 0 && (t.Triggers || a.runs[0].table.Triggers) {
		if err := a.flushRuns(ctx); err != nil {
			return err
		}
	}
	r = &run{table: t, kind: kind, split: len(head)}
	r.shape = append(r.shape, a.mask...)
	r.cols = append(append(make([]int, 0, len(head)+len(tail)), head...), tail...)
	r.sql = a.sqlFor(r)
	r.params = make([][][]byte, len(r.cols))
	r.fallback = t.ExtraUnique && (kind == 'U' || kind == 'F')
	a.runs = append(a.runs, r)
	a.cur = r
	return nil
}

// touch records keys the current run now touches, none of them
// collapsible.
func (r *run) touch(keys ...[]byte) {
	for _, k := range keys {
		r.mark(k, -1)
	}
}

// mark records that the run's row i changes the row key names; i < 0 when a
// later change of that row must not be collapsed into it.
func (r *run) mark(key []byte, i int) {
	if len(key) == 0 {
		return
	}
	if r.keys == nil {
		r.keys = map[string]int{}
	}
	r.keys[string(key)] = i
}

func (r *run) has(key []byte) bool {
	if len(key) == 0 {
		return false
	}
	_, ok := r.keys[string(key)]
	return ok
}

// collapse overwrites, in place, the values of an earlier update of the same
// row in the current run with those of a later one, when the result is
// provably the same as applying both: neither changes the key, both set the
// same columns, and no trigger on the target would see the difference. Not
// on tables with unique indexes beyond the key, whose row-by-row fallback
// needs every step.
func (a *Applier) collapse(t *Table, key []byte, new parapply.Tuple) bool {
	r := a.openRun(t.Rel.ID)
	if t.Triggers || t.ExtraUnique || !a.fits(r, t, 'U') {
		return false
	}
	i, ok := r.keys[string(key)]
	if !ok || i < 0 {
		return false
	}
	for j, c := range r.cols[r.split:] {
		p := r.params[r.split+j]
		r.bytes += len(new[c].Data) - len(p[i])
		p[i] = data(new[c])
	}
	a.Stats.Collapsed.Add(1)
	return true
}

// push appends the values of tup's columns cols to the run's parameters,
// starting at parameter off.
func (r *run) push(off int, tup parapply.Tuple, cols []int) {
	for i, c := range cols {
		r.params[off+i] = append(r.params[off+i], data(tup[c]))
		r.bytes += len(tup[c].Data)
	}
}

func appendKey(buf []byte, tup parapply.Tuple, cols []int) []byte {
	buf = buf[:0]
	for _, c := range cols {
		v := tup[c]
		buf = append(buf, v.Kind)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(v.Data)))
		buf = append(buf, v.Data...)
	}
	return buf
}

func data(v parapply.Value) []byte {
	if v.Kind == parapply.ValueNull {
		return nil
	}
	if v.Data == nil {
		return []byte{}
	}
	return v.Data
}

func checkTuple(t *Table, tup parapply.Tuple, what string) error {
	if len(tup) != len(t.Rel.Columns) {
		return fmt.Errorf("%s of %s carries %d columns, its relation message %d (protocol error)", what, t.Name, len(tup), len(t.Rel.Columns))
	}
	for i, v := range tup {
		if v.Kind == parapply.ValueBinary {
			return fmt.Errorf("%s of %s: column %s arrived in binary format, which this applier does not take; do not request binary", what, t.Name, t.Rel.Columns[i].Name)
		}
	}
	return nil
}

// present appends to mask one byte per column of tup (1 when it carries a
// value the target takes) and returns those columns' indexes in buf.
func present(t *Table, tup parapply.Tuple, skip []int, mask []byte, buf []int) ([]byte, []int) {
	buf = buf[:0]
	for i, v := range tup {
		if v.Kind != parapply.ValueUnchanged && t.Types[i] != "" && !slices.Contains(skip, i) {
			buf = append(buf, i)
			mask = append(mask, 1)
		} else {
			mask = append(mask, 0)
		}
	}
	return mask, buf
}

// change looks up the table of a row change and checks its tuples; it
// returns nil (and the error, if any) when the change is not to be applied
// (see skip), else counts it in the open group (Stats and the table's
// tally hear of it when the group commits).
func (a *Applier) change(rel uint32, what string, kind int, tups ...parapply.Tuple) (*Table, error) {
	t, err := a.table(rel)
	if err != nil {
		return nil, err
	}
	for _, tup := range tups {
		if err := checkTuple(t, tup, what); err != nil {
			return nil, err
		}
	}
	if a.skip(t) {
		return nil, nil
	}
	a.count(t, kind)
	a.grp.changes++
	return t, nil
}

// emptyRow stands for "no column" in an insert run whose rows carry no
// column the target takes: one NULL parameter per row counts them.
var emptyRow = []int{-1}

// Insert queues an INSERT of tup into relation rel.
func (a *Applier) Insert(ctx context.Context, rel uint32, tup parapply.Tuple) error {
	t, err := a.change(rel, "insert", tallyInsert, tup)
	if t == nil {
		return err
	}
	a.mask, a.cols = present(t, tup, nil, a.mask[:0], a.cols)
	if len(a.cols) == 0 {
		if err := a.startRun(ctx, t, 'I', nil, emptyRow); err != nil {
			return err
		}
		a.cur.params[0] = append(a.cur.params[0], nil)
	} else {
		if err := a.startRun(ctx, t, 'I', nil, a.cols); err != nil {
			return err
		}
		a.cur.push(0, tup, a.cur.cols)
	}
	a.cur.rows++
	return a.maybeFlush(ctx)
}

// Update queues an UPDATE. oldKind is 0 (key unchanged, no old image), 'K'
// (old key) or 'O' (old row, REPLICA IDENTITY FULL).
func (a *Applier) Update(ctx context.Context, rel uint32, oldKind byte, old, new parapply.Tuple) error {
	tups := []parapply.Tuple{new, old}
	if oldKind == 0 {
		tups = tups[:1]
	}
	t, err := a.change(rel, "update", tallyUpdate, tups...)
	if t == nil {
		return err
	}
	if t.Full {
		if oldKind != 'O' {
			return fmt.Errorf("update of %s (REPLICA IDENTITY FULL) came without its old row (protocol error)", t.Name)
		}
		return a.full(ctx, t, 'F', old, new)
	}
	if len(t.Key) == 0 {
		return fmt.Errorf("update of %s: the table has no replica identity key on the publisher; set REPLICA IDENTITY there", t.Name)
	}
	// Without an old image the key is unchanged: locate by the new row's
	// key and leave the key columns out of SET.
	// Columns GENERATED ALWAYS AS IDENTITY on the target stay out of SET.
	keySrc, skip := new, t.keyAndIdentity
	if oldKind != 0 {
		keySrc, skip = old, t.AlwaysIdentity
		if err := checkIdentityKept(t, old, new); err != nil {
			return err
		}
	}
	a.mask, a.cols = present(t, new, skip, a.mask[:0], a.cols)
	if len(a.cols) == 0 {
		return nil
	}
	a.keybuf = appendKey(a.keybuf, keySrc, t.Key)
	a.key2buf = a.key2buf[:0]
	if oldKind != 0 {
		a.key2buf = appendKey(a.key2buf, new, t.Key)
	} else if a.collapse(t, a.keybuf, new) {
		return nil
	}
	if err := a.startRun(ctx, t, 'U', t.Key, a.cols, a.keybuf, a.key2buf); err != nil {
		return err
	}
	r := a.cur
	if oldKind == 0 {
		r.mark(a.keybuf, r.rows)
	} else {
		r.touch(a.keybuf, a.key2buf)
	}
	r.push(0, keySrc, t.Key)
	r.push(len(t.Key), new, a.cols)
	r.rows++
	a.readAhead(r, false)
	return a.maybeFlush(ctx)
}

// checkIdentityKept refuses an update that changes the value of a column
// that is GENERATED ALWAYS AS IDENTITY on the target, where the old image
// tells: PostgreSQL lets an UPDATE set such a column only to DEFAULT, and
// leaving the old value would leave a different row than the publisher's.
func checkIdentityKept(t *Table, old, new parapply.Tuple) error {
	for _, c := range t.AlwaysIdentity {
		if c < len(old) && c < len(new) && old[c].Kind == parapply.ValueText && new[c].Kind == parapply.ValueText && string(old[c].Data) != string(new[c].Data) {
			return fmt.Errorf("%w: an update changes column %s of %s from %s to %s, but the column is GENERATED ALWAYS AS IDENTITY on the target, which no UPDATE may set; make it GENERATED BY DEFAULT there (ALTER TABLE %s ALTER COLUMN %s SET GENERATED BY DEFAULT)",
				ErrSchema, colName(t, c), t.Name, old[c].Data, new[c].Data, t.Name, colName(t, c))
		}
	}
	return nil
}

// full queues an update ('F') or delete ('X') under REPLICA IDENTITY FULL.
// The key of a row is its whole old image; an update also touches its new
// image, which the next change of the row names as old.
func (a *Applier) full(ctx context.Context, t *Table, kind byte, old, new parapply.Tuple) error {
	var set []int
	a.mask = a.mask[:0]
	if kind == 'F' {
		if err := checkIdentityKept(t, old, new); err != nil {
			return err
		}
		a.mask, a.cols = present(t, new, t.AlwaysIdentity, a.mask, a.cols)
		if len(a.cols) == 0 {
			return nil
		}
		set = a.cols
	}
	a.mask, a.oldCols = present(t, old, nil, a.mask, a.oldCols)
	noCols := len(a.oldCols) == 0 // a table with no columns: any row will do
	if noCols {
		a.oldCols = append(a.oldCols, emptyRow...)
	}
	if len(a.all) != len(t.Rel.Columns) {
		a.all = a.all[:0]
		for i := range t.Rel.Columns {
			a.all = append(a.all, i)
		}
	}
	a.keybuf = appendKey(a.keybuf, old, a.all)
	if err := a.startRun(ctx, t, kind, a.oldCols, set, a.keybuf); err != nil {
		return err
	}
	r := a.cur
	r.touch(a.keybuf)
	if noCols {
		r.params[0] = append(r.params[0], nil)
	} else {
		r.push(0, old, a.oldCols)
	}
	r.push(len(a.oldCols), new, set)
	r.rows++
	if kind == 'F' {
		if slices.ContainsFunc(new, func(v parapply.Value) bool { return v.Kind == parapply.ValueUnchanged }) {
			// The next change of this row names an old image we cannot
			// spell out here: let it start a new statement.
			r.closed = true
		} else {
			a.keybuf = appendKey(a.keybuf, new, a.all)
			r.touch(a.keybuf)
		}
	}
	return a.maybeFlush(ctx)
}

// Delete queues a DELETE of the row old identifies.
func (a *Applier) Delete(ctx context.Context, rel uint32, oldKind byte, old parapply.Tuple) error {
	t, err := a.change(rel, "delete", tallyDelete, old)
	if t == nil {
		return err
	}
	if t.Full {
		return a.full(ctx, t, 'X', old, nil)
	}
	if len(t.Key) == 0 {
		return fmt.Errorf("delete from %s: the table has no replica identity key on the publisher; set REPLICA IDENTITY there", t.Name)
	}
	a.mask = a.mask[:0]
	a.keybuf = appendKey(a.keybuf, old, t.Key)
	if err := a.startRun(ctx, t, 'D', t.Key, nil, a.keybuf); err != nil {
		return err
	}
	r := a.cur
	r.touch(a.keybuf)
	r.push(0, old, t.Key)
	r.rows++
	a.readAhead(r, false)
	return a.maybeFlush(ctx)
}

// Truncate queues a TRUNCATE of the given relations with the publisher's
// options.
func (a *Applier) Truncate(ctx context.Context, rels []uint32, cascade, restart bool) error {
	if err := a.flushRuns(ctx); err != nil {
		return err
	}
	names := make([]string, 0, len(rels))
	for _, id := range rels {
		t, err := a.table(id)
		if err != nil {
			return err
		}
		if a.skip(t) {
			continue
		}
		names = append(names, t.Target())
		a.count(t, tallyTruncate)
	}
	if len(names) == 0 {
		return nil
	}
	a.queue(TruncateSQL(names, cascade, restart), "truncate", -1)
	a.Stats.Truncates.Add(1)
	return nil
}

// runBytes is the parameter bytes held in open runs.
func (a *Applier) runBytes() int {
	n := 0
	for _, r := range a.runs {
		n += r.bytes
	}
	return n
}

func (a *Applier) maybeFlush(ctx context.Context) error {
	if a.cur.rows >= a.cfg.BatchRows {
		if err := a.flushRun(ctx, a.cur); err != nil {
			return err
		}
	}
	if a.qbytes+a.runBytes() >= a.cfg.PipelineBytes {
		if err := a.flushRuns(ctx); err != nil {
			return err
		}
		return a.sendAsync(ctx, nil)
	}
	return nil
}

var kindNames = map[byte]string{'I': "insert", 'U': "update", 'F': "update", 'D': "delete", 'X': "delete"}

// flushRuns turns every open run into a queued statement, in the order they
// were opened.
func (a *Applier) flushRuns(ctx context.Context) error {
	for len(a.runs) > 0 {
		if err := a.flushRun(ctx, a.runs[0]); err != nil {
			return err
		}
	}
	return nil
}

// flushRun turns the open run r into a queued statement.
func (a *Applier) flushRun(ctx context.Context, r *run) error {
	if i := slices.Index(a.runs, r); i >= 0 {
		a.runs = slices.Delete(a.runs, i, i+1)
	}
	if a.cur == r {
		a.cur = nil
	}
	if r.rows == 0 {
		return nil
	}
	a.readAhead(r, true)
	what := fmt.Sprintf("%s of %d rows in %s", kindNames[r.kind], r.rows, r.table.Name)
	a.grp.bytes += r.bytes
	a.qbytes += r.bytes
	if r.kind == 'I' && r.rows >= copyMinRows && r.cols[0] >= 0 && !r.table.NoCopy {
		a.queueRun(r, CopySQL(r.table, r.cols), what, -1).copy = encodeCopyText(r.params, r.rows, r.bytes)
		return nil
	}
	args := make([]any, len(r.params))
	for i, p := range r.params {
		args[i] = encodeTextArray(p)
	}
	expect := r.rows
	if r.kind == 'I' {
		expect = -1
	}
	if r.fallback {
		return a.withFallback(ctx, r, args, what, expect)
	}
	a.queueRun(r, r.sql, what, expect, args...)
	return nil
}

// queueRun queues a statement built from run r and returns its op, which
// names r's table and columns for errors.
func (a *Applier) queueRun(r *run, sql, what string, expect int, args ...any) *op {
	a.queue(sql, what, expect, args...)
	o := &a.ops[len(a.ops)-1]
	o.table, o.cols, o.kind = r.table, r.cols, r.kind
	return o
}

// withFallback runs an UPDATE on a table with unique indexes beyond its key
// under a savepoint: if the set-based statement hits a unique violation that
// row order would have avoided, it is rolled back and replayed row by row.
func (a *Applier) withFallback(ctx context.Context, r *run, args []any, what string, expect int) error {
	a.queue("SAVEPOINT parapply_run", "savepoint", -1)
	a.queueRun(r, r.sql, what, expect, args...)
	a.queue("RELEASE SAVEPOINT parapply_run", "savepoint", -1)
	err := a.send(ctx)
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "23505" || r.rows == 1 {
		return err
	}
	a.Stats.Replays.Add(1)
	if _, rerr := a.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT parapply_run"); rerr != nil {
		// The violation came from a statement queued before the
		// savepoint (which then never existed): that error is the one
		// to report, and to retry on.
		return err
	}
	for i := 0; i < r.rows; i++ {
		one := make([]any, len(r.params))
		for j, p := range r.params {
			one[j] = encodeTextArray(p[i : i+1])
		}
		a.queueRun(r, r.sql, fmt.Sprintf("%s of 1 row in %s", kindNames[r.kind], r.table.Name), 1, one...)
	}
	a.queue("RELEASE SAVEPOINT parapply_run", "savepoint", -1)
	return a.send(ctx)
}

// Commit commits the open group: its last statements, the progress row
// (naming the group's last source transaction) and COMMIT go in one round
// trip. It returns what the Tracker needs to know of the commit.
func (a *Applier) Commit(ctx context.Context) (Committed, error) {
	var c Committed
	err := a.end(ctx, &c, "")
	return c, err
}

// end queues the end of the group (see queueEnd), waits for it and fills
// c. If the round trip fails, the group may have ended all the same (the
// connection died after COMMIT reached the target): the run then ends, and
// the next one reads the progress row to know.
func (a *Applier) end(ctx context.Context, c *Committed, gid string) error {
	if err := a.queueEnd(ctx, c, gid); err != nil {
		return err
	}
	if err := a.send(ctx); err != nil {
		a.rollback(ctx)
		return err
	}
	return c.finish(a)
}

// Committed describes a committed group, for the Tracker.
type Committed struct {
	End        parapply.LSN // end LSN of the group's last source transaction
	CommitTime time.Time    // its source commit time
	// Local and Flushed are the target's WAL insert position after the
	// commit and its flush position.
	Local, Flushed parapply.LSN
	// Durable is true when the commit was synchronous: it is on the
	// target's disk, and so is everything committed before it.
	Durable bool
	txns    int
	ins, fl string
	tallies []pendingTally
}

func (c *Committed) finish(a *Applier) error {
	a.Stats.Txns.Add(int64(c.txns))
	a.Stats.Groups.Add(1)
	// The group's rows, counted per table as they were queued.
	for _, t := range c.tallies {
		t.addTo()
		a.Stats.Inserts.Add(t.n[tallyInsert])
		a.Stats.Updates.Add(t.n[tallyUpdate])
		a.Stats.Deletes.Add(t.n[tallyDelete])
	}
	var err error
	c.Local, c.Flushed, err = parseWALPositions(c.ins, c.fl)
	return err
}

// CommitAsync queues the open group's commit like Commit, but returns once
// it is sent: the next group is built while the target commits this one,
// and done receives the positions (from another goroutine) once it has. A
// failure is returned by the next call that uses the connection. Until
// then Busy reports true.
func (a *Applier) CommitAsync(ctx context.Context, done func(Committed)) error {
	c := &Committed{}
	if err := a.queueEnd(ctx, c, ""); err != nil {
		return err
	}
	return a.sendAsync(ctx, func() error {
		if err := c.finish(a); err != nil {
			return err
		}
		done(*c)
		return nil
	})
}

// PrepareTransaction ends the open group, which holds one source
// transaction prepared for two-phase commit, with PREPARE TRANSACTION gid.
func (a *Applier) PrepareTransaction(ctx context.Context, gid string) (Committed, error) {
	var c Committed
	err := a.end(ctx, &c, gid)
	return c, err
}

// FinishPrepared commits (or rolls back) the prepared transaction gid; a
// commit records txn, ending at end, in the progress row. A gid the target no
// longer has was finished before a restart: a commit is then checked
// against parapply.prepared (its row exists only if the prepared
// transaction committed); a rollback has nothing left to do.
func (a *Applier) FinishPrepared(ctx context.Context, gid string, commit bool, txn Txn, end parapply.LSN) (Committed, error) {
	var c Committed
	if err := a.wait(); err != nil {
		return c, err
	}
	verb := "ROLLBACK PREPARED "
	if commit {
		verb = "COMMIT PREPARED "
	}
	if _, err := a.conn.Exec(ctx, verb+parapply.QuoteLiteral(gid)); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42704" {
			return c, fmt.Errorf("%sof source transaction %d on the target: %w", verb, txn.XID, err)
		}
		if commit {
			done, err := progress.PreparedDone(ctx, a.conn, a.cfg.Slot, gid)
			if err != nil {
				return c, err
			}
			if !done {
				return c, fmt.Errorf("source transaction %d (%s) is to be committed, but the target holds no prepared transaction %s and never committed it: it was lost (was it rolled back by hand with ROLLBACK PREPARED?); re-sync the target", txn.XID, txn.CommitLSN, gid)
			}
		}
	}
	if !commit {
		// Nothing committed: the progress row stays as it is.
		return c, nil
	}
	a.Begin(txn)
	a.End(end)
	a.queueProgress(progress.ForgetPrepared(a.cfg.Slot, gid), "forgetting the prepared transaction")
	err := a.end(ctx, &c, "")
	return c, err
}

// Wait waits for the round trip in flight, if any, and returns its error.
func (a *Applier) Wait() error { return a.wait() }

// Busy reports whether a round trip is still in flight, and the error of
// one that has finished (taking it, as Wait does).
func (a *Applier) Busy() (bool, error) {
	f := a.inflight
	if f == nil {
		return false, a.failed
	}
	select {
	case <-f.done:
		return false, a.wait()
	default:
		return true, nil
	}
}

// queueProgress queues a statement of package progress.
func (a *Applier) queueProgress(st progress.Statement, what string) {
	a.queue(st.SQL, what, -1, st.Args...)
}

// queueEnd queues the group's last statements and its end: the progress
// row and COMMIT, or, with a gid, a row of parapply.prepared and PREPARE
// TRANSACTION (the progress row is left alone: its lock would be held until
// COMMIT PREPARED); then the WAL positions. It closes the group.
func (a *Applier) queueEnd(ctx context.Context, c *Committed, gid string) error {
	g := a.grp
	if !g.open || a.inTxn {
		return fmt.Errorf("commit without a finished source transaction (internal error)")
	}
	if err := a.flushRuns(ctx); err != nil {
		a.rollback(ctx)
		return err
	}
	if gid != "" {
		a.queueProgress(progress.RecordPrepared(a.cfg.Slot, gid, g.last.XID, g.last.CommitLSN, g.end), "recording the prepared transaction")
		a.ops = append(a.ops, op{sql: "PREPARE TRANSACTION " + parapply.QuoteLiteral(gid), what: "PREPARE TRANSACTION", rows: -1})
		c.Durable = true // a PREPARE is flushed before it returns
	} else {
		if a.cfg.AheadOfOrder {
			a.queueProgress(progress.RecordApplied(a.cfg.Slot, g.first.CommitLSN, g.last.CommitLSN, g.end), "recording the applied transactions")
		} else {
			a.queueProgress(progress.Update(a.cfg.Slot, g.last.CommitLSN, g.end, g.last.XID, g.last.CommitTime), "progress update")
		}
		c.Durable = a.syncCommit
		if !c.Durable && a.cfg.SyncStandby != nil && a.cfg.SyncStandby.Load() {
			// The publisher waits for this commit: flush it now rather
			// than when the target's WAL writer gets to it.
			a.queue("SET LOCAL synchronous_commit = on", "synchronous commit", -1)
			c.Durable = true
		}
		a.ops = append(a.ops, op{sql: "COMMIT", what: "COMMIT", rows: -1})
	}
	// The WAL positions ride in the same round trip, right after COMMIT.
	a.ops = append(a.ops, op{sql: walPositionsSQL, what: "reading the target's WAL position", scan: []any{&c.ins, &c.fl}})
	c.End, c.CommitTime, c.txns = g.end, g.last.CommitTime, g.txns
	c.tallies = a.takeCounts()
	a.grp.open = false // the next Begin opens a new group, with its own BEGIN
	return nil
}

const walPositionsSQL = "SELECT pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.pg_current_wal_flush_lsn()::text"

func parseWALPositions(i, f string) (insert, flush parapply.LSN, err error) {
	if insert, err = parapply.ParseLSN(i); err != nil {
		return 0, 0, err
	}
	flush, err = parapply.ParseLSN(f)
	return insert, flush, err
}

// WALPositions reads the target's WAL insert and flush positions.
func (a *Applier) WALPositions(ctx context.Context) (insert, flush parapply.LSN, err error) {
	var i, f string
	if err := a.wait(); err != nil {
		return 0, 0, err
	}
	if err := a.conn.QueryRow(ctx, walPositionsSQL).Scan(&i, &f); err != nil {
		return 0, 0, fmt.Errorf("reading the target's WAL position: %w", err)
	}
	return parseWALPositions(i, f)
}

func (a *Applier) rollback(ctx context.Context) {
	a.wait()
	a.failed = nil
	a.ops, a.qbytes = nil, 0
	a.runs, a.cur = nil, nil
	a.takeCounts()
	if !a.conn.IsClosed() {
		// Also after a failed COMMIT round trip: the server may be left
		// in an aborted transaction block. Outside a transaction,
		// ROLLBACK only warns.
		_, _ = a.conn.Exec(ctx, "ROLLBACK")
	}
	a.began, a.inTxn, a.grp = false, false, group{}
}

// Abort abandons the transaction being applied.
func (a *Applier) Abort(ctx context.Context) { a.rollback(ctx) }

// explain turns a failed statement into an error naming the source
// transaction, the table and, for a value the target cannot take, the column.
func (a *Applier) explain(ctx context.Context, o op, err error, desc string) error {
	var pe *pgconn.PgError
	col := ""
	if o.table != nil && errors.As(err, &pe) && (pe.Code[:2] == "22" || pe.Code == "23502" || pe.Code == "23514") && !a.conn.IsClosed() {
		// Roll back, then cast each parameter on its own to find the column.
		_, _ = a.conn.Exec(ctx, "ROLLBACK")
		for i, c := range o.cols {
			if pe.ColumnName != "" || i >= len(o.args) || c < 0 {
				break
			}
			q := "SELECT u.v::" + o.table.Types[c] + " FROM unnest($1::text[]) AS u(v)"
			if _, cerr := a.conn.Exec(ctx, q, o.args[i]); cerr != nil {
				col = fmt.Sprintf(" column %s (%s on the target):", parapply.QuoteIdent(o.table.Rel.Columns[c].Name), o.table.Types[c])
				break
			}
		}
		if pe.ColumnName != "" {
			col = fmt.Sprintf(" column %s:", parapply.QuoteIdent(pe.ColumnName))
		}
		if o.copy != nil && pe.Where != "" {
			col = " " + pe.Where + ":" // names the column and its value
		}
		return fmt.Errorf("applying %s of %s:%s %w%s; the target's column types must accept the publisher's values (nothing of this transaction was applied)", o.what, desc, col, err, detail(err))
	}
	return fmt.Errorf("applying %s of %s: %w%s", o.what, desc, err, detail(err))
}

// detail returns the server's DETAIL of a failed statement, which names the
// key involved in a constraint violation ("Key (id)=(7) already exists.").
func detail(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Detail != "" {
		return " (" + strings.TrimSuffix(pe.Detail, ".") + ")"
	}
	return ""
}

// RowKeys returns the scheduling keys of a change to relation rel, from its
// old and new images (nil when the change has none), and whether the change
// must be applied alone (a barrier). A row is named by its table and replica
// identity value, old and new; a value the new image takes in a unique index
// beyond the key is named by the index and the value. A freed value (the old
// image carries only the key) has no key: a later transaction that takes it
// either waits on the target for the one that freed it, or meets a unique
// violation and is tried again after every earlier transaction has
// committed. A table whose rows cannot be told apart by identity (REPLICA
// IDENTITY FULL or no key) or whose unique values cannot be read from a
// change is named as a whole; a table with a trigger that fires on the
// target is a barrier, since the trigger may read anything.
func (a *Applier) RowKeys(rel uint32, keys []schedule.Key, old, new parapply.Tuple) ([]schedule.Key, bool, error) {
	t, err := a.table(rel)
	if err != nil {
		return keys, false, err
	}
	if t.Triggers {
		return keys, true, nil
	}
	if t.Full || len(t.Key) == 0 || t.WholeTable {
		return append(keys, schedule.MakeKey(t.Name)), false, nil
	}
	for _, tup := range [2]parapply.Tuple{old, new} {
		if tup == nil {
			continue
		}
		if len(tup) != len(t.Rel.Columns) {
			return keys, false, fmt.Errorf("change of %s carries %d columns, its relation message %d (protocol error)", t.Name, len(tup), len(t.Rel.Columns))
		}
		a.keybuf = appendKey(a.keybuf, tup, t.Key)
		keys = append(keys, schedule.MakeKey(t.Name, a.keybuf))
	}
	if new == nil {
		return keys, false, nil
	}
	for _, u := range t.Uniques {
		if !takesValue(new, u) {
			continue
		}
		a.keybuf = appendKey(a.keybuf, new, u.Cols)
		keys = append(keys, schedule.MakeKey(u.Name, a.keybuf))
	}
	return keys, false, nil
}

// takesValue reports whether a new image holds a value of unique index u
// that another row could conflict with: every column known (an unchanged
// TOASTed value is the row's own already) and, unless NULLs are equal in
// the index, none NULL.
func takesValue(tup parapply.Tuple, u UniqueIndex) bool {
	for _, c := range u.Cols {
		switch tup[c].Kind {
		case parapply.ValueUnchanged:
			return false
		case parapply.ValueNull:
			if !u.NullsEqual {
				return false
			}
		}
	}
	return true
}

// Prepare sends every statement of the open group, so that only the
// progress row and COMMIT are left for Commit.
func (a *Applier) Prepare(ctx context.Context) error {
	if err := a.flushRuns(ctx); err != nil {
		a.rollback(ctx)
		return err
	}
	if err := a.send(ctx); err != nil {
		a.rollback(ctx)
		return err
	}
	return nil
}

// Closed reports whether the target connection is gone, without waiting
// for statements in flight.
func (a *Applier) Closed() bool { return a.conn.IsClosed() }
