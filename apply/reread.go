package apply

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
)

// What an applier knows of a target table (Table: its triggers, unique
// indexes, columns, constraints, replica identity) is read when the
// table's first relation message arrives, and again after a DDL; a DBA may
// change any of it on the target while parapply runs, and no relation
// message says so. So it is read again:
//
//   - at every outcome it decides on: when a statement met a conflict
//     (roundTrip, before the group is applied again with resolving
//     statements), and when one changed fewer rows than it was sent for
//     (settle, before they are counted missing). A change of the
//     description there (a BEFORE trigger that suppresses changes,
//     created since) makes the replay's statements be built from the new
//     one, and the rows a trigger suppressed are no conflict and not
//     missing, whenever the trigger was created;
//   - on a schedule, between groups (RefreshIfDue, every rereadEvery):
//     one query of a fingerprint of the catalog rows each table's
//     description is read from (catalogSumSQL), and the whole description
//     read again only for the tables whose fingerprint changed.
//
// Statements are built from the description only; the statements an
// outcome as expected takes are not changed, nor any round trip added to
// them.

// rereadEvery is how often an applier compares the target's catalog with
// what it knows of its tables, between groups.
const rereadEvery = 10 * time.Second

// catalogSumSQL returns, per table OID of $1, a fingerprint of the catalog
// rows its description (LoadTable) is read from, over its partitions too:
// the table's pg_class row, its columns, triggers, indexes, constraints,
// rules and defaults. Each is read by an index on the table's OID.
const catalogSumSQL = `SELECT o.oid, pg_catalog.md5(pg_catalog.concat_ws('|',
	(SELECT pg_catalog.string_agg(pg_catalog.concat_ws(',', c.oid, c.relname, c.relnamespace, c.relkind, c.relreplident, c.relrowsecurity,
		c.relforcerowsecurity, c.relhasrules, c.relchecks, c.relispartition), ';' ORDER BY c.oid)
		FROM pg_catalog.pg_class c WHERE c.oid = ANY (p.r)),
	(SELECT pg_catalog.string_agg(pg_catalog.concat_ws(',', a.attrelid, a.attnum, a.attname, a.atttypid, a.atttypmod, a.attnotnull,
		a.attisdropped, a.attidentity, a.attgenerated, a.attcollation), ';' ORDER BY a.attrelid, a.attnum)
		FROM pg_catalog.pg_attribute a WHERE a.attrelid = ANY (p.r) AND a.attnum > 0),
	(SELECT pg_catalog.string_agg(pg_catalog.concat_ws(',', g.oid, g.tgname, g.tgtype, g.tgenabled, g.tgisinternal), ';' ORDER BY g.oid)
		FROM pg_catalog.pg_trigger g WHERE g.tgrelid = ANY (p.r)),
	(SELECT pg_catalog.string_agg(pg_catalog.concat_ws(',', i.indexrelid, i.indisunique, i.indisvalid, i.indisready, i.indnkeyatts,
		i.indkey::text, i.indexprs IS NULL, i.indpred IS NULL, pg_catalog.to_jsonb(i) ->> 'indnullsnotdistinct'), ';' ORDER BY i.indexrelid)
		FROM pg_catalog.pg_index i WHERE i.indrelid = ANY (p.r)),
	(SELECT pg_catalog.string_agg(pg_catalog.concat_ws(',', k.oid, k.contype, k.convalidated), ';' ORDER BY k.oid)
		FROM pg_catalog.pg_constraint k WHERE k.conrelid = ANY (p.r)),
	(SELECT pg_catalog.string_agg(pg_catalog.concat_ws(',', w.oid, w.ev_type, w.ev_enabled, w.is_instead), ';' ORDER BY w.oid)
		FROM pg_catalog.pg_rewrite w WHERE w.ev_class = ANY (p.r)),
	(SELECT pg_catalog.string_agg(pg_catalog.concat_ws(',', d.oid, d.adrelid, d.adnum), ';' ORDER BY d.oid)
		FROM pg_catalog.pg_attrdef d WHERE d.adrelid = ANY (p.r))))
	FROM pg_catalog.unnest($1::oid[]) AS o(oid),
		LATERAL (SELECT pg_catalog.array_append(pg_catalog.array_agg(t.relid), o.oid) AS r
			FROM pg_catalog.pg_partition_tree(o.oid::regclass) AS t) AS p`

// rereader is the part of an Applier that reads the target's description
// of its tables again (see the top of this file). fresh belongs to the
// round trip (see roundTrip), next to the builder; pending is handed from
// the one to the other under mu.
type rereader struct {
	// next is when the builder compares the catalog again (RefreshIfDue).
	next time.Time
	// fresh holds, by relation ID, the descriptions a round trip of the
	// open group read again and found changed: the group's statements
	// built from now on are built from them (see swap). Reset when a
	// group begins: the builder has taken them by then (takePending).
	fresh map[uint32]*Table
	mu    sync.Mutex
	// pending are descriptions a round trip read again, for the builder
	// to take between groups.
	pending []*Table
}

