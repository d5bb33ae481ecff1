package pgerr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestBinaryInput: the refusals of a value in binary form that PostgreSQL
// 15 to 18 give (each as the server words it), found, with the column a
// COPY names; errors that text would meet alike, or that no value caused,
// are not.
func TestBinaryInput(t *testing.T) {
	pg := func(code, msg, where string) error {
		return fmt.Errorf("copy \"public\".\"t\": writing to the target: %w", &pgconn.PgError{Severity: "ERROR", Code: code, Message: msg, Where: where})
	}
	tests := []struct {
		name   string
		err    error
		ok     bool
		column string
	}{
		{"an empty tsquery by binary COPY", pg("XX000", "malformed tsquery: operand not found", "COPY tq, line 1, column q"), true, "q"},
		{"an empty tsquery as a bind parameter (array element)", pg("XX000", "malformed tsquery: operand not found", "unnamed portal parameter $2"), true, ""},
		{"a named portal's parameter", pg("22P02", "invalid input syntax", `portal "p1" parameter $1`), true, ""},
		{"invalid_binary_representation, no context", pg("22P03", "incorrect binary data format", ""), true, ""},
		{"invalid_binary_representation in a COPY", pg("22P03", "insufficient data left in message", "COPY Odd, name, line 7, column x: y"), true, "x: y"},
		{"no binary output function (aclitem)", pg("42883", "no binary output function available for type aclitem", ""), true, ""},
		{"a data error of a text COPY's column names it", pg("22P02", `invalid input syntax for type integer: "x"`, `COPY t, line 2, column n: "x"`), true, "n"},
		{"COPY's row framing", pg("22P04", "row field count is 2, expected 3", "COPY t, line 1"), false, ""},
		{"a data error of the statement (a cast)", pg("22001", "value too long for type character varying(3)", ""), false, ""},
		{"an internal error elsewhere", pg("XX000", "cache lookup failed for relation 1", "SQL statement \"SELECT 1\""), false, ""},
		{"a constraint", pg("23505", "duplicate key value violates unique constraint", "COPY t, line 1"), false, ""},
		{"a not-null violation in a COPY", pg("23502", "null value in column", "COPY t, line 1, column n"), false, ""},
		{"not a server error", errors.New("connection reset"), false, ""},
		{"nil", nil, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			column, ok := BinaryInput(tt.err)
			if ok != tt.ok || column != tt.column {
				t.Errorf("BinaryInput(%v) = %q, %v; want %q, %v", tt.err, column, ok, tt.column, tt.ok)
			}
		})
	}
}
