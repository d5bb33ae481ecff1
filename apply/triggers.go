package apply

import (
	"slices"
	"strings"

	"github.com/parapply/parapply/targetdb"
)

// Triggers on the target fire in parapply's sessions as in the built-in
// apply worker's: both run with session_replication_role = replica, which
// fires the triggers enabled REPLICA or ALWAYS and not the ordinary ones
// (ENABLE ORIGIN), with their row-level effects. A BEFORE row trigger
// that returns a changed row changes what is written; one that returns
// NULL suppresses the change. The built-in found the row all the same (so
// no update_missing or delete_missing), skips the change and goes on
// (worker.c: ExecSimpleRelationUpdate and ExecSimpleRelationDelete do
// nothing when the BEFORE triggers say so).
//
// A set-based statement that changed fewer rows than its run holds cannot
// tell a suppressed change from a row not found by its count. For a table
// with such a trigger for the statement's event, the rows the statement
// found are counted instead, by a SELECT of the same rows in the same
// statement (matchSQL: a CTE, under the statement's snapshot, so the rows
// as they were before the change). Tables without one keep the plain
// count, and a resolving statement, which finds every row before changing
// it, does not count the rows changed for them (see resolvingBuilder.finish).

// Event bits of pg_trigger.tgtype.
const (
	tgInsert = 1 << 2
	tgDelete = 1 << 3
	tgUpdate = 1 << 4
)

// beforeTriggersSQL reads Table.before for the table whose OID is $1: the
// events of its (and its partitions') BEFORE row triggers (tgtype ROW and
// BEFORE, not INSTEAD) that fire under session_replication_role = replica.
const beforeTriggersSQL = `(SELECT coalesce(pg_catalog.bit_or(tgtype::int & 28), 0)::int FROM pg_catalog.pg_trigger
		WHERE NOT tgisinternal AND tgenabled IN ('A', 'R') AND tgtype::int & 67 = 3 AND tgname <> '` + targetdb.TombstoneTrigger + `'
		AND (tgrelid = $1::oid OR tgrelid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::oid::regclass))))`

// suppresses reports whether a BEFORE row trigger firing for replicated
// changes may suppress a change of kind (a run's) on t.
func (t *Table) suppresses(kind byte) bool {
	bit := 0
	switch kind {
	case 'I':
		bit = tgInsert
	case 'U', 'F':
		bit = tgUpdate
	case 'D', 'X':
		bit = tgDelete
	}
	return t.before&bit != 0
}

// matchSQL selects the target rows the statement of update or delete run
// r finds (one per row of the run: see fullMatch and the batcher's keys),
// as column x, their xmin: the same parameters, the same match.
func matchSQL(r *run) string {
	t, head, tail := r.table, r.cols[:r.split], r.cols[r.split:]
	k := aliases("k", len(head))
	var b strings.Builder
	b.WriteString("SELECT t.xmin AS x FROM " + t.Target() + " AS t, ")
	switch r.kind {
	case 'U', 'D':
		names, cols := k, head
		if r.kind == 'U' {
			names, cols = slices.Concat(k, aliases("v", len(tail))), r.cols
		}
		unnest(&b, t, cols, names, false)
		b.WriteString(" WHERE ")
		keyMatch(&b, t, "t", head, k)
	case 'F', 'X':
		var v []string
		if r.kind == 'F' {
			v = aliases("v", len(tail))
		} else {
			tail = nil
		}
		fullMatch(&b, t, head, v, tail)
		b.WriteString(" WHERE t.tableoid = m.toid AND t.ctid = m.tid")
	}
	return b.String()
}

// countedOp queues, with conflict detection off, the statement of update
// or delete run r on a table whose BEFORE triggers may suppress its
// changes: the rows it found are counted (not the rows it changed), and
// those of the expected that it did not find are missing.
func (a *Applier) countedOp(r *run, what string, expect int, args []any) {
	o := a.queueRun(r, "WITH a AS ("+r.sql+"), c AS ("+matchSQL(r)+") SELECT pg_catalog.count(*) FROM c", what, -1, args...)
	n := new(int64)
	t, kind := r.table, r.kind
	o.scan, o.after = []any{n}, func() {
		a.Stats.Statements.Add(1)
		a.Stats.Executed.Add(*n)
		if *n < int64(expect) {
			a.Stats.Missing.Add(int64(expect) - *n)
			missing(t, kind, int64(expect)-*n)
		}
	}
}
