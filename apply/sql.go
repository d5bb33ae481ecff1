package apply

import (
	"slices"
	"strconv"
	"strings"

	"github.com/parapply/parapply"
)

// The builders below turn one run of same-shaped changes into one set-based
// statement whose parameters are text arrays, one per column, unnested
// side by side. Values travel in the publisher's text form and are cast to
// the target column's type, so every type with a text input function
// (enums, domains, composites, ranges, arrays) works the same way. The SQL
// depends only on the table and the shape, so it is prepared once and reused
// for every batch size.

// param writes parameter n, an array of typ.
func param(b *strings.Builder, n int, typ string) {
	b.WriteString("$")
	b.WriteString(strconv.Itoa(n))
	b.WriteString("::" + typ + "[]")
}

// unnest writes "unnest($1::text[], ...) [WITH ORDINALITY] AS u(prefix1, ...)"
// for the named aliases, the values of t's columns cols (see
// Table.paramType).
func unnest(b *strings.Builder, t *Table, cols []int, aliases []string, ordinality bool) {
	b.WriteString("unnest(")
	for i := range aliases {
		if i > 0 {
			b.WriteString(", ")
		}
		param(b, i+1, t.paramType(cols[i]))
	}
	b.WriteString(")")
	if ordinality {
		b.WriteString(" WITH ORDINALITY")
		aliases = append(aliases[:len(aliases):len(aliases)], "n")
	}
	b.WriteString(" AS u(")
	b.WriteString(strings.Join(aliases, ", "))
	b.WriteString(")")
}

func aliases(prefix string, n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = prefix + strconv.Itoa(i+1)
	}
	return a
}

func cast(alias, typ string) string { return "u." + alias + "::" + typ }

func colName(t *Table, i int) string { return parapply.QuoteIdent(t.Rel.Columns[i].Name) }

// InsertSQL inserts rows given as one array per column in cols. With
// no columns (every published column generated on the target), the one
// parameter only counts the rows, which take their defaults.
func InsertSQL(t *Table, cols []int) string {
	if len(cols) == 0 {
		return "INSERT INTO " + t.Name + " SELECT FROM unnest($1::text[])"
	}
	v := aliases("v", len(cols))
	var from strings.Builder
	unnest(&from, t, cols, v, false)
	return insertFrom(t, cols, v, from.String())
}

func keyMatch(b *strings.Builder, t *Table, target string, key []int, k []string) {
	for i, c := range key {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(target + "." + colName(t, c) + " = " + t.columnEquality(c).value(k[i], t.Types[c]))
	}
}

func setList(b *strings.Builder, t *Table, set []int, v []string, from string) {
	for i, c := range set {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(colName(t, c) + " = " + from + "." + v[i] + "::" + t.Types[c])
	}
}

// UpdateSQL updates rows located by key (parameters first, one array per key
// column), setting the columns in set (the following parameters).
func UpdateSQL(t *Table, key, set []int) string {
	var b strings.Builder
	k, v := aliases("k", len(key)), aliases("v", len(set))
	b.WriteString("UPDATE " + t.Target() + " AS t SET ")
	setList(&b, t, set, v, "u")
	b.WriteString(" FROM ")
	unnest(&b, t, append(slices.Clone(key), set...), append(k, v...), false)
	b.WriteString(" WHERE ")
	keyMatch(&b, t, "t", key, k)
	distFilter(&b, t, key)
	return b.String()
}

// DeleteSQL deletes rows located by key.
func DeleteSQL(t *Table, key []int) string {
	var b strings.Builder
	k := aliases("k", len(key))
	b.WriteString("DELETE FROM " + t.Target() + " AS t USING ")
	unnest(&b, t, key, k, false)
	b.WriteString(" WHERE ")
	keyMatch(&b, t, "t", key, k)
	distFilter(&b, t, key)
	return b.String()
}

