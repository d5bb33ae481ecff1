// Package verify compares a target with its source, table by table and row
// for row, so tests, the demo and the benchmark judge a run by the data.
package verify

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
)

// Result describes one table's comparison.
type Result struct {
	Table  string
	Rows   int64
	Equal  bool
	Detail string // the first difference, when not equal
}

// rowsQuery renders every row as the text of a row constructor over the
// given columns in name order, sorted, so both sides compare independent of
// physical order and column position.
func rowsQuery(table string, cols []string, where string) string {
	return "SELECT r FROM (SELECT " + rowText(cols) + " AS r FROM " + table + filter(where) + ") s ORDER BY r COLLATE \"C\""
}

// rowText is a row's text over cols.
func rowText(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = parapply.QuoteIdent(c)
	}
	return "ROW(" + strings.Join(q, ", ") + ")::text"
}

// filter is the WHERE clause of a row filter ("" for none).
func filter(where string) string {
	if where == "" {
		return ""
	}
	return " WHERE " + where
}

// Columns lists a table's non-generated, non-dropped columns, by name.
func Columns(ctx context.Context, conn *pgx.Conn, table string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT attname FROM pg_catalog.pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attname`, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func setSession(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "SET TimeZone = 'UTC'; SET DateStyle = ISO; SET extra_float_digits = 3; SET IntervalStyle = postgres")
	return err
}

// Table compares one table (a quoted, qualified name) row for row over the
// source's columns.
func Table(ctx context.Context, src, dst *pgx.Conn, table string) (Result, error) {
	cols, err := Columns(ctx, src, table)
	if err != nil {
		return Result{Table: table}, fmt.Errorf("columns of %s: %w", table, err)
	}
	return Rows(ctx, src, dst, table, cols, "")
}

// Rows compares one table row for row over cols, the source's rows those
// where (a row filter; "" for all) holds.
func Rows(ctx context.Context, src, dst *pgx.Conn, table string, cols []string, where string) (Result, error) {
	res := Result{Table: table}
	for _, c := range []*pgx.Conn{src, dst} {
		if err := setSession(ctx, c); err != nil {
			return res, err
		}
	}
	a, err := src.Query(ctx, rowsQuery(table, cols, where))
	if err != nil {
		return res, fmt.Errorf("reading %s on the source: %w", table, err)
	}
	defer a.Close()
	srcRows, err := pgx.CollectRows(a, pgx.RowTo[string])
	if err != nil {
		return res, err
	}
	b, err := dst.Query(ctx, rowsQuery(table, cols, ""))
	if err != nil {
		return res, fmt.Errorf("reading %s on the target: %w", table, err)
	}
	dstRows, err := pgx.CollectRows(b, pgx.RowTo[string])
	if err != nil {
		return res, err
	}
	res.Rows = int64(len(srcRows))
	i, j := 0, 0
	for i < len(srcRows) && j < len(dstRows) {
		switch {
		case srcRows[i] == dstRows[j]:
			i++
			j++
		case srcRows[i] < dstRows[j]:
			res.Detail = fmt.Sprintf("row %s is on the source, not on the target", clip(srcRows[i]))
			return res, nil
		default:
			res.Detail = fmt.Sprintf("row %s is on the target, not on the source", clip(dstRows[j]))
			return res, nil
		}
	}
	if i < len(srcRows) {
		res.Detail = fmt.Sprintf("row %s is on the source, not on the target", clip(srcRows[i]))
		return res, nil
	}
	if j < len(dstRows) {
		res.Detail = fmt.Sprintf("row %s is on the target, not on the source", clip(dstRows[j]))
		return res, nil
	}
	res.Equal = true
	return res, nil
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// Tables compares several tables and returns an error naming the first that
// differs.
func Tables(ctx context.Context, src, dst *pgx.Conn, tables ...string) ([]Result, error) {
	var out []Result
	for _, t := range tables {
		r, err := Table(ctx, src, dst, t)
		if err != nil {
			return out, err
		}
		out = append(out, r)
		if !r.Equal {
			return out, fmt.Errorf("%s differs: %s", t, r.Detail)
		}
	}
	return out, nil
}

// Sum is an order-independent summary of a table: its row count and the sum
// of a 64-bit hash of every row's text. Two tables with equal sums hold the
// same rows with overwhelming probability; cheap enough for millions of rows.
type Sum struct {
	Rows int64
	Hash string
}

// Checksum computes a table's Sum over the source's column list.
func Checksum(ctx context.Context, conn *pgx.Conn, table string, cols []string) (Sum, error) {
	return ChecksumWhere(ctx, conn, table, cols, "")
}

// ChecksumWhere is Checksum over the rows where (a row filter; "" for all)
// holds.
func ChecksumWhere(ctx context.Context, conn *pgx.Conn, table string, cols []string, where string) (Sum, error) {
	if err := setSession(ctx, conn); err != nil {
		return Sum{}, err
	}
	sql := "SELECT count(*), coalesce(sum(('x' || substr(md5(" + rowText(cols) + "), 1, 16))::bit(64)::bigint::numeric), 0)::text FROM " + table + filter(where)
	var s Sum
	err := conn.QueryRow(ctx, sql).Scan(&s.Rows, &s.Hash)
	return s, err
}

// Checksums compares tables by Sum and returns an error naming the first
// that differs.
func Checksums(ctx context.Context, src, dst *pgx.Conn, tables ...string) error {
	for _, t := range tables {
		cols, err := Columns(ctx, src, t)
		if err != nil {
			return fmt.Errorf("columns of %s: %w", t, err)
		}
		a, err := Checksum(ctx, src, t, cols)
		if err != nil {
			return fmt.Errorf("checksum of %s on the source: %w", t, err)
		}
		b, err := Checksum(ctx, dst, t, cols)
		if err != nil {
			return fmt.Errorf("checksum of %s on the target: %w", t, err)
		}
		if a != b {
			return fmt.Errorf("%s differs: source %d rows (sum %s), target %d rows (sum %s)", t, a.Rows, a.Hash, b.Rows, b.Hash)
		}
	}
	return nil
}
