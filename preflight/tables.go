package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/nearest"
	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

// targetTable is what the checks read of a published table on the target.
type targetTable struct {
	kind                string
	schemaUsage         bool
	schemaCreate        bool // CREATE on its schema: copy_defer_indexes rebuilds indexes there where it may
	privileges          map[string]bool
	owns                bool
	owner               string
	columns             []Column
	generated, required map[string]bool // generated columns; NOT NULL without a default
}

// privileges are the table privileges a run's statements use: SELECT (the
// keys of updates and deletes, conflict detection) and INSERT always, the
// others as the publications publish them.
func neededPrivileges(ops map[string]bool) []string {
	out := []string{"SELECT", "INSERT"}
	for _, op := range []string{"update", "delete", "truncate"} {
		if ops[op] {
			out = append(out, strings.ToUpper(op))
		}
	}
	return out
}

func checkTables(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, pub published, role string, rep *Report) {
	if len(pub.tables) == 0 {
		return
	}
	needs := neededPrivileges(pub.ops)
	var tableProbs, colProbs, rowProbs []Problem
	var indexesKept []string
	for _, t := range pub.tables {
		name := t.name()
		tt, found, err := readTargetTable(ctx, conn, t.Schema, t.Name)
		switch {
		case err != nil:
			tableProbs = append(tableProbs, broken(name, "reading it on the target", err))
			continue
		case !found && cfg.Schema == schemacopy.Copy:
			continue // checkSchemaCopy's
		case !found:
			what, fix := missingTable(t.Schema, t.Name, nearTable(ctx, conn, t.Schema, t.Name))
			tableProbs = append(tableProbs, pending(cfg, pub, fail(name, what, fix)))
			continue
		case tt.kind != "r" && tt.kind != "p":
			tableProbs = append(tableProbs, fail(name, "is not a table on the target (relkind "+tt.kind+")", "apply to a table of that name"))
			continue
		}
		tableProbs = append(tableProbs, tablePrivileges(cfg, t.Schema, name, role, needs, tt)...)
		if !tt.owns || !tt.schemaCreate {
			indexesKept = append(indexesKept, name)
		}
		for _, p := range compareColumns(name, t.columns, tt) {
			colProbs = append(colProbs, pending(cfg, pub, p))
		}
		if !pub.slotExists && cfg.CopyData && cfg.ExistingData == tablesync.ExistingError && tt.privileges["SELECT"] && tt.schemaUsage {
			rowProbs = append(rowProbs, heldRows(ctx, conn, name)...)
		}
	}
	rep.add(sideTarget, "published tables", fmt.Sprintf("%d tables; the role needs %s on each", len(pub.tables), strings.Join(needs, ", ")), tableProbs...)
	rep.add(sideTarget, "published columns and types", columnsDetail(colProbs), colProbs...)
	if !pub.slotExists && cfg.CopyData {
		rep.add(sideTarget, "rows already on the target", "existing_data = "+string(cfg.ExistingData), rowProbs...)
	}
	if cfg.CopyData && cfg.CopyDeferIndexes {
		rep.add(sideTarget, "indexes during the copy", deferDetail(len(pub.tables), indexesKept, role))
	}
}

// deferDetail says where copy_defer_indexes builds a copied table's
// indexes after its rows, of tables: where the role may, which is no
// problem elsewhere, only slower (kept: the tables it may not, where the
// copy keeps them in place), with the fix.
func deferDetail(tables int, kept []string, role string) string {
	if len(kept) == 0 {
		return "copy_defer_indexes = on: built after the rows, on every table"
	}
	const most = 10
	names := strings.Join(kept[:min(len(kept), most)], ", ")
	if len(kept) > most {
		names += fmt.Sprintf(" and %d more", len(kept)-most)
	}
	return fmt.Sprintf("copy_defer_indexes = on: built after the rows on %d of %d tables; %s keep theirs in place during the copy (slower), as role %s does not own them or may not create in their schema: to defer them too, ALTER TABLE ... OWNER TO %s and GRANT CREATE ON SCHEMA ... TO %s",
		tables-len(kept), tables, names, role, ident(role), ident(role))
}

// tablePrivileges: what role (the target's) needs on a published table
// (name, in schema; tt as read on the target) for the settings: the
// privileges needs names and the schema's USAGE, and, to install triggers,
// ownership (copy_defer_indexes asks for none: the copy keeps the indexes
// of a table the role may not rebuild them on, see deferDetail).
func tablePrivileges(cfg subscriber.Config, schema, name, role string, needs []string, tt targetTable) []Problem {
	var missing []string
	var out []Problem
	for _, p := range needs {
		if !tt.privileges[p] {
			missing = append(missing, p)
		}
	}
	if !tt.schemaUsage {
		out = append(out, fail(name, "role "+role+" may not use schema "+schema, "GRANT USAGE ON SCHEMA "+ident(schema)+" TO "+ident(role)+";"))
	}
	if len(missing) > 0 {
		out = append(out, fail(name, "role "+role+" lacks "+strings.Join(missing, ", ")+" on it", "GRANT "+strings.Join(missing, ", ")+" ON "+name+" TO "+ident(role)+"; "+
			parapply.AlterDefaultPrivileges(tt.owner, schema, strings.Join(needs, ", "), "TABLES", role)))
	}
	if !tt.owns && cfg.DetectUpdateDeleted {
		out = append(out, fail(name, "detect_update_deleted installs a trigger on it: role "+role+" must own the table", "ALTER TABLE "+name+" OWNER TO "+ident(role)+";"))
	}
	return out
}

