package schemacopy

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Publisher is what ReadPublisher reads on the publisher for a dump of
// the tables to make.
type Publisher struct {
	// Schemas are those holding the tables.
	Schemas []string
	// Exclude are the relations of Schemas to leave out: every table,
	// view, materialized view and foreign table that is not to be made
	// (sequences stay, for the tables' defaults).
	Exclude []Name
	// Owners names the table of each index and constraint of the tables.
	Owners Owners
	// Sequences names the table that owns each owned sequence of Schemas
	// (serial and identity columns).
	Sequences map[Name]Name
}

// ReadPublisher reads on the publisher (conn) what a dump of tables needs:
// the schemas holding them, the relations of those schemas to leave out,
// the owner table of each index and constraint of the tables, as pg_dump
// names them, and the owner table of each owned sequence.
func ReadPublisher(ctx context.Context, conn *pgx.Conn, tables []Name) (Publisher, error) {
	var p Publisher
	ss, ns := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		ss[i], ns[i] = t.Schema, t.Name
	}
	const pub = `ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) p(s, n)`
	if err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(DISTINCT s ORDER BY s), '{}') FROM `+pub, ss, ns).Scan(&p.Schemas); err != nil {
		return p, fmt.Errorf("schema = copy: reading the published schemas: %w", err)
	}
	rows, _ := conn.Query(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ANY ($3) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
		  AND NOT EXISTS (SELECT 1 FROM `+pub+` WHERE p.s = n.nspname AND p.n = c.relname) ORDER BY 1, 2`, ss, ns, p.Schemas)
	var err error
	if p.Exclude, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Name]); err != nil {
		return p, fmt.Errorf("schema = copy: reading the relations not published: %w", err)
	}
	rows, _ = conn.Query(ctx, `SELECT n.nspname::text, i.relname::text, n.nspname::text, t.relname::text
		FROM `+pub+` JOIN pg_catalog.pg_namespace n ON n.nspname = p.s JOIN pg_catalog.pg_class t ON t.relnamespace = n.oid AND t.relname = p.n
		JOIN pg_catalog.pg_index x ON x.indrelid = t.oid JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
		UNION ALL
		SELECT n.nspname::text, t.relname || ' ' || c.conname, n.nspname::text, t.relname::text
		FROM `+pub+` JOIN pg_catalog.pg_namespace n ON n.nspname = p.s JOIN pg_catalog.pg_class t ON t.relnamespace = n.oid AND t.relname = p.n
		JOIN pg_catalog.pg_constraint c ON c.conrelid = t.oid AND c.contype IN ('p', 'u', 'x')`, ss, ns)
	p.Owners = Owners{}
	var schema, name string
	var owner Name
	_, err = pgx.ForEachRow(rows, []any{&schema, &name, &owner.Schema, &owner.Name}, func() error {
		p.Owners[OwnerKey(schema, name)] = owner
		return nil
	})
	if err != nil {
		return p, fmt.Errorf("schema = copy: reading the published tables' indexes: %w", err)
	}
	p.Sequences, err = sequenceOwners(ctx, conn, p.Schemas)
	return p, err
}

// sequenceOwners reads which table owns each owned sequence of schemas.
func sequenceOwners(ctx context.Context, conn *pgx.Conn, schemas []string) (map[Name]Name, error) {
	rows, _ := conn.Query(ctx, `SELECT n.nspname::text, s.relname::text, tn.nspname::text, t.relname::text
		FROM pg_catalog.pg_class s JOIN pg_catalog.pg_namespace n ON n.oid = s.relnamespace
		JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = s.oid
		  AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.deptype IN ('a', 'i')
		JOIN pg_catalog.pg_class t ON t.oid = d.refobjid JOIN pg_catalog.pg_namespace tn ON tn.oid = t.relnamespace
		WHERE s.relkind = 'S' AND n.nspname = ANY ($1)`, schemas)
	out := map[Name]Name{}
	var seq, table Name
	_, err := pgx.ForEachRow(rows, []any{&seq.Schema, &seq.Name, &table.Schema, &table.Name}, func() error {
		out[seq] = table
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("schema = copy: reading the owners of the published schemas' sequences: %w", err)
	}
	return out, nil
}

// TargetHas asks the target (conn), in one query, which of objects it
// has already.
func TargetHas(ctx context.Context, conn *pgx.Conn, objects []Object) (map[Object]bool, error) {
	kinds, schemas, names := make([]string, len(objects)), make([]string, len(objects)), make([]string, len(objects))
	for i, o := range objects {
		kinds[i], schemas[i], names[i] = o.Kind, o.Schema, o.Name
	}
	var answers []bool
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', '', true)`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, hasQuery, kinds, schemas, names).Scan(&answers)
	})
	if err != nil {
		return nil, fmt.Errorf("schema = copy: reading which of the dump's objects the target has: %w", err)
	}
	if len(answers) != len(objects) {
		return nil, fmt.Errorf("schema = copy: asked the target about %d objects, got %d answers", len(objects), len(answers))
	}
	out := make(map[Object]bool, len(objects))
	for i, o := range objects {
		out[o] = answers[i]
	}
	return out, nil
}

