package apply

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/citus"
	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/targetdb"
)

// Config shapes a target connection.
type Config struct {
	DSN string
	// AppName is the connection's application_name on the target.
	AppName string
	// Slot names the progress row this applier writes.
	Slot string
	// SkipCommand is the command line, up to its --lsn, that an error
	// names to have parapply pass over a source transaction: parapply skip
	// with the connection flags the run was started with (no password), so
	// that it runs as printed. Empty: parapply skip --slot Slot.
	SkipCommand string
	// Origin names the replication origin the session commits under (see
	// SetupOrigin; its caller sets it up once the slot is claimed).
	Origin string
	// SynchronousCommit is the target session's synchronous_commit; off
	// (the default, as for built-in subscriptions) is safe because the
	// publisher is only told positions the target has flushed.
	SynchronousCommit SynchronousCommit
	// BinaryValues says the stream carries tuple data in binary (pgoutput's
	// binary option): every published column's values then go to the
	// target as they came (see textarray.go); a table one of whose columns
	// cannot take them stops the run with ErrBinaryUnfit.
	BinaryValues bool
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
	// Detection, when set, detects and resolves conflicts (see
	// resolve.go); SetDetection sets it on an applier already open.
	Detection *Detection
	// PrefetchPieces splits the keys offered at once into pieces of
	// prefetchPiece, so that a worker's short runs are read on every
	// prefetch connection; the single applier's long runs are offered in
	// chunks that spread by themselves.
	PrefetchPieces bool
	// HoldMissing keeps the changes of a table the target lacks until the
	// source transaction ends, in case a DDL later in it creates the table
	// (ddl = apply: CREATE TABLE AS sends its rows before its definition);
	// see hold.
	HoldMissing bool
	// Tracer, if set, is told every statement the session runs (pgx's
	// tracer): how a caller follows what parapply does on the target (the
	// test that a run's setup enters each package once, in order, does).
	Tracer pgx.QueryTracer
}

// Skip is the command that has parapply pass over the source transaction
// committed at lsn (only its DDL statements with ddlOnly), as errors print
// it.
func (c Config) Skip(lsn parapply.LSN, ddlOnly bool) string {
	cmd := c.SkipCommand
	if cmd == "" {
		cmd = "parapply skip --slot " + c.Slot
	}
	cmd += " --lsn " + lsn.String()
	if ddlOnly {
		cmd += " --ddl"
	}
	return cmd
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
	// row in the same statement (see batcher.collapse).
	Collapsed atomic.Int64
	// ConflictReplays counts target transactions applied again with
	// resolving statements after a conflict; Conflicts, the conflicts
	// resolved in committed ones.
	ConflictReplays, Conflicts atomic.Int64
	// Groups counts target transactions; Txns/Groups is the grouping factor.
	Groups atomic.Int64
	// Executed counts the rows that statements changed as they ran,
	// committed or not: the applier's pace, smooth where commits of large
	// groups come in lumps (workers = auto compares it before and after
	// a move to the workers).
	Executed atomic.Int64
	// PrefetchWait is the time (ns) statements waited for their rows to
	// be read ahead (see readAhead.await).
	PrefetchWait atomic.Int64
}

