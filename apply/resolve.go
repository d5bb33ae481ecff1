package apply

import (
	"slices"
	"strconv"
	"strings"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/conflict"
)

// Conflict detection has three kinds of statement per run.
//
// The checked statement: an insert run's ordinary one, which fails by itself
// on a unique violation; an update or delete run's ordinary one, made to
// fail (SQLSTATE PC001, from parapply.conflict_check) when it changed fewer
// rows than the run holds, or, with track_commit_timestamp on, when it
// changed a row another origin or a local session changed last (one commit
// timestamp lookup per distinct old xmin; see checkedSQL). Without a
// conflict that is all detection costs.
//
// When a checked statement fails that way, the applier rolls its target
// transaction back and applies it again with resolving statements (see
// Applier.roundTrip), which examine every row: by key, by every unique index for
// inserts (insert_exists, multiple_unique_conflicts) and for the columns an
// update sets (update_exists); each conflict is classified, resolved by the
// policy in force, written to parapply.conflicts, and returned, all in the
// one statement of the run.
//
// For a while after a conflict (resolvingFor), update and delete runs use the
// fast statement instead of the checked one, so that a stream with many
// conflicts is not applied twice: the rows this subscription changed last
// are changed at once (CTE w0), and only the rest (not found, or left out)
// are examined as by the resolving statement, in the same statement; unique
// violations are still left to the indexes. A policy of error raises PC002,
// naming the conflict and the source transaction.

// Detection is what the statement builders need to know to find and
// resolve conflicts; nil turns detection off.
type Detection struct {
	Rules *conflict.Rules
	// CommitTimestamps: track_commit_timestamp is on on the target, so the
	// origin and commit time of a local row can be read.
	CommitTimestamps bool
	// OriginPattern is a regular expression matching the names of the
	// replication origins of this subscription's sessions: a row one of
	// them changed last is not a conflict.
	OriginPattern string
	// Slot names the subscription: the origins it dropped (retired) are
	// still its own for rows they wrote (see RetireOrigin).
	Slot string
	// RemoteWinsTies breaks ties of commit times for last_update_wins and
	// first_update_wins: both sides of a bidirectional pair must choose the
	// same row (see DetectionFor).
	RemoteWinsTies bool
	// Tombstones: deletes of other sessions on the target are recorded in
	// parapply.tombstones (detect_update_deleted, targetdb/tombstones.go): an
	// update whose row is missing looks its key up there, and a record
	// makes it update_deleted rather than update_missing.
	Tombstones bool
	// OldReturning: the target is PostgreSQL 18 or later, whose UPDATE
	// can return the old row's system columns (RETURNING old.xmin).
	OldReturning bool
	// SkipCitus leaves out of detection the tables Citus manages on a
	// Citus coordinator (distributed, reference), whose statements Citus
	// does not run: their changes are applied as with detection off (rows
	// an update or delete does not find are counted and skipped). The
	// default there, where detect_conflicts was not set by the user.
	SkipCitus bool
}

// conflictColumns are the columns of parapply.conflicts a resolving
// statement fills.
const conflictColumns = "slot_name, conflict_type, table_name, key, local_row, local_origin, local_commit_time, remote_row, source_xid, commit_lsn, remote_commit_time, remote_origin, resolution, remote_applied"