// fullMatch selects, for each batch row (ordinality n), the ctid of one
// target row whose old columns equal the batch row's old values, compared as
// the built-in apply compares them (tuples_equal): NULL-safe, with the
// default equality operator of the column's type, under the column's
// collation (so that a key written in another form on the target, equal
// under a nondeterministic collation, is found). A column whose type has no
// equality operator only ever carries NULLs here (batcher.full refuses the
// others, as the built-in does), which match NULLs only. One sequential
// scan serves the whole batch: the hash of every column under its type's
// hash function (which equal values share, under the collation) is the
// hash join's key, and equality is checked on the pairs it gives.
//
// Equal old images select the same candidate rows, so the batch rows that
// share one are paired with its candidates in order: the k-th such batch row
// takes the k-th candidate (cn = bn), never one row for two changes, as the
// built-in, changing them one at a time, does. A ctid is unique only within
// one physical table, so rows are matched by (tableoid, ctid): a partitioned
// target has many.
func fullMatch(b *strings.Builder, t *Table, old []int, extra []string, extraCols []int) {
	o := aliases("o", len(old))
	b.WriteString("(SELECT x.toid, x.tid")
	for _, e := range extra {
		b.WriteString(", x." + e)
	}
	b.WriteString(" FROM (SELECT c.tableoid AS toid, c.ctid AS tid")
	for _, e := range extra {
		b.WriteString(", u." + e)
	}
	b.WriteString(", pg_catalog.row_number() OVER (PARTITION BY u.n ORDER BY c.tableoid, c.ctid) AS cn" +
		", pg_catalog.dense_rank() OVER (PARTITION BY c.tableoid, c.ctid ORDER BY u.n) AS bn FROM ")
	unnest(b, t, append(slices.Clone(old), extraCols...), append(o, extra...), true)
	b.WriteString(" JOIN " + t.Target() + " AS c ON ")
	if len(old) == 1 && old[0] < 0 {
		// No columns (emptyRow): any row matches.
		b.WriteString("true")
	} else {
		var conds []string
		for i, c := range old {
			e := t.columnEquality(c)
			if e.hash != "" {
				conds = append(conds, "coalesce("+e.hash+"(c."+colName(t, c)+"), 0) = coalesce("+e.hash+"("+e.value(o[i], t.Types[c])+"), 0)")
			}
		}
		for i, c := range old {
			if e := t.columnEquality(c); e.eq {
				conds = append(conds, "c."+colName(t, c)+" IS NOT DISTINCT FROM "+e.value(o[i], t.Types[c]))
			} else {
				conds = append(conds, "(c."+colName(t, c)+" IS NULL AND u."+o[i]+" IS NULL)")
			}
		}
		b.WriteString(strings.Join(conds, " AND "))
	}
	b.WriteString(") AS x WHERE x.cn = x.bn) AS m")
}

// columnEquality is how column c is compared in fullMatch.
func (t *Table) columnEquality(c int) colEquality {
	if c < len(t.equality) {
		return t.equality[c]
	}
	return colEquality{eq: true}
}

// value casts parameter alias to the column's type, under the column's
// collation.
func (e colEquality) value(alias, typ string) string {
	if e.collate != "" {
		return "(" + cast(alias, typ) + " COLLATE " + e.collate + ")"
	}
	return cast(alias, typ)
}

// UpdateFullSQL updates, under REPLICA IDENTITY FULL, one row per change:
// parameters are the old values of the columns in old, then the new values
// of the columns in set.
func UpdateFullSQL(t *Table, old, set []int) string {
	var b strings.Builder
	v := aliases("v", len(set))
	b.WriteString("UPDATE " + t.Target() + " AS t SET ")
	setList(&b, t, set, v, "m")
	b.WriteString(" FROM ")
	fullMatch(&b, t, old, v, set)
	b.WriteString(" WHERE t.tableoid = m.toid AND t.ctid = m.tid")
	return b.String()
}

// DeleteFullSQL deletes, under REPLICA IDENTITY FULL, one row per change.
func DeleteFullSQL(t *Table, old []int) string {
	var b strings.Builder
	b.WriteString("DELETE FROM " + t.Target() + " AS t USING ")
	fullMatch(&b, t, old, nil, nil)
	b.WriteString(" WHERE t.tableoid = m.toid AND t.ctid = m.tid")
	return b.String()
}

// TruncateSQL truncates the given tables (as Table.Target names them) as the
// publisher did.
func TruncateSQL(names []string, cascade, restartIdentity bool) string {
	s := "TRUNCATE " + strings.Join(names, ", ")
	if restartIdentity {
		s += " RESTART IDENTITY"
	}
	if cascade {
		s += " CASCADE"
	}
	return s
}