// Absorb adds o's totals to s: the totals of a run's appliers carry on into
// the next run after a fault. It adds every field, so that a total added to
// Stats cannot be left out; every field is an atomic.Int64 (TestAbsorb).
func (s *Stats) Absorb(o *Stats) {
	sv, ov := reflect.ValueOf(s).Elem(), reflect.ValueOf(o).Elem()
	for i := range sv.NumField() {
		total := sv.Field(i).Addr().Interface().(*atomic.Int64)
		total.Add(ov.Field(i).Addr().Interface().(*atomic.Int64).Load())
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
	// Origin is the replication origin the publisher received the
	// transaction from ("" when it was made there), for the conflict log.
	Origin string
	// Failed, when set, is the error an earlier run met applying this
	// transaction (on_error = skip_transaction): none of its changes is
	// applied; each is written to parapply.conflicts instead, in the
	// target transaction that records it as done.
	Failed string
	// Skip: parapply skip asked to skip this transaction; the loop drops
	// its changes, and the target transaction that commits it marks the
	// request done (as it does for Failed).
	Skip bool
	// SkipDDL: parapply skip --ddl asked to skip only the DDL statements
	// of this transaction (run on the target by hand); its row changes
	// are applied.
	SkipDDL bool
}

// Applier owns one target connection and applies one transaction at a time.
// Not goroutine safe.
//
// It is the builder (the open group, its runs and the statements queued
// for the next round trip) and three parts, each with the fields it alone
// writes: sender (the session's round trips; sender.go, pipeline.go),
// detector (conflict detection and resolution; detect.go, resolve.go) and
// readAhead (reading ahead on prefetch connections; prefetch.go). A round
// trip (roundtrip.go) goes through them in turn.
type Applier struct {
	cfg  Config
	conn *pgx.Conn
	// Warn reports a condition worth an operator's attention; it defaults
	// to doing nothing.
	Warn   func(string)
	tables map[uint32]*Table
	Stats  Stats
	// tallies counts changes per table; touched lists the tables with
	// changes in the open group.
	tallies *Tallies
	touched []*Table

	txn   Txn
	inTxn bool
	// origin is the replication origin the session commits under (see
	// SetupOrigin); "" before it is set up.
	origin string
	began  bool
	grp    group
	ops    []op // queued, in order, for the next round trip
	qbytes int
	qrows  int // rows of the statements in ops
	// batcher turns the open group's changes into runs.
	batcher    *batcher
	keybuf     []byte // RowKeys' buffer
	syncCommit bool
	// citus: the target is a Citus coordinator (see citus.go): each
	// transaction sets session_replication_role again with SET LOCAL,
	// which Citus carries to the workers' shards.
	citus bool

	// synced holds, when set, the sync LSN of every table whose initial
	// copy is done, by qualified name; tables absent from it are skipped.
	synced map[string]parapply.LSN
	warned map[string]bool
	// joined names the tables met that are not synced (see Joined);
	// held, the open source transaction's changes of tables the target
	// lacks (see HoldMissing).
	joined map[string]bool
	held   heldChanges
	// Skipped counts changes skipped because the table's copy holds them
	// or the table is not copied yet.
	Skipped atomic.Int64

	// MayResolve, when set, reports whether every source transaction
	// before the ones this applier holds has committed: only then is a
	// conflict the target's own (a worker running ahead may meet a row
	// an earlier transaction, in flight, changes), and resolved; else the
	// fast statement's error is returned, for the caller to try again.
	MayResolve func() bool

	sender    sender
	detector  detector
	readAhead readAhead
	// reread reads the target's description of tables again (reread.go).
	reread rereader
	// arrays recycles the open group's array parameters once it commits.
	arrays arena
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
	// skips are the commit LSNs of the group's transactions skipped at a
	// request of parapply.skip (Txn.Skip, Txn.Failed).
	skips []parapply.LSN
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
		cfg.SynchronousCommit = SyncCommitOff
	}
	cc, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, pgerr.Parse("target", err)
	}
	if cfg.AppName != "" {
		cc.RuntimeParams["application_name"] = cfg.AppName
	}
	if cfg.Tracer != nil {
		cc.Tracer = cfg.Tracer
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the target (host %s port %d database %s user %s): %w", cc.Host, cc.Port, cc.Database, cc.User, pgerr.Short(err))
	}
	a := newApplier(cfg, conn)
	if cfg.Prefetch {
		a.readAhead.open(cc, cfg.PrefetchConns, func(m string) { a.Warn(m) })
	}
	a.syncCommit = cfg.SynchronousCommit.durable()
	if err := targetdb.PrepareSession(ctx, conn, string(cfg.SynchronousCommit), cfg.LockTimeout); err != nil {
		a.Close(ctx)
		return nil, err
	}
	if a.citus, err = citus.Enabled(ctx, conn); err != nil {
		a.Close(ctx)
		return nil, err
	}
	return a, nil
}

// newApplier makes an Applier of conn and wires its parts; Open connects
// and sets the session up.
func newApplier(cfg Config, conn *pgx.Conn) *Applier {
	if cfg.Tallies == nil {
		cfg.Tallies = NewTallies()
	}
	a := &Applier{cfg: cfg, tallies: cfg.Tallies, conn: conn, tables: map[uint32]*Table{}, Warn: func(string) {}}
	a.batcher = newBatcher(cfg.BatchRows, &a.Stats.Collapsed)
	a.sender = sender{conn: conn, stats: &a.Stats}
	a.detector.config, a.detector.stats, a.detector.slot = cfg.Detection, &a.Stats, cfg.Slot
	a.readAhead.on, a.readAhead.pieces = cfg.Prefetch, cfg.PrefetchPieces
	return a
}

// Conn exposes the target connection for progress bookkeeping between
// transactions.
func (a *Applier) Conn() *pgx.Conn {
	_ = a.wait() // an error stays in the sender, for the commit
	return a.conn
}

// SyncCommit reports whether target commits are durable when they return.
func (a *Applier) SyncCommit() bool { return a.syncCommit }

// Close closes the target connection; an open transaction is rolled back by
// the server.
func (a *Applier) Close(ctx context.Context) error {
	_ = a.wait() // an error stays in the sender, for the commit
	a.readAhead.close(ctx)
	return a.conn.Close(ctx)
}