// checkedSQL wraps the statement of an update or delete run of kind so
// that it fails with PC001 when it changed fewer rows than the run holds
// or, with commit timestamps, changed a row another origin changed last.
// Where the statement can return the changed rows' old xmin (deletes;
// updates from PostgreSQL 18 on, RETURNING old.xmin), every row is changed
// and the origins are looked up once per distinct xmin afterwards: rows
// come in groups written by one transaction, so that is a few lookups per
// run instead of one per row, and a conflict rolls the whole target
// transaction back anyway. Otherwise rows another origin changed last are
// left out and count as not found (one lookup per row). match, when not
// "", selects the rows the statement finds (see matchSQL): on a table
// whose BEFORE triggers may suppress a change, those are counted and
// looked up instead of the rows changed.
func (d *Detection) checkedSQL(sql string, kind byte, match string) string {
	const n = "pg_catalog.count(*) AS n FROM c"
	ret, check, from := "1", "", n
	switch {
	case !d.CommitTimestamps:
	case kind == 'D' || d.OldReturning:
		ret = "old.xmin"
		if kind == 'D' {
			ret = "t.xmin" // the deleted row's, before PostgreSQL 18 too
		}
		// One pass over the changed rows, grouped by xmin; an origin
		// lookup per group.
		check = " WHEN w.other THEN parapply.conflict_other_origin(w.n)"
		from = "coalesce(pg_catalog.sum(g.n), 0)::int8 AS n, coalesce(pg_catalog.bool_or(NOT " + d.ours("g.x") + "), false) AS other FROM (SELECT c.x, " + n + " GROUP BY c.x) AS g"
	default:
		sql += " AND " + d.ours("t.xmin")
		if match != "" {
			match += " AND " + d.ours("t.xmin")
		}
	}
	head := "WITH c AS (" + sql + " RETURNING " + ret + " AS x)"
	if match != "" {
		// The change runs to completion though nothing reads it.
		head = "WITH a AS (" + sql + "), c AS (" + match + ")"
	}
	return head + " SELECT CASE WHEN w.n < pg_catalog.cardinality($1) THEN parapply.conflict_check(w.n, pg_catalog.cardinality($1))" +
		check + " ELSE w.n END FROM (SELECT " + from + ") AS w"
}

// ours is true when the row whose xmin is given was last changed by this
// subscription, by a transaction whose commit timestamp is gone, or by the
// transaction running.
func (d *Detection) ours(xmin string) string {
	return "coalesce((pg_catalog.pg_xact_commit_timestamp_origin(" + xmin + ")).roident = ANY (" + d.origins() + "), true)"
}

// origins is the array of the numbers of this subscription's replication
// origins: those it has now (by name), and those it retired whose number
// no other origin has taken since (see RetireOrigin). An uncorrelated
// subquery: the target evaluates it once per statement.
func (d *Detection) origins() string {
	p := parapply.QuoteLiteral(d.OriginPattern)
	return "((SELECT pg_catalog.array_agg(roident) FROM pg_catalog.pg_replication_origin WHERE roname ~ " + p + ") || " +
		"(SELECT pg_catalog.array_agg(r.roident) FROM parapply.retired_origins AS r WHERE r.slot_name = " + parapply.QuoteLiteral(d.Slot) +
		" AND NOT EXISTS (SELECT FROM pg_catalog.pg_replication_origin AS o WHERE o.roident = r.roident AND o.roname !~ " + p + ")))::oid[]"
}

// resolvingSQL builds the statement that applies run r detecting and
// resolving conflicts; "" when the run's kind has no resolving form (runs
// of REPLICA IDENTITY FULL tables, and inserts of rows without columns),
// whose fast statement is then used as it is.
func (d *Detection) resolvingSQL(r *run, slot string) string {
	return d.examine(r, slot, false)
}

// fastSQL is the statement of an update or delete run with detection on:
// the run's rows that this subscription changed last are updated or
// deleted at once, and only the others are examined, resolved and logged
// as by the resolving statement, in the same statement (so conflicts there
// need no second try); unique violations are left to the indexes.
func (d *Detection) fastSQL(r *run, slot string) string {
	return d.examine(r, slot, true)
}

// examine builds the resolving statement of run r, or with fast its fast
// one ("" when the run has no resolving form).
func (d *Detection) examine(r *run, slot string, fast bool) string {
	t := r.table
	head, tail := r.cols[:r.split], r.cols[r.split:]
	// A change a BEFORE trigger suppressed would be examined, and its
	// trigger fired, a second time after the fast statement's w0.
	c := resolvingBuilder{d: d, t: t, slot: slot, fast: fast && r.kind != 'I' && !t.suppresses(r.kind),
		found: t.suppresses(r.kind) || (r.kind == 'I' && t.suppresses('U')) || (r.kind == 'U' && t.suppresses('I'))}
	if !r.hasResolving() {
		return ""
	}
	switch r.kind {
	case 'I':
		return c.insert(tail)
	case 'U':
		return c.update(head, tail)
	case 'D':
		return c.delete(head)
	}
	return ""
}

