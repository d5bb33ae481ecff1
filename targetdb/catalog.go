package targetdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
)

// ErrSchema marks a published table the target cannot take as it is.
var ErrSchema = errors.New("target schema does not match the publication")

// GeneratedOnTarget is the error for a published column that is generated
// on the target: the target computes such a column and cannot take the
// publisher's value, so the built-in subscription refuses it too
// (PostgreSQL 18: "has incompatible generated column"; before: "is missing
// replicated column"), and so does parapply, in the copy and the stream.
func GeneratedOnTarget(table, column string) error {
	col := parapply.QuoteIdent(column)
	return fmt.Errorf("%w: column %s of published table %s is generated on the target, but the publisher sends its values (the built-in subscription refuses this too); make it a plain column on the target (ALTER TABLE %s ALTER COLUMN %s DROP EXPRESSION), or leave it out of the publication (a column list, or publish_generated_columns = none where it is generated on the publisher)",
		ErrSchema, col, table, table, col)
}

// ErrNoTable is matched (errors.Is) by ReadTable's error for a published
// table missing on the target: the applier tells it from other schema
// errors (a table the copy has not made yet may still come).
var ErrNoTable = errors.New("no such table")

type missingTable struct{ error }

func (e missingTable) Unwrap() error        { return e.error }
func (e missingTable) Is(target error) bool { return target == ErrNoTable }

// Table is what the target's catalog says of a published table, as far
// as the checks of a start need it and the applier builds on it.
type Table struct {
	// OID is the target table's; Partitioned is true for a partitioned
	// table.
	OID         uint32
	Partitioned bool
	// NoCopy is true when the table has row-level security enabled or an
	// INSERT rule that fires for replicated changes: COPY would bypass or
	// refuse them.
	NoCopy bool
	// Columns holds, per published column (in the relation's order), the
	// target's column.
	Columns []Column
	// ByName holds every column of the target table, by name.
	ByName map[string]Column
}

// Column is the target's column of a published column.
type Column struct {
	// Type is the target type (format_type with typmod -1, so that it
	// casts to the type without a length: bpchar, not character, which
	// is character(1)), TypeOID its OID.
	Type    string
	TypeOID uint32
	// AlwaysIdentity is true for GENERATED ALWAYS AS IDENTITY.
	AlwaysIdentity bool
	// Receives is true when the type reads a binary value and has an
	// array type of its own, not being one, nor an OID alias type
	// (OIDAliasTypes): its values can travel as an array of it in binary.
	// Enum is true for an enum type.
	Receives, Enum bool
}

// OIDAliasTypes are the types whose values name catalog objects by OID
// (regclass, regtype, ...), as a SQL array of them: their binary form is
// the OID, which names another object, or none, on the other server, where
// their text form names the object, so they travel in text.
const OIDAliasTypes = `'{regproc,regprocedure,regoper,regoperator,regclass,regcollation,regtype,regrole,regnamespace,regconfig,regdictionary}'::pg_catalog.regtype[]`

// FirstUserOID is where the OIDs of objects not built into PostgreSQL
// start (FirstNormalObjectId): below it, a type's OID names the same type,
// with the same binary form, on every server.
const FirstUserOID = 16384

// BinaryFit reports whether a published column whose type is pubType on the
// publisher can go from pgoutput's binary tuple data to this column as it
// is: the same built-in type on both sides, which reads a binary value and
// can be an array's element; or an enum on the target (the binary form of
// an enum, or of the text the publisher has where the target has an enum,
// is its label). Anything else must travel as text, cast on the target.
func (c Column) BinaryFit(pubType uint32) bool {
	if pubType >= FirstUserOID {
		return c.Enum
	}
	return pubType == c.TypeOID && c.Receives
}

// ReadTable reads the target's catalog for the table rel names and checks
// that it is a table with every published column, none generated there;
// a refusal wraps ErrSchema and names the fix.
func ReadTable(ctx context.Context, conn *pgx.Conn, rel *parapply.Relation) (*Table, error) {
	name := rel.QualifiedName()
	ns := rel.Namespace
	if ns == "" {
		ns = "pg_catalog"
	}
	t := &Table{}
	var kind string
	err := conn.QueryRow(ctx, `SELECT c.oid, c.relkind::text, c.relrowsecurity OR EXISTS (SELECT 1 FROM pg_catalog.pg_rewrite r
			WHERE r.ev_class = c.oid AND r.ev_type = '3' AND r.ev_enabled IN ('A', 'R'))
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, ns, rel.Name).Scan(&t.OID, &kind, &t.NoCopy)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, missingTable{fmt.Errorf("%w: published table %s does not exist on the target; create it there with the same columns", ErrSchema, name)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the target catalog for %s: %w", name, err)
	}
	if kind != "r" && kind != "p" {
		return nil, fmt.Errorf("%w: %s on the target is not a table (relkind %s)", ErrSchema, name, kind)
	}
	t.Partitioned = kind == "p"
	rows, err := conn.Query(ctx, `SELECT a.attname, pg_catalog.format_type(a.atttypid, -1), a.attgenerated <> '', a.attidentity = 'a', a.atttypid,
			t.typreceive <> 0 AND t.typarray <> 0 AND t.typcategory <> 'A' AND t.typtype IN ('b', 'e', 'r', 'm') AND t.oid <> ALL (`+OIDAliasTypes+`), t.typtype = 'e'
		FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, t.OID)
	if err != nil {
		return nil, fmt.Errorf("reading columns of %s on the target: %w", name, err)
	}
	type col struct {
		Column
		generated bool
	}
	cols := map[string]col{}
	for rows.Next() {
		var n string
		var c col
		if err := rows.Scan(&n, &c.Type, &c.generated, &c.AlwaysIdentity, &c.TypeOID, &c.Receives, &c.Enum); err != nil {
			return nil, err
		}
		cols[n] = c
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	t.ByName = make(map[string]Column, len(cols))
	for n, c := range cols {
		t.ByName[n] = c.Column
	}
	t.Columns = make([]Column, len(rel.Columns))
	for i, c := range rel.Columns {
		tc, ok := cols[c.Name]
		if !ok {
			return nil, fmt.Errorf("%w: column %s of published table %s is missing on the target; add it with ALTER TABLE %s ADD COLUMN %s ...", ErrSchema, parapply.QuoteIdent(c.Name), name, name, parapply.QuoteIdent(c.Name)) //nolint:staticcheck // "..." stands for the column's type, the user's to write
		}
		if tc.generated {
			return nil, GeneratedOnTarget(name, c.Name)
		}
		t.Columns[i] = tc.Column
	}
	return t, nil
}

// CheckTables verifies, before anything is applied, that every published
// table exists on the target with every published column, and returns
// what the catalog says of each.
func CheckTables(ctx context.Context, conn *pgx.Conn, rels []*parapply.Relation) ([]*Table, error) {
	tables := make([]*Table, len(rels))
	for i, rel := range rels {
		t, err := ReadTable(ctx, conn, rel)
		if err != nil {
			return nil, err
		}
		tables[i] = t
	}
	return tables, nil
}
