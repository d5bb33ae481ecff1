package schemacopy

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ReadPublisher reads on the publisher (conn) what a dump of the published
// tables (published) needs: the schemas holding them, the relations of
// those schemas to leave out (every table, view, materialized view and
// foreign table that is not published: sequences stay, for the tables'
// defaults), and the owner table of each index and constraint of a
// published table, as pg_dump names them.
func ReadPublisher(ctx context.Context, conn *pgx.Conn, published []Name) (schemas []string, exclude []Name, owners Owners, err error) {
	ss, ns := make([]string, len(published)), make([]string, len(published))
	for i, p := range published {
		ss[i], ns[i] = p.Schema, p.Name
	}
	const pub = `ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) p(s, n)`
	if err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(DISTINCT s ORDER BY s), '{}') FROM `+pub, ss, ns).Scan(&schemas); err != nil {
		return nil, nil, nil, fmt.Errorf("schema = copy: reading the published schemas: %w", err)
	}
	rows, _ := conn.Query(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ANY ($3) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
		  AND NOT EXISTS (SELECT 1 FROM `+pub+` WHERE p.s = n.nspname AND p.n = c.relname) ORDER BY 1, 2`, ss, ns, schemas)
	exclude, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Name])
	if err != nil {
		return nil, nil, nil, fmt.Errorf("schema = copy: reading the relations not published: %w", err)
	}
	rows, _ = conn.Query(ctx, `SELECT n.nspname::text, i.relname::text, n.nspname::text, t.relname::text
		FROM `+pub+` JOIN pg_catalog.pg_namespace n ON n.nspname = p.s JOIN pg_catalog.pg_class t ON t.relnamespace = n.oid AND t.relname = p.n
		JOIN pg_catalog.pg_index x ON x.indrelid = t.oid JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
		UNION ALL
		SELECT n.nspname::text, t.relname || ' ' || c.conname, n.nspname::text, t.relname::text
		FROM `+pub+` JOIN pg_catalog.pg_namespace n ON n.nspname = p.s JOIN pg_catalog.pg_class t ON t.relnamespace = n.oid AND t.relname = p.n
		JOIN pg_catalog.pg_constraint c ON c.conrelid = t.oid AND c.contype IN ('p', 'u', 'x')`, ss, ns)
	owners = Owners{}
	var schema, name string
	var owner Name
	_, err = pgx.ForEachRow(rows, []any{&schema, &name, &owner.Schema, &owner.Name}, func() error {
		owners[OwnerKey(schema, name)] = owner
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("schema = copy: reading the published tables' indexes: %w", err)
	}
	return schemas, exclude, owners, nil
}

// TargetSchemas tells which of schemas the target (conn) has.
func TargetSchemas(ctx context.Context, conn *pgx.Conn, schemas []string) (map[string]bool, error) {
	rows, _ := conn.Query(ctx, `SELECT nspname::text FROM pg_catalog.pg_namespace WHERE nspname = ANY ($1)`, schemas)
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("schema = copy: reading the target's schemas: %w", err)
	}
	out := map[string]bool{}
	for _, s := range have {
		out[s] = true
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
	for i, e := range p.After {
		if _, err := tx.Exec(ctx, `INSERT INTO parapply.deferred_ddl (slot_name, ord, kind, name, statement) VALUES ($1, $2, $3, $4, $5)`,
			slot, i, e.Type, qualified(e), e.SQL); err != nil {
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