// resolvingBuilder writes the resolving or fast statement of one run (see
// examine): its CTEs in order, src to the statement's one row.
type resolvingBuilder struct {
	d    *Detection
	t    *Table
	slot string
	b    strings.Builder
	join string // more joins for decide's rows
	// tomb: the rows examined look their key up among the tombstones
	// when missing (CTE d's join tb; see Detection.Tombstones).
	tomb bool
	// fast: the run's rows are first applied as by the fast statement
	// (CTE w0, leaving out rows another origin changed last), and only
	// the rest (CTE rest: not found, or left out) are examined.
	fast bool
	// found: a BEFORE trigger may suppress a change the statement makes
	// (see triggers.go), so the rows changed are not checked against
	// those found to change.
	found bool
}

// rows is the CTE of the rows to examine: src, or rest after w0.
func (c *resolvingBuilder) rows() string {
	if c.fast {
		return "rest"
	}
	return "src"
}

// first writes, for a fast statement, w0 (the set-based change of the rows
// that are this subscription's, as the fast statement makes it: change
// holds its text, ending in its WHERE clause) and rest, the others.
func (c *resolvingBuilder) first(change string) {
	if !c.fast {
		return
	}
	if c.d.CommitTimestamps {
		change += " AND " + c.d.ours("t.xmin")
	}
	// Without a conflict every row is changed, and the one-time filter
	// skips the anti-join.
	c.w(", w0 AS (", change, " RETURNING u.n)",
		", rest AS MATERIALIZED (SELECT s.* FROM src AS s WHERE (SELECT pg_catalog.count(*) FROM w0) < (SELECT pg_catalog.count(*) FROM src)",
		" AND NOT EXISTS (SELECT 1 FROM w0 WHERE w0.n = s.n))")
}

func (c *resolvingBuilder) w(s ...string) {
	for _, x := range s {
		c.b.WriteString(x)
	}
}

func lit(s string) string { return parapply.QuoteLiteral(s) }

// src writes the CTE holding the run's rows (its parameters, numbered by
// n), and tx, its source transactions: the last row number of each, its
// xid, commit LSN, commit time and origin (the five parameters after the run's;
// see run.txnColumns), looked up for the rows examined only.
func (c *resolvingBuilder) src(cols []int, names []string) {
	c.w("WITH src AS MATERIALIZED (SELECT * FROM ")
	unnest(&c.b, c.t, cols, names, true)
	p := len(names)
	c.w("), tx AS MATERIALIZED (SELECT x.upto::int8 AS upto, x.rx, x.rl, x.rt, x.ro FROM unnest(")
	for i := 1; i <= 5; i++ {
		if i > 1 {
			c.w(", ")
		}
		param(&c.b, p+i, "text")
	}
	c.w(") AS x(upto, rx, rl, rt, ro))")
}

// origin writes the columns lo (origin id), lt (commit time) and lname
// (origin name) of the local row whose xmin is given, and the joins they
// need after from.
func (c *resolvingBuilder) origin(xmin string) (cols, joins string) {
	if !c.d.CommitTimestamps {
		return "NULL::oid AS lo, NULL::timestamptz AS lt, NULL::text AS lname", ""
	}
	return "x.roident AS lo, x.\"timestamp\" AS lt, ro.roname AS lname",
		" LEFT JOIN LATERAL pg_catalog.pg_xact_commit_timestamp_origin(" + xmin + ") AS x ON true LEFT JOIN pg_catalog.pg_replication_origin AS ro ON ro.roident = x.roident"
}

