// Package parapply holds the vocabulary shared by every part of the subscriber:
// positions in the publisher's WAL, transaction ids, relations, tuples and
// changes. It does no I/O; each external system lives in a package of its own.
package parapply

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// LSN is a position in the publisher's write-ahead log; progress is measured,
// recorded and confirmed in LSNs.
type LSN uint64

// String formats the LSN the way PostgreSQL prints pg_lsn values (X/X).
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// ParseLSN reads a pg_lsn text value such as "0/16B3748", so positions read
// from catalogs and configuration compare as numbers.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("invalid LSN %q: want the form X/X", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// MarshalText writes the LSN as PostgreSQL prints it, so that JSON output
// (parapply status --json) compares with pg_lsn columns by eye and by SQL.
func (l LSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads the form MarshalText writes.
func (l *LSN) UnmarshalText(b []byte) error {
	v, err := ParseLSN(string(b))
	*l = v
	return err
}

// XID is a publisher transaction id, used to name a transaction in errors and
// to match streamed chunks and subtransaction aborts.
type XID uint32

// Replica identity settings as sent in relation messages; they decide which
// old-row columns locate the row to change on the target.
const (
	IdentityDefault = 'd'
	IdentityNothing = 'n'
	IdentityFull    = 'f'
	IdentityIndex   = 'i'
)

// Column describes one published column of a relation, as the publisher sees it.
type Column struct {
	Name    string
	TypeOID uint32
	TypeMod int32
	// Key is true when the column is part of the replica identity (every
	// column under REPLICA IDENTITY FULL).
	Key bool
}

// Relation is the publisher's description of a published table; changes refer
// to it by ID, and a new Relation with the same ID announces a schema change.
type Relation struct {
	ID              uint32
	Namespace       string
	Name            string
	ReplicaIdentity byte
	Columns         []Column
}

// QualifiedName returns the schema-qualified, quoted name, ready for SQL.
func (r *Relation) QualifiedName() string {
	return QuoteIdent(r.Namespace) + "." + QuoteIdent(r.Name)
}

// QuoteIdent quotes a SQL identifier so that any name, however odd, is safe in
// generated statements.
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// QuoteLiteral quotes a string as a SQL literal, for the few commands that
// take no parameters (PREPARE TRANSACTION, replication options).
func QuoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// Kinds of tuple values as pgoutput sends them.
const (
	ValueNull      = 'n'
	ValueUnchanged = 'u' // an unchanged TOASTed value: leave the target's value as it is
	ValueText      = 't'
	ValueBinary    = 'b'
)

// Value is one column of a tuple. Data is only meaningful for text and binary
// values.
type Value struct {
	Kind byte
	Data []byte
}

// Tuple is a row image, one Value per published column, in relation order.
type Tuple []Value

// ZeroTime is the zero time.Time, for positions that carry no commit time.
var ZeroTime time.Time