// RunNow runs the entries in tx, each named in its error.
func RunNow(ctx context.Context, tx pgx.Tx, entries []Entry) error {
	for _, e := range entries {
		if _, err := tx.Exec(ctx, e.SQL); err != nil {
			return fmt.Errorf("schema = copy: %s %s on the target: %w", e.Type, qualified(e), err)
		}
	}
	return nil
}

// qualified is an entry's name with its schema, as pg_dump names it.
func qualified(e Entry) string {
	if e.Schema == "" || e.Schema == "-" {
		return e.Name
	}
	return e.Schema + "." + e.Name
}

// SaveDeferred records, in tx, what the plan runs later for slot: its
// indexes in parapply.deferred_index (which the copy builds once each
// table's rows are in), the rest in parapply.deferred_ddl.
func SaveDeferred(ctx context.Context, tx pgx.Tx, slot string, p Plan) error {
	for _, d := range p.Indexes {
		if _, err := tx.Exec(ctx, `INSERT INTO parapply.deferred_index (slot_name, table_name, index_name, recreate, ord) VALUES ($1, $2, $3, $4, $5)`,
			slot, d.Table, d.Name, d.SQL, d.Ord); err != nil {
			return fmt.Errorf("schema = copy: saving index %s of %s for after the copy: %w", d.Name, d.Table, err)
		}
	}
	// After what an earlier copy left, if any.
	var next int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(ord) + 1, 0) FROM parapply.deferred_ddl WHERE slot_name = $1`, slot).Scan(&next); err != nil {
		return fmt.Errorf("schema = copy: reading parapply.deferred_ddl: %w", err)
	}
	for i, e := range p.After {
		if _, err := tx.Exec(ctx, `INSERT INTO parapply.deferred_ddl (slot_name, ord, kind, name, statement) VALUES ($1, $2, $3, $4, $5)`,
			slot, next+i, e.Type, qualified(e), e.SQL); err != nil {
			return fmt.Errorf("schema = copy: saving %s %s for after the copy: %w", e.Type, qualified(e), err)
		}
	}
	return nil
}

// RunDeferred runs what parapply.deferred_ddl holds for slot, in order,
// each statement in a transaction of its own that deletes its row (with
// the empty search_path pg_dump's statements are written for), and
// returns how many ran.
func RunDeferred(ctx context.Context, conn *pgx.Conn, slot string) (int, error) {
	type row struct {
		Ord             int
		Kind, Name, SQL string
	}
	rows, _ := conn.Query(ctx, `SELECT ord, kind, name, statement FROM parapply.deferred_ddl WHERE slot_name = $1 ORDER BY ord`, slot)
	todo, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return 0, fmt.Errorf("reading parapply.deferred_ddl: %w", err)
	}
	for i, r := range todo {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', '', true)`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, r.SQL); err != nil {
				return fmt.Errorf("schema = copy: %s %s on the target after the copy: %w", r.Kind, r.Name, err)
			}
			_, err := tx.Exec(ctx, `DELETE FROM parapply.deferred_ddl WHERE slot_name = $1 AND ord = $2`, slot, r.Ord)
			return err
		})
		if err != nil {
			return i, err
		}
	}
	return len(todo), nil
}