// differs is true when the local row was last changed by someone else
// than this subscription.
func (c *resolvingBuilder) differs() string {
	if !c.d.CommitTimestamps {
		return "false"
	}
	return "(l.lo IS NOT NULL AND NOT coalesce(l.lo = ANY (" + c.d.origins() + "), false))"
}

// resolve writes the outcome of a conflict of type ty under its policy:
// app (what applying the remote change means: 'apply', 'insert',
// 'update'), 'skip' or 'error'.
func (c *resolvingBuilder) resolve(ty conflict.Type, app string) string {
	p := c.d.Rules.For(c.name(), ty)
	tie := "false"
	if c.d.RemoteWinsTies {
		tie = "true"
	}
	switch p {
	case conflict.Error:
		return "'error'"
	case conflict.ApplyRemote:
		return lit(app)
	case conflict.LastUpdateWins:
		return "CASE WHEN q.lt IS NULL OR q.rt::timestamptz > q.lt OR (q.rt::timestamptz = q.lt AND " + tie + ") THEN " + lit(app) + " ELSE 'skip' END"
	case conflict.FirstUpdateWins:
		return "CASE WHEN q.lt IS NOT NULL AND (q.rt::timestamptz < q.lt OR (q.rt::timestamptz = q.lt AND " + tie + ")) THEN " + lit(app) + " ELSE 'skip' END"
	}
	return "'skip'"
}

// name is the table as policies name it: schema.name, unquoted.
func (c *resolvingBuilder) name() string { return c.t.Rel.Namespace + "." + c.t.Rel.Name }

// decide writes the CTE d: every row of src with its local row (from loc)
// and conflict type ct (cases: SQL condition on l, the row's loc, and u,
// its src; then the type, first match wins), and its outcome res (app when
// there is no conflict; apps gives what applying means per type).
func (c *resolvingBuilder) decide(cases [][2]string, app string, apps map[conflict.Type]string) {
	c.w(", d AS MATERIALIZED (SELECT q.*, CASE q.ct")
	for _, cs := range cases {
		ty := conflict.Type(cs[1])
		c.w(" WHEN ", lit(cs[1]), " THEN ", c.resolve(ty, apps[ty]))
	}
	local := "l.lo, l.lt, l.lname"
	if c.tomb {
		// A missing row's deleter stands for the local row.
		local = "coalesce(l.lo, tb.lo) AS lo, coalesce(l.lt, tb.lt) AS lt, coalesce(l.lname, tb.lname) AS lname"
	}
	c.w(" ELSE ", lit(app), " END AS res FROM (SELECT u.*, l.toid, l.tid, ", local, ", l.hits, CASE")
	for _, cs := range cases {
		c.w(" WHEN ", cs[0], " THEN ", lit(cs[1]))
	}
	c.w(" END AS ct, tx.rx, tx.rl, tx.rt, tx.ro FROM ", c.rows(), " AS u LEFT JOIN loc AS l ON l.m = u.n", c.join,
		" LEFT JOIN LATERAL (SELECT x.rx, x.rl, x.rt, x.ro FROM tx AS x WHERE x.upto >= u.n ORDER BY x.upto LIMIT 1) AS tx ON true) AS q)")
}

// jsonObject writes a jsonb object of the given columns' text values,
// taken from aliases of u.
func (c *resolvingBuilder) jsonObject(cols []int, names []string) string {
	if len(cols) == 0 {
		return "NULL::jsonb"
	}
	var k, v []string
	for i, col := range cols {
		k = append(k, lit(c.t.Rel.Columns[col].Name))
		v = append(v, c.t.textOf("u."+names[i], col))
	}
	return "pg_catalog.jsonb_object(ARRAY[" + strings.Join(k, ", ") + "]::text[], ARRAY[" + strings.Join(v, ", ") + "]::text[])"
}

// localRow is the local row a row of d met first (u.toid, u.tid), as
// jsonb: read by its position, from the statement's snapshot (before it
// changed anything).
func (c *resolvingBuilder) localRow() string {
	return "(SELECT pg_catalog.to_jsonb(c) FROM " + c.t.Target() + " AS c WHERE c.tableoid = u.toid AND c.ctid = u.tid)"
}

