// Package sequences brings the publisher's sequence positions to the
// target. Logical replication carries rows, not sequences: a target that
// takes over from its publisher (a migration's cut-over) would hand out
// values the publisher already used. Positions only ever move forward on
// the target.
package sequences

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Modes of the sequences setting.
const (
	None  = "none"  // leave sequences alone
	Owned = "owned" // the sequences owned by published tables' columns (serial, identity)
	All   = "all"   // every sequence of the publisher database
)

// Sequence is one publisher sequence's position.
type Sequence struct {
	Schema, Name string
	// Last is the last value handed out; Readable is false when the role
	// may not read it (no SELECT or USAGE on the sequence), and Used false
	// when it never handed out a value (nothing to carry).
	Last     int64
	Used     bool
	Readable bool
}

// QualifiedName is the sequence's quoted schema-qualified name.
func (s Sequence) QualifiedName() string {
	return pgx.Identifier{s.Schema, s.Name}.Sanitize()
}

// Result is what Apply did with one sequence.
type Result struct {
	Sequence
	// Before is the target's last value before (Called false: none handed
	// out); Moved says the target was set to the publisher's; Missing that
	// the target has no such sequence.
	Before  int64
	Called  bool
	Moved   bool
	Missing bool
}

// Table names a published table.
type Table struct{ Schema, Name string }

// Read lists the publisher's sequences for mode: those owned by a column
// of one of tables (Owned), or all (All).
func Read(ctx context.Context, conn *pgx.Conn, mode string, tables []Table) ([]Sequence, error) {
	if mode == None {
		return nil, nil
	}
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	rows, err := conn.Query(ctx, `SELECT n.nspname::text, c.relname::text,
			pg_catalog.has_sequence_privilege(c.oid, 'SELECT,USAGE'),
			CASE WHEN pg_catalog.has_sequence_privilege(c.oid, 'SELECT,USAGE') THEN (SELECT s.last_value FROM pg_catalog.pg_sequences s WHERE s.schemaname = n.nspname AND s.sequencename = c.relname) END
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'S' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
		AND ($1 OR EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
			JOIN pg_catalog.pg_class t ON t.oid = d.refobjid JOIN pg_catalog.pg_namespace tn ON tn.oid = t.relnamespace
			WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.refclassid = 'pg_catalog.pg_class'::regclass
			AND d.deptype IN ('a', 'i')
			AND (tn.nspname::text, t.relname::text) IN (SELECT * FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])))))
		ORDER BY 1, 2`, mode == All, schemas, names)
	if err != nil {
		return nil, fmt.Errorf("reading the publisher's sequences: %w", err)
	}
	var out []Sequence
	for rows.Next() {
		var s Sequence
		var last *int64
		if err := rows.Scan(&s.Schema, &s.Name, &s.Readable, &last); err != nil {
			return nil, fmt.Errorf("reading the publisher's sequences: %w", err)
		}
		if last != nil {
			s.Last, s.Used = *last, true
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the publisher's sequences: %w", err)
	}
	return out, nil
}

// Apply sets each used sequence on the target to the publisher's last
// value, unless the target's is already there or beyond (in the direction
// the sequence counts), so a target sequence never moves backwards.
func Apply(ctx context.Context, conn *pgx.Conn, seqs []Sequence) ([]Result, error) {
	out := make([]Result, 0, len(seqs))
	for _, s := range seqs {
		r := Result{Sequence: s}
		if !s.Used || !s.Readable {
			out = append(out, r)
			continue
		}
		var before *int64
		err := conn.QueryRow(ctx, `SELECT s.last_value,
				CASE WHEN s.last_value IS NULL OR (s.increment_by > 0 AND s.last_value < $3) OR (s.increment_by < 0 AND s.last_value > $3)
				THEN pg_catalog.setval(pg_catalog.format('%I.%I', $1::text, $2::text)::regclass, $3, true) IS NOT NULL ELSE false END
			FROM pg_catalog.pg_sequences s WHERE s.schemaname = $1 AND s.sequencename = $2`, s.Schema, s.Name, s.Last).Scan(&before, &r.Moved)
		if err == pgx.ErrNoRows {
			r.Missing = true
			out = append(out, r)
			continue
		}
		if err != nil {
			return out, fmt.Errorf("setting sequence %s on the target: %w (the target role needs UPDATE on it)", s.QualifiedName(), err)
		}
		if before != nil {
			r.Before, r.Called = *before, true
		}
		out = append(out, r)
	}
	return out, nil
}

// Summary counts a sync's results.
type Summary struct {
	At                                time.Time
	Sequences, Moved, Missing, Unread int
}

// Summarize counts results.
func Summarize(rs []Result) Summary {
	s := Summary{At: time.Now(), Sequences: len(rs)}
	for _, r := range rs {
		switch {
		case r.Missing:
			s.Missing++
		case !r.Readable:
			s.Unread++
		case r.Moved:
			s.Moved++
		}
	}
	return s
}

// Sync reads the publisher's sequences on src and applies them on dst.
func Sync(ctx context.Context, src, dst *pgx.Conn, mode string, tables []Table) ([]Result, error) {
	seqs, err := Read(ctx, src, mode, tables)
	if err != nil {
		return nil, err
	}
	return Apply(ctx, dst, seqs)
}

// Connect opens an ordinary connection for Sync, named so that operators
// can tell it apart.
func Connect(ctx context.Context, dsn, appName string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cc.RuntimeParams["application_name"] = appName
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s port %d database %s user %s for the sequences: %w", cc.Host, cc.Port, cc.Database, cc.User, err)
	}
	return conn, nil
}