// Relation records (or replaces, on a schema change) the description of a
// published table and maps it onto the target table.
func (a *Applier) Relation(ctx context.Context, rel *parapply.Relation) error {
	if t, ok := a.tables[rel.ID]; ok && !t.reload && sameRelation(t.Rel, rel) {
		// Sent again unchanged (every streamed transaction describes its
		// tables; a kept stream connection has them loaded already).
		return nil
	}
	a.batcher.forget(rel.ID)
	if err := a.queueReady(ctx); err != nil {
		return err
	}
	if err := a.wait(); err != nil {
		return err
	}
	t, err := a.loadTable(ctx, a.conn, rel, nil)
	if errors.Is(err, errNoTable) && a.synced != nil {
		if _, ok := a.synced[rel.QualifiedName()]; !ok {
			// Not among the tables parapply copied (a partition that
			// another publication sends as itself, whose rows arrive
			// through its root's; or a table that joined a publication
			// since the start), and not on the target: its changes are
			// skipped, as those of any table not copied yet.
			t, err = &Table{Rel: rel, Name: rel.QualifiedName(), Full: rel.ReplicaIdentity == parapply.IdentityFull,
				binaryValues: a.cfg.BinaryValues, missing: true}, nil
		}
	}
	if err != nil {
		return err
	}
	tallied := parapply.TableName(rel.Namespace, rel.Name)
	if a.synced != nil {
		lsn, ok := a.synced[t.Name]
		t.SyncLSN, t.Unsynced = lsn, !ok
		if !ok {
			a.noteJoined(t.Name)
			if !t.missing {
				tallied = a.publishedAs(ctx, rel, tallied)
			}
		}
	}
	t.tally = a.tallies.For(tallied)
	a.tables[rel.ID] = t
	a.readAhead.noteTable(t)
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

// Reload has every table loaded so far loaded again at its next relation
// message: a DDL applied on another connection changed the target.
func (a *Applier) Reload() {
	for _, t := range a.tables {
		t.reload = true
	}
}

// Synced returns what SetSynced was given, for the appliers of workers.
func (a *Applier) Synced() map[string]parapply.LSN { return a.synced }

// skip reports whether a change to t is already in t's initial copy, or t
// has not been copied yet.
func (a *Applier) skip(t *Table) bool {
	if t.Unsynced {
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

// UseBinaryValues says whether the stream carries values in binary (see
// Config.BinaryValues); it is decided once the applier is open, before the
// first relation reaches it.
func (a *Applier) UseBinaryValues(on bool) { a.cfg.BinaryValues = on }

// Begin starts applying a source transaction: in the open target
// transaction (a group) if there is one, else in a new one. Nothing is sent
// until the first statement is due.
func (a *Applier) Begin(txn Txn) {
	a.txn = txn
	a.inTxn = true
	if !a.grp.open {
		a.grp = group{open: true, first: txn, opened: time.Now()}
		a.began = false
		a.takePending()
	}
	a.grp.txns++
	if txn.Skip || txn.SkipDDL || txn.Failed != "" {
		a.grp.skips = append(a.grp.skips, txn.CommitLSN)
	}
}

// Retitle names the source transaction being applied anew: a streamed
// transaction is applied before its commit LSN and time are known, and they
// must reach the progress row and the tracker (and, with conflict
// detection, the rows its statements would log).
func (a *Applier) Retitle(txn Txn) {
	if a.detector.config != nil {
		_ = a.wait() // an error stays in the sender, for the commit
		if len(a.detector.found) > 0 && a.txn.XID == txn.XID && a.txn.CommitLSN != txn.CommitLSN {
			// Conflicts already logged name the stand-in commit.
			a.queue(`UPDATE parapply.conflicts SET commit_lsn = $1::text::pg_lsn, remote_commit_time = $2
				WHERE source_xid = $3 AND slot_name = $4 AND commit_lsn = $5::text::pg_lsn`,
				"naming the commit of a streamed transaction's logged conflicts", -1,
				txn.CommitLSN.String(), txn.CommitTime, int64(txn.XID), a.cfg.Slot, a.txn.CommitLSN.String())
		}
		a.batcher.retitle(txn)
		for _, o := range a.detector.keep.ops {
			if o.run != nil {
				o.run.retitle(txn)
			}
		}
		for _, o := range a.ops {
			if o.run != nil {
				o.run.retitle(txn)
			}
		}
	}
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
	a.dropHeld()
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
	return a.grp.txns, a.grp.changes, a.grp.bytes + a.batcher.bytes(), time.Since(a.grp.opened)
}