// localRows is the local rows in CTE from (m, toid, tid) that row u.n of
// src met, as jsonb: the row, or an array of them when there are several.
// It scans from: for the rare conflicts that meet several rows only.
func (c *resolvingBuilder) localRows(from string) string {
	return "(SELECT CASE WHEN pg_catalog.count(*) = 1 THEN (pg_catalog.array_agg(r.j))[1] ELSE pg_catalog.jsonb_agg(r.j) END FROM " + from +
		" AS h, LATERAL (SELECT pg_catalog.to_jsonb(c) AS j FROM " + c.t.Target() + " AS c WHERE c.tableoid = h.toid AND c.ctid = h.tid) AS r WHERE h.m = u.n)"
}

// finish writes the error raiser, the conflict log (local: the local rows
// of the conflict), and the statement's one row: the rows changed (checked against those meant to be) and the
// conflicts found, one "type|resolution|applied|key" per row.
func (c *resolvingBuilder) finish(key, remote, local string, changed []string) {
	c.w(", e AS (SELECT parapply.conflict_error(", lit(c.slot), ", u.ct, ", lit(c.name()), ", ", key, ", ", remote, ", ", local, ", u.rx, u.rl) FROM d AS u WHERE u.res = 'error' LIMIT 1)")
	c.w(", g AS (INSERT INTO parapply.conflicts (", conflictColumns, ") SELECT ", lit(c.slot), ", u.ct, ", lit(c.name()), ", ", key,
		", ", local,
		", u.lname, u.lt, ", remote, ", u.rx::int8, u.rl::pg_lsn, u.rt::timestamptz, u.ro, ")
	c.w("CASE u.ct")
	for _, ty := range conflict.Types {
		c.w(" WHEN ", lit(string(ty)), " THEN ", lit(string(c.d.Rules.For(c.name(), ty))))
	}
	c.w(" END, u.res NOT IN ('skip', 'error') FROM d AS u WHERE u.ct IS NOT NULL",
		" RETURNING conflict_type || '|' || resolution || '|' || remote_applied::text || '|' || coalesce(key::text, ''))")
	var sum []string
	for _, w := range changed {
		sum = append(sum, "(SELECT pg_catalog.count(*) FROM "+w+")")
	}
	done := ""
	if c.fast {
		sum = append(sum, "(SELECT pg_catalog.count(*) FROM w0)")
		done = " + (SELECT pg_catalog.count(*) FROM w0)"
	}
	changedSum := strings.Join(sum, " + ")
	expected := "(SELECT pg_catalog.count(*) FROM d WHERE res NOT IN ('skip', 'error')) + (SELECT pg_catalog.count(*) FROM e)" + done
	if c.found {
		// LEAST evaluates every argument: e still raises a conflict
		// whose policy is error.
		expected = "LEAST(" + changedSum + ", " + expected + ")"
	}
	c.w(" SELECT parapply.conflict_check(", changedSum, ", ", expected, ")::int8",
		", coalesce((SELECT pg_catalog.array_agg(g ORDER BY g) FROM g AS g(g)), '{}')::text[]")
}

// positions returns, for each column of cols, its index in names' order.
func positionsOf(cols, of []int) []int {
	out := make([]int, len(cols))
	for i, c := range cols {
		out[i] = slices.Index(of, c)
	}
	return out
}

