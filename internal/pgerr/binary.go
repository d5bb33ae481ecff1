package pgerr

import (
	"errors"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// BinaryInput reports whether err is a server's refusal of a value in
// binary form, one that the same value in text may get past, and the
// column it names when the server said (a COPY's context), else "". The
// caller asks only of an error met while values went in binary.
//
// PostgreSQL's binary send and receive functions do not always agree: an
// empty tsquery is sent, but its receive function fails (XX000 "malformed
// tsquery: operand not found"); a type without them (aclitem) cannot go in
// binary at all (42883). So a refusal is: invalid_binary_representation
// (22P03) anywhere; a type's missing binary function (42883); and a data
// exception (class 22) or internal error (XX000) raised while a value was
// read, that is in the context of a COPY's column or of a bind parameter.
// A data error that text meets too (a value too long for the column) is
// then met again in text, where it stops as it would have.
func BinaryInput(err error) (column string, ok bool) {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return "", false
	}
	column = copyColumn(pe.Where)
	switch {
	case pe.Code == pgerrcode.InvalidBinaryRepresentation, pe.Code == pgerrcode.UndefinedFunction:
		return column, true
	case pe.Code != pgerrcode.InternalError && !strings.HasPrefix(pe.Code, pgerrcode.DataException[:2]):
		return "", false
	}
	return column, column != "" || bindParameter(pe.Where)
}

// copyColumn is the column a COPY's error context names ("COPY t, line 3,
// column q", in text followed by `: "value"`; names unquoted), "" for
// none.
func copyColumn(where string) string {
	line, _, _ := strings.Cut(where, "\n")
	if !strings.HasPrefix(line, "COPY ") {
		return ""
	}
	_, col, ok := strings.Cut(line, ", column ")
	if !ok {
		return ""
	}
	col, _, _ = strings.Cut(col, `: "`)
	return col
}

// bindParameter tells whether an error context is a bind parameter's
// ("unnamed portal parameter $1", "portal \"p\" parameter $2"): the error
// was raised reading a parameter's value.
func bindParameter(where string) bool {
	for _, line := range strings.Split(where, "\n") {
		if strings.Contains(line, "portal") && strings.Contains(line, " parameter $") {
			return true
		}
	}
	return false
}