// heldRows: a target table (name) that already holds rows, which the
// initial copy with existing_data = error refuses.
func heldRows(ctx context.Context, conn *pgx.Conn, name string) []Problem {
	var held bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+name+")").Scan(&held); err != nil || !held {
		return nil
	}
	return []Problem{fail(name, "holds rows, and the initial copy would copy the publisher's rows on top of them",
		"empty it (TRUNCATE "+name+"), or set existing_data = truncate or keep, or copy_data = off if it is already in sync")}
}

// missingTable words a published table the target lacks: the target's
// table it was likely meant to be (near, schema and name; none when
// empty), and the statement that gives that one the publisher's name,
// before the way to create it.
func missingTable(schema, name string, near [2]string) (what, fix string) {
	qn := quoteName(schema, name)
	create := "create it there with the publisher's columns (pg_dump --schema-only --table=" + qn + " on the publisher gives its definition)"
	switch {
	case near[1] == "":
		return "does not exist on the target", create
	case near[0] != schema:
		other := quoteName(near[0], near[1])
		return "does not exist on the target, but " + other + " does: did you mean it? parapply applies to the table of the publisher's schema and name",
			"if " + other + " is it: ALTER TABLE " + other + " SET SCHEMA " + ident(schema) + "; else " + create
	}
	other := quoteName(near[0], near[1])
	return "does not exist on the target, but " + other + " does: did you mean it? parapply applies to the table of the publisher's name",
		"if " + other + " is it: ALTER TABLE " + other + " RENAME TO " + ident(name) + "; else " + create
}