// uniqueMatches lists, per unique index whose every column the row
// carries (in cols, aliases names), the join condition of a local row c
// with the row's values.
func (c *resolvingBuilder) uniqueMatches(cols []int, names []string, withKey bool) []string {
	var idx [][]int
	var nullsEqual []bool
	if withKey && len(c.t.Key) > 0 && c.t.KeyUnique {
		idx, nullsEqual = append(idx, c.t.Key), append(nullsEqual, false)
	}
	for _, u := range c.t.Uniques {
		idx, nullsEqual = append(idx, u.Cols), append(nullsEqual, u.NullsEqual)
	}
	var out []string
	for i, ic := range idx {
		pos := positionsOf(ic, cols)
		if slices.Contains(pos, -1) {
			continue // a column the row does not carry (generated, unchanged)
		}
		var conds []string
		for j, col := range ic {
			op := " = "
			if nullsEqual[i] {
				op = " IS NOT DISTINCT FROM "
			}
			conds = append(conds, "c."+colName(c.t, col)+op+cast(names[pos[j]], c.t.Types[col]))
		}
		out = append(out, strings.Join(conds, " AND "))
	}
	return out
}

// hits writes the CTEs hit (every local row a row of src meets: by key for
// an update or delete, by any unique index for an insert) and loc (per row
// of src, how many and the first, with its origin).
func (c *resolvingBuilder) hits(matches []string) {
	c.w(", hit AS MATERIALIZED (")
	for i, m := range matches {
		if i > 0 {
			c.w(" UNION ")
		}
		c.w("SELECT u.n AS m, c.tableoid AS toid, c.ctid AS tid, c.xmin AS lx FROM ", c.rows(), " AS u JOIN ", c.t.Target(), " AS c ON ", m)
	}
	if len(matches) == 0 {
		c.w("SELECT 0::int8 AS m, 0::oid AS toid, '(0,0)'::tid AS tid, '0'::xid AS lx WHERE false")
	}
	cols, joins := c.origin("h.lx")
	c.w("), loc AS MATERIALIZED (SELECT DISTINCT ON (h.m) h.m, pg_catalog.count(*) OVER (PARTITION BY h.m) AS hits, h.toid, h.tid, ", cols,
		" FROM hit AS h", joins, " ORDER BY h.m, h.toid, h.tid)")
}

func (c *resolvingBuilder) insert(cols []int) string {
	v := aliases("v", len(cols))
	c.src(cols, v)
	c.hits(c.uniqueMatches(cols, v, true))
	c.decide([][2]string{
		{"l.hits > 1", string(conflict.MultipleUniqueConflicts)},
		{"l.hits = 1", string(conflict.InsertExists)},
	}, "insert", map[conflict.Type]string{conflict.InsertExists: "update", conflict.MultipleUniqueConflicts: "update"})
	c.w(", wi AS (", insertFrom(c.t, cols, v, "d AS u WHERE u.res = 'insert'"), " RETURNING 1)")
	c.w(", wu AS (UPDATE ", c.t.Target(), " AS t SET ")
	c.setList(cols, v)
	c.w(" FROM d AS u WHERE t.tableoid = u.toid AND t.ctid = u.tid AND u.res = 'update' RETURNING 1)")
	c.finish(c.keyJSON(cols, v), c.jsonObject(cols, v), "CASE WHEN u.hits > 1 THEN "+c.localRows("hit")+" ELSE "+c.localRow()+" END", []string{"wi", "wu"})
	return c.b.String()
}

// setList writes col = value for every column but those GENERATED ALWAYS
// AS IDENTITY on the target (which no UPDATE may set).
func (c *resolvingBuilder) setList(cols []int, names []string) {
	n := 0
	for i, col := range cols {
		if slices.Contains(c.t.AlwaysIdentity, col) {
			continue
		}
		if n > 0 {
			c.w(", ")
		}
		n++
		c.w(colName(c.t, col), " = ", cast(names[i], c.t.Types[col]))
	}
	if n == 0 {
		// Only identity columns: set the first to itself.
		c.w(colName(c.t, cols[0]), " = t.", colName(c.t, cols[0]))
	}
}

// keyJSON is the key of a row as a jsonb object, from the columns it
// carries ("NULL" when they do not hold the whole key).
func (c *resolvingBuilder) keyJSON(cols []int, names []string) string {
	pos := positionsOf(c.t.Key, cols)
	if len(pos) == 0 || slices.Contains(pos, -1) {
		return "NULL::jsonb"
	}
	kn := make([]string, len(pos))
	for i, p := range pos {
		kn[i] = names[p]
	}
	return c.jsonObject(c.t.Key, kn)
}