// loadTable is LoadTable, with the fingerprint of the catalog rows the
// description comes from, read first: a change between the two reads
// only makes the next comparison read the table again. base is the
// description read again (nil for a first load): the new one keeps its
// counts.
func (a *Applier) loadTable(ctx context.Context, conn *pgx.Conn, rel *parapply.Relation, base *Table) (*Table, error) {
	var oid uint32
	if base != nil {
		oid = base.OID
	} else if err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.to_regclass($1)::oid, 0)`, rel.QualifiedName()).Scan(&oid); err != nil {
		return nil, fmt.Errorf("looking up %s on the target: %w", rel.QualifiedName(), err)
	}
	var sums map[uint32]string
	if oid != 0 { // else LoadTable says what is missing
		var err error
		if sums, err = catalogSums(ctx, conn, []uint32{oid}); err != nil {
			return nil, fmt.Errorf("reading the catalog of %s on the target: %w", rel.QualifiedName(), err)
		}
	}
	n, err := LoadTable(ctx, conn, rel, a.cfg.BinaryValues)
	if err != nil {
		return nil, err
	}
	n.catalogSum = sums[n.OID] // none when the OID is not the one read first: read again at the next comparison
	if base != nil {
		n.tally, n.base = base.tally, base
	}
	return n, nil
}

// catalogSums runs catalogSumSQL for oids.
func catalogSums(ctx context.Context, conn *pgx.Conn, oids []uint32) (map[uint32]string, error) {
	rows, err := conn.Query(ctx, catalogSumSQL, oids)
	if err != nil {
		return nil, err
	}
	sums := map[uint32]string{}
	var oid uint32
	var sum string
	_, err = pgx.ForEachRow(rows, []any{&oid, &sum}, func() error {
		sums[oid] = sum
		return nil
	})
	return sums, err
}

// changed reads the fingerprints of tables and, for those that differ
// from their description's, the description again: what it returns are
// the new descriptions (Table.base the one each was read again for),
// with whether each differs from the one it replaces. lenient (the
// builder's, between groups) passes over a table whose description cannot
// be read again (dropped or changed on the target, so that its changes
// cannot be applied): it is said once, and the change that meets it stops
// the run as it would have; the old description is kept.
func (a *Applier) changed(ctx context.Context, tables []*Table, lenient bool) ([]*Table, []bool, error) {
	var oids []uint32
	for _, t := range tables {
		oids = append(oids, t.OID)
	}
	if len(oids) == 0 {
		return nil, nil, nil
	}
	sums, err := catalogSums(ctx, a.conn, oids)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the catalog of the published tables on the target: %w", err)
	}
	var out []*Table
	var differ []bool
	for _, t := range tables {
		if sums[t.OID] == t.catalogSum {
			continue
		}
		n, err := a.loadTable(ctx, a.conn, t.Rel, t)
		if err != nil && lenient && !a.conn.IsClosed() && ctx.Err() == nil {
			t.catalogSum = sums[t.OID]
			a.Warn(fmt.Sprintf("the target's description of table %s changed while parapply ran, and cannot be read again: %v; its changes will fail until the target's table takes them", t.Name, err))
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the description of %s on the target again: %w", t.Name, err)
		}
		out, differ = append(out, n), append(differ, !sameDescription(t, n))
	}
	return out, differ, nil
}

// sameDescription reports whether two descriptions of a table build the
// same statements and keys: every field but what a load adds of its own
// (counts, statements built, sizes, which only tune reading ahead) and
// what the applier sets (sync position).
func sameDescription(a, b *Table) bool {
	x, y := describing(a), describing(b)
	return reflect.DeepEqual(&x, &y)
}

// describing returns t's fields that its statements depend on (see
// sameDescription).
func describing(t *Table) Table {
	return Table{Rel: t.Rel, Name: t.Name, OID: t.OID, Types: t.Types, elem: t.elem, binaryValues: t.binaryValues,
		AlwaysIdentity: t.AlwaysIdentity, keyAndIdentity: t.keyAndIdentity, setSkip: t.setSkip, Citus: t.Citus, distCol: t.distCol,
		Key: t.Key, Full: t.Full, equality: t.equality, Partitioned: t.Partitioned, ExtraUnique: t.ExtraUnique, KeyUnique: t.KeyUnique,
		Uniques: t.Uniques, WholeTable: t.WholeTable, NoCopy: t.NoCopy, Triggers: t.Triggers, before: t.before}
}

// current returns the description the open group's statements are built
// from for t's relation: one a round trip read again, or t.
func (r *rereader) current(t *Table) *Table {
	if n, ok := r.fresh[t.Rel.ID]; ok {
		return n
	}
	return t
}

// swap returns ops with every run whose table a round trip of the group
// read again bound to the new description, so that the statements built
// from it (the resolving ones of a replay) are built from that.
func (r *rereader) swap(ops []op) []op {
	if len(r.fresh) == 0 {
		return ops
	}
	for i, o := range ops {
		if o.run == nil {
			continue
		}
		n := r.current(o.run.table)
		if n == o.run.table {
			continue
		}
		old := o.run
		ops[i].run = &run{cols: old.cols, split: old.split, table: n, part: old.part, kind: old.kind, shape: old.shape, sql: old.sql,
			params: old.params, rows: old.rows, bytes: old.bytes, closed: true, fallback: old.fallback, txns: old.txns}
		ops[i].table = n
	}
	return ops
}

// rereadTables reads again, on the round trip's side, the description of the
// tables ops (and what the group sent before them) were built from: the
// ones found changed are used for the rest of the group (fresh), and
// handed to the builder (pending).
func (a *Applier) rereadTables(ctx context.Context, ops []op) error {
	r := &a.reread
	seen := map[*Table]bool{}
	var tables []*Table
	for _, list := range [][]op{a.detector.keep.ops, ops} {
		for _, o := range list {
			if o.table == nil || o.table.OID == 0 {
				continue
			}
			if t := r.current(o.table); !seen[t] {
				seen[t] = true
				tables = append(tables, t)
			}
		}
	}
	fresh, differ, err := a.changed(ctx, tables, false)
	if err != nil {
		return err
	}
	if len(fresh) == 0 {
		return nil
	}
	if r.fresh == nil {
		r.fresh = map[uint32]*Table{}
	}
	for i, n := range fresh {
		if differ[i] {
			r.fresh[n.Rel.ID] = n
		}
	}
	r.mu.Lock()
	r.pending = append(r.pending, fresh...)
	r.mu.Unlock()
	return nil
}

// beginGroup forgets what the round trips of the last group read again:
// the builder took it before it built the group (takePending).
func (r *rereader) beginGroup() { clear(r.fresh) }

// takePending gives the builder, between groups, the descriptions round
// trips read again: each replaces the one it was read again for, unless
// another replaced that since (a relation message, a DDL).
func (a *Applier) takePending() {
	r := &a.reread
	r.mu.Lock()
	pending := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, n := range pending {
		a.adopt(n)
	}
}

// adopt makes n, a description read again, the one changes of its
// relation are applied with, if what it was read again for is still the
// current one. One read again alike replaces it too (it holds the new
// fingerprint), without a word.
func (a *Applier) adopt(n *Table) {
	old := n.base
	n.base = nil
	if old == nil || a.tables[n.Rel.ID] != old {
		return
	}
	n.SyncLSN, n.Unsynced, n.reload = old.SyncLSN, old.Unsynced, old.reload
	a.batcher.forget(n.Rel.ID)
	a.tables[n.Rel.ID] = n
	a.readAhead.noteTable(n)
	if !sameDescription(old, n) {
		a.Warn(fmt.Sprintf("the target's description of table %s changed while parapply ran (its triggers, indexes, columns, constraints or replica identity): read again; its changes are applied by the new one from now on", n.Name))
	}
}

// RefreshIfDue compares, between groups and every rereadEvery, the
// target's catalog with what the applier knows of its tables, and reads
// again the description of those that changed (see the top of this
// file). The run calls it before a source transaction begins; in a group,
// or before it is due, it does nothing.
func (a *Applier) RefreshIfDue(ctx context.Context) error {
	if a.grp.open || time.Now().Before(a.reread.next) {
		return nil
	}
	a.reread.next = time.Now().Add(rereadEvery)
	if err := a.wait(); err != nil {
		return err
	}
	a.takePending()
	var tables []*Table
	for _, t := range a.tables {
		if t.OID != 0 {
			tables = append(tables, t)
		}
	}
	fresh, _, err := a.changed(ctx, tables, true)
	if err != nil {
		return err
	}
	for _, n := range fresh {
		a.adopt(n)
	}
	return nil
}

// shortfall is a statement's rows that it did not change, among those it
// was sent for (see settle).
type shortfall struct {
	table *Table
	kind  byte
	n     int64
}

// settle decides, after a round trip, on the rows its statements did not
// find (sender.short): missing, unless the target's description read
// again says a BEFORE trigger that fires for replicated changes may
// suppress their kind of change (such a change is no missing row: see
// triggers.go). With no statement short, nothing is read.
func (a *Applier) settle(ctx context.Context) error {
	short := a.sender.short
	if len(short) == 0 {
		return nil
	}
	a.sender.short = short[:0]
	var ops []op
	for _, s := range short {
		if s.table != nil && !s.table.suppresses(s.kind) {
			ops = append(ops, op{table: s.table})
		}
	}
	if len(ops) > 0 {
		if err := a.rereadTables(ctx, ops); err != nil {
			return err
		}
	}
	for _, s := range short {
		if s.table != nil && a.reread.current(s.table).suppresses(s.kind) {
			continue
		}
		a.Stats.Missing.Add(s.n)
		missing(s.table, s.kind, s.n)
	}
	return nil
}