// nearTable finds the target's table a published table missing there was
// likely meant to be: one of that name in another schema, else one of a
// name near it in its schema ({"", ""} when none).
func nearTable(ctx context.Context, conn *pgx.Conn, schema, name string) [2]string {
	rows, _ := conn.Query(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition AND (n.nspname = $1 OR c.relname = $2)
			AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'parapply') ORDER BY 1, 2`, schema, name)
	var same []string
	var elsewhere [2]string
	var nsp, rel string
	_, err := pgx.ForEachRow(rows, []any{&nsp, &rel}, func() error {
		switch {
		case rel == name && elsewhere[1] == "":
			elsewhere = [2]string{nsp, rel}
		case nsp == schema:
			same = append(same, rel)
		}
		return nil
	})
	switch {
	case err != nil:
		return [2]string{}
	case elsewhere[1] != "":
		return elsewhere
	}
	if near := nearest.Name(name, same); near != "" {
		return [2]string{schema, near}
	}
	return [2]string{}
}

// columnsDetail is the column check's verdict in words that agree with
// its outcome: can every publisher value be stored as it is?
func columnsDetail(probs []Problem) string {
	switch {
	case slices.ContainsFunc(probs, func(p Problem) bool { return p.Fails }):
		return "can every publisher value be stored: no"
	case slices.ContainsFunc(probs, func(p Problem) bool { return p.Unfinished }):
		return "can every publisher value be stored: not known"
	case len(probs) > 0:
		return "can every publisher value be stored: not all as they are"
	}
	return "can every publisher value be stored: yes"
}

// pending makes a schema difference a warning where the stream may still
// hold the DDL that ends it: ddl = apply, and a slot that has run.
func pending(cfg subscriber.Config, pub published, p Problem) Problem {
	if cfg.DDL == subscriber.DDLApply && pub.slotExists && p.Fails {
		p.Fails = false
		p.What += " (ddl = apply: DDL still to come in the stream may bring the target level; if not, the first change it cannot take stops the run)"
	}
	return p
}

// compareColumns checks that every published column has a column on the
// target that takes its values, and that the target has no column an
// insert would leave NULL against a NOT NULL without a default.
func compareColumns(table string, pub []Column, tt targetTable) []Problem {
	var out []Problem
	byName := map[string]Column{}
	for _, c := range tt.columns {
		byName[c.Name] = c
	}
	for _, c := range pub {
		tc, ok := byName[c.Name]
		col := "column " + ident(c.Name)
		switch {
		case tt.generated[c.Name]:
			out = append(out, fail(table, col+" is generated on the target and published by the publisher", "drop the generation on the target (ALTER TABLE "+table+" ALTER COLUMN "+ident(c.Name)+" DROP EXPRESSION;), or leave the column out of the publication"))
			continue
		case !ok:
			out = append(out, fail(table, col+" is missing on the target", "ALTER TABLE "+table+" ADD COLUMN "+ident(c.Name)+" "+c.Type+";"))
			continue
		}
		fit := Compare(c, tc)
		switch {
		case fit.Fails && len(fit.Labels) > 0:
			var fix []string
			for _, l := range fit.Labels {
				fix = append(fix, "ALTER TYPE "+tc.Type+" ADD VALUE "+literal(l)+";")
			}
			out = append(out, fail(table, col+": "+fit.Why, strings.Join(fix, " ")))
		case fit.Fails:
			out = append(out, fail(table, col+": "+fit.Why, "ALTER TABLE "+table+" ALTER COLUMN "+ident(c.Name)+" TYPE "+c.Type+";"))
		case fit.Warns:
			out = append(out, warn(table, col+": "+fit.Why, ""))
		}
	}
	for _, c := range tt.columns {
		if tt.required[c.Name] && !slices.ContainsFunc(pub, func(p Column) bool { return p.Name == c.Name }) {
			out = append(out, fail(table, "column "+ident(c.Name)+" is NOT NULL without a default on the target and not published: every insert would be refused",
				"ALTER TABLE "+table+" ALTER COLUMN "+ident(c.Name)+" SET DEFAULT ...; or DROP NOT NULL"))
		}
	}
	return out
}

func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// readTargetTable reads one table on the target; found is false when
// there is none of that name.
func readTargetTable(ctx context.Context, conn *pgx.Conn, schema, name string) (tt targetTable, found bool, err error) {
	var oid uint32
	var sel, ins, upd, del, trunc bool
	err = conn.QueryRow(ctx, `SELECT c.oid, c.relkind::text, pg_catalog.has_schema_privilege(n.oid, 'USAGE'),
			pg_catalog.has_schema_privilege(n.oid, 'CREATE'), pg_catalog.has_table_privilege(c.oid, 'SELECT'), pg_catalog.has_table_privilege(c.oid, 'INSERT'),
			pg_catalog.has_table_privilege(c.oid, 'UPDATE'), pg_catalog.has_table_privilege(c.oid, 'DELETE'),
			pg_catalog.has_table_privilege(c.oid, 'TRUNCATE'), pg_catalog.pg_has_role(c.relowner, 'USAGE'), pg_catalog.pg_get_userbyid(c.relowner)::text
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
		schema, name).Scan(&oid, &tt.kind, &tt.schemaUsage, &tt.schemaCreate, &sel, &ins, &upd, &del, &trunc, &tt.owns, &tt.owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return tt, false, nil
	}
	if err != nil {
		return tt, false, err
	}
	tt.privileges = map[string]bool{"SELECT": sel, "INSERT": ins, "UPDATE": upd, "DELETE": del, "TRUNCATE": trunc}
	var cols []Column
	if cols, tt.generated, tt.required, err = readColumns(ctx, conn, oid); err != nil {
		return tt, true, err
	}
	tt.columns = slices.DeleteFunc(cols, func(c Column) bool { return tt.generated[c.Name] })
	return tt, true, err
}

// checkTargetSequences: parapply reads a target sequence before it moves
// it forward, and never sets one it cannot read. One missing in a schema
// where schema = copy makes tables (copied) is taken as the copy's to make
// (it makes the sequences of the tables it makes, and those no table owns;
// which table owns a sequence is not read here).
func checkTargetSequences(ctx context.Context, conn *pgx.Conn, pub published, role string, copied map[string]bool, rep *Report) {
	var probs []Problem
	var made int
	for _, s := range pub.sequences {
		var exists, sel, upd bool
		var owner string
		err := conn.QueryRow(ctx, `SELECT true, pg_catalog.has_sequence_privilege(c.oid, 'SELECT'), pg_catalog.has_sequence_privilege(c.oid, 'UPDATE'),
				pg_catalog.pg_get_userbyid(c.relowner)::text
			FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'S'`, s.Schema, s.Name).Scan(&exists, &sel, &upd, &owner)
		switch {
		case errors.Is(err, pgx.ErrNoRows) && copied[s.Schema]:
			made++
		case errors.Is(err, pgx.ErrNoRows):
			probs = append(probs, warn(s.QualifiedName(), "missing on the target: not carried", "create it there"))
		case err != nil:
			probs = append(probs, warn(s.QualifiedName(), err.Error(), ""))
		case !sel || !upd:
			probs = append(probs, warn(s.QualifiedName(), "role "+role+" may not read and set it: not carried", "GRANT SELECT, UPDATE ON SEQUENCE "+s.QualifiedName()+" TO "+ident(role)+"; "+
				parapply.AlterDefaultPrivileges(owner, s.Schema, "SELECT, UPDATE", "SEQUENCES", role)))
		}
	}
	line := fmt.Sprintf("%d sequences carried from the publisher", len(pub.sequences))
	if made > 0 {
		line += fmt.Sprintf(" (%d of them made on the target by the schema copy)", made)
	}
	rep.add(sideTarget, "sequences", line, probs...)
}