// insertFrom is an INSERT of the columns cols (values in aliases names of
// u) from the given FROM clause.
func insertFrom(t *Table, cols []int, names []string, from string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + t.Name + " (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(colName(t, c))
	}
	b.WriteString(")")
	if len(t.AlwaysIdentity) > 0 {
		b.WriteString(" OVERRIDING SYSTEM VALUE")
	}
	b.WriteString(" SELECT ")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(cast(names[i], t.Types[c]))
	}
	b.WriteString(" FROM " + from)
	return b.String()
}

func (c *resolvingBuilder) update(key, set []int) string {
	k, v := aliases("k", len(key)), aliases("v", len(set))
	c.src(append(slices.Clone(key), set...), append(k, v...))
	var up strings.Builder
	up.WriteString("UPDATE " + c.t.Target() + " AS t SET ")
	setList(&up, c.t, set, v, "u")
	up.WriteString(" FROM src AS u WHERE ")
	keyMatch(&up, c.t, "t", key, k)
	c.first(up.String())
	var m strings.Builder
	keyMatch(&m, c.t, "c", key, k)
	c.hits([]string{m.String()})
	// The rows another row of the table already holds the new values of,
	// in a unique index (the row itself and the run's other rows aside).
	var exists []string
	if !c.fast {
		// (A fast statement leaves these to the unique indexes: a
		// violation makes the transaction be applied again with resolving statements.)
		exists = c.uniqueMatches(set, v, true)
	}
	if len(exists) > 0 {
		c.w(", exr AS MATERIALIZED (SELECT DISTINCT u.n AS m, c.tableoid AS toid, c.ctid AS tid FROM src AS u JOIN ", c.t.Target(), " AS c ON (",
			strings.Join(exists, ") OR ("), ") WHERE NOT EXISTS (SELECT 1 FROM hit AS h WHERE h.toid = c.tableoid AND h.tid = c.ctid))",
			", exn AS MATERIALIZED (SELECT x.m, pg_catalog.count(*) AS n FROM exr AS x GROUP BY x.m)")
		c.join = " LEFT JOIN exn AS x ON x.m = u.n"
	}
	ex := func(cond string) string {
		if len(exists) == 0 {
			return "false"
		}
		return "coalesce(x.n, 0) " + cond
	}
	local := c.localRow()
	if len(exists) > 0 {
		local = "CASE WHEN u.ct IN ('update_exists', 'multiple_unique_conflicts') THEN " + c.localRows("exr") + " ELSE " + local + " END"
	}
	// Inserting the remote row for an update whose row is missing needs
	// every column the target takes.
	all, names := c.wholeRow(key, set, k, v)
	apps := map[conflict.Type]string{conflict.UpdateOriginDiffers: "apply", conflict.UpdateMissing: "skip", conflict.UpdateDeleted: "skip"}
	if all != nil {
		apps[conflict.UpdateMissing], apps[conflict.UpdateDeleted] = "insert", "insert"
	}
	deleted := "false"
	if c.d.Tombstones && !c.t.Full && len(key) > 0 {
		c.tomb, deleted = true, "l.hits IS NULL AND tb.lt IS NOT NULL"
		c.join += c.tombstone(key, k)
	}
	c.decide([][2]string{
		{deleted, string(conflict.UpdateDeleted)},
		{"l.hits IS NULL", string(conflict.UpdateMissing)},
		{ex("> 1"), string(conflict.MultipleUniqueConflicts)},
		{ex("= 1"), string(conflict.UpdateExists)},
		{c.differs(), string(conflict.UpdateOriginDiffers)},
	}, "apply", apps)
	c.w(", w AS (UPDATE ", c.t.Target(), " AS t SET ")
	setList(&c.b, c.t, set, v, "u")
	c.w(" FROM d AS u WHERE ")
	keyMatch(&c.b, c.t, "t", key, k)
	c.w(" AND u.res = 'apply' RETURNING 1)")
	changed := []string{"w"}
	if all != nil {
		c.w(", wi AS (", insertFrom(c.t, all, names, "d AS u WHERE u.res = 'insert'"), " RETURNING 1)")
		changed = append(changed, "wi")
	}
	rc, rn := c.remoteCols(key, set, k, v)
	c.finish(c.jsonObject(key, k), c.jsonObject(rc, rn), local, changed)
	return c.b.String()
}

// tombstone is the join of CTE d's rows with the latest record of their
// key's delete (tb: its deleter's origin lo and name lname, and its commit
// time lt), for the rows not found only.
func (c *resolvingBuilder) tombstone(key []int, k []string) string {
	kv := make([]string, 0, 2*len(key))
	for i, col := range key {
		kv = append(kv, lit(c.t.Rel.Columns[col].Name), cast(k[i], c.t.Types[col]))
	}
	cols, join := "NULL::oid AS lo, b.deleted_at AS lt, NULL::text AS lname", ""
	if c.d.CommitTimestamps {
		cols = "x.roident AS lo, coalesce(x.\"timestamp\", b.deleted_at) AS lt, ro.roname AS lname"
		join = " LEFT JOIN LATERAL pg_catalog.pg_xact_commit_timestamp_origin(pg_catalog.xid(b.xid)) AS x ON true LEFT JOIN pg_catalog.pg_replication_origin AS ro ON ro.roident = x.roident"
	}
	return " LEFT JOIN LATERAL (SELECT " + cols + " FROM parapply.tombstones AS b" + join + " WHERE l.m IS NULL AND b.relid = " + strconv.FormatUint(uint64(c.t.OID), 10) +
		"::oid AND b.key = pg_catalog.jsonb_build_object(" + strings.Join(kv, ", ") + ") ORDER BY b.deleted_at DESC LIMIT 1) AS tb ON true"
}

// wholeRow returns the columns (and their aliases) of the new row of an
// update, when it carries every column the target takes: the set columns,
// and the key columns not among them; nil otherwise.
func (c *resolvingBuilder) wholeRow(key, set []int, k, v []string) ([]int, []string) {
	cols, names := c.remoteCols(key, set, k, v)
	for i, typ := range c.t.Types {
		if typ != "" && !slices.Contains(cols, i) {
			return nil, nil
		}
	}
	return cols, names
}

// remoteCols are the columns of an update's new row: set's, then the key
// columns not among them.
func (c *resolvingBuilder) remoteCols(key, set []int, k, v []string) ([]int, []string) {
	cols, names := slices.Clone(set), slices.Clone(v)
	for i, col := range key {
		if !slices.Contains(set, col) {
			cols, names = append(cols, col), append(names, k[i])
		}
	}
	return cols, names
}

func (c *resolvingBuilder) delete(key []int) string {
	k := aliases("k", len(key))
	c.src(key, k)
	var del strings.Builder
	del.WriteString("DELETE FROM " + c.t.Target() + " AS t USING src AS u WHERE ")
	keyMatch(&del, c.t, "t", key, k)
	c.first(del.String())
	var m strings.Builder
	keyMatch(&m, c.t, "c", key, k)
	c.hits([]string{m.String()})
	c.decide([][2]string{
		{"l.hits IS NULL", string(conflict.DeleteMissing)},
		{c.differs(), string(conflict.DeleteOriginDiffers)},
	}, "apply", map[conflict.Type]string{conflict.DeleteOriginDiffers: "apply", conflict.DeleteMissing: "skip"})
	c.w(", w AS (DELETE FROM ", c.t.Target(), " AS t USING d AS u WHERE ")
	keyMatch(&c.b, c.t, "t", key, k)
	c.w(" AND u.res = 'apply' RETURNING 1)")
	c.finish(c.jsonObject(key, k), c.jsonObject(key, k), c.localRow(), []string{"w"})
	return c.b.String()
}
