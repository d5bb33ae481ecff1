// Package sequences brings the publisher's sequence positions to the
// target. Logical replication carries rows, not sequences: a target that
// takes over from its publisher (a migration's cut-over) would hand out
// values the publisher already used. Positions only ever move forward on
// the target.
package sequences

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/enum"
	"github.com/parapply/parapply/internal/pgerr"
)

// Mode says which publisher sequences are brought to the target (the
// sequences setting).
type Mode string

// Modes of the sequences setting.
const (
	None  Mode = "none"  // leave sequences alone
	Owned Mode = "owned" // the sequences owned by published tables' columns (serial, identity)
	All   Mode = "all"   // every sequence of the publisher database
)

// Modes lists the sequences setting's values, for ParseMode and the help
// text.
var Modes = []Mode{None, Owned, All}

// ParseMode reads the sequences setting, naming it and its values when s is
// none of them.
func ParseMode(s string) (Mode, error) { return enum.Parse("sequences", s, Modes) }

// Sequence is one publisher sequence's position.
type Sequence struct {
	Schema, Name string
	// Last is the last value handed out; Readable is false when the role
	// may not read it (no SELECT or USAGE on the sequence), and Used false
	// when it never handed out a value (nothing to carry). Role is the
	// source role, for the GRANT an unreadable one needs; Owner the
	// sequence's owner, for the ALTER DEFAULT PRIVILEGES that covers the
	// sequences created later.
	Last     int64
	Used     bool
	Readable bool
	Role     string
	Owner    string
}

// SourceGrant is the statement that lets the source role read the sequence, and
// the sequences its owner creates later in its schema.
func (s Sequence) SourceGrant() string {
	return "GRANT SELECT ON SEQUENCE " + s.QualifiedName() + " TO " + parapply.Ident(s.Role) + "; " +
		parapply.AlterDefaultPrivileges(s.Owner, s.Schema, "SELECT", "SEQUENCES", s.Role)
}

// QualifiedName is the sequence's quoted schema-qualified name.
func (s Sequence) QualifiedName() string {
	return pgx.Identifier{s.Schema, s.Name}.Sanitize()
}

// Result is what Apply did with one sequence.
type Result struct {
	Sequence
	// Before is the target's last value as read before (Called false:
	// none handed out yet, Before is then its next value); Moved says the
	// target was set to the publisher's; Missing that the target has no
	// such sequence; Ahead that the target's is beyond the publisher's
	// (left alone). Grant, when set, is what the target role lacks to read
	// and set the sequence: it was refused and left untouched.
	Before  int64
	Called  bool
	Moved   bool
	Missing bool
	Ahead   bool
	Grant   string
}

// Refused says the target role lacks a privilege, so the sequence was
// neither read nor set.
func (r Result) Refused() bool { return r.Grant != "" }

// Table names a published table.
type Table struct{ Schema, Name string }

// From says which publisher sequences a sync reads.
type From int

// Where a sync's sequences come from.
const (
	FromNothing      From = iota // sequences = none
	FromOwners                   // those the published tables' columns own (owned)
	FromDatabase                 // every sequence of the publisher database (all)
	FromPublications             // the publications' own (PostgreSQL 19's FOR ALL SEQUENCES)
)

// String says where the sequences come from, for the operator.
func (f From) String() string {
	switch f {
	case FromOwners:
		return "those the published tables' columns own"
	case FromDatabase:
		return "every sequence of the publisher database"
	case FromPublications:
		return "the publications' sequences (FOR ALL SEQUENCES)"
	default:
		return "none"
	}
}

// Choose is where a sync under mode takes its sequences from. When one of
// the publications publishes sequences (pubSequences: PostgreSQL 19's FOR
// ALL SEQUENCES), the publications decide, for owned and all alike, as
// they decide which tables are replicated; otherwise mode does: owned
// guesses them from the published tables' serial and identity columns,
// all takes every one.
func Choose(mode Mode, pubSequences bool) From {
	switch {
	case mode == None || mode == "":
		return FromNothing
	case pubSequences:
		return FromPublications
	case mode == All:
		return FromDatabase
	default:
		return FromOwners
	}
}

// PublishesSequences reports whether one of the publications publishes
// sequences (pg_publication.puballsequences, PostgreSQL 19 and later);
// false on an earlier publisher, whose publications hold tables only.
func PublishesSequences(ctx context.Context, conn *pgx.Conn, publications []string) (bool, error) {
	if serverMajor(conn.PgConn().ParameterStatus("server_version")) < 19 || len(publications) == 0 {
		return false, nil
	}
	var yes bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication p
		WHERE p.pubname = ANY ($1::text[]) AND p.puballsequences)`, publications).Scan(&yes)
	if err != nil {
		return false, fmt.Errorf("reading whether the publications publish sequences: %w", err)
	}
	return yes, nil
}

// serverMajor is the major version in a server_version as the server
// reports it at connection start ("19rc1 (Debian 19~rc1-1)", "15.4"); 0
// when it starts with no number.
func serverMajor(version string) int {
	end := strings.IndexFunc(version, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(version)
	}
	n, _ := strconv.Atoi(version[:end])
	return n
}

// scopes is Read's condition on a sequence c (in schema n) for each
// source: owned by a column of a carried relation, any, or listed by
// pg_publication_sequences for one of the publications (the view is
// PostgreSQL 19's, read only when a publication publishes sequences).
var scopes = map[From]string{
	FromOwners: `EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
			WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.objid = c.oid AND d.refclassid = 'pg_catalog.pg_class'::regclass
			AND d.deptype IN ('a', 'i') AND d.refobjid IN (SELECT oid FROM carried))`,
	FromDatabase: `true`,
	FromPublications: `(n.nspname, c.relname) IN (SELECT s.schemaname, s.sequencename FROM pg_catalog.pg_publication_sequences s
			WHERE s.pubname IN (SELECT name FROM pubs))`,
}

// Read lists the publisher's sequences for mode, and where they came from
// (Choose): the publications' own when one of publications publishes
// sequences (PostgreSQL 19), else those owned by a column of one of
// tables or of a relation their rows come from (Owned), or all (All). A
// published partition's or inheritance child's rows draw on sequences its
// ancestors own (a partitioned root's bigserial is owned by the root,
// whether the publication sends the root or its leaves), and a
// partitioned table published through its root carries its partitions'
// rows, so with Owned the sequences of those relations count too.
func Read(ctx context.Context, conn *pgx.Conn, mode Mode, publications []string, tables []Table) ([]Sequence, From, error) {
	if mode == None {
		return nil, FromNothing, nil
	}
	pubSequences, err := PublishesSequences(ctx, conn, publications)
	if err != nil {
		return nil, FromNothing, err
	}
	from := Choose(mode, pubSequences)
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	rows, err := conn.Query(ctx, `WITH RECURSIVE pubs(name) AS (SELECT pg_catalog.unnest($1::text[])),
		published AS (
			SELECT c.oid, c.relkind FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE (n.nspname::text, c.relname::text) IN (SELECT * FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])))),
		ancestors(oid) AS (
			SELECT oid FROM published
			UNION SELECT i.inhparent FROM pg_catalog.pg_inherits i JOIN ancestors a ON i.inhrelid = a.oid),
		carried(oid) AS (
			SELECT oid FROM ancestors
			UNION SELECT t.relid::oid FROM published p, pg_catalog.pg_partition_tree(p.oid) t WHERE p.relkind = 'p')
		SELECT n.nspname::text, c.relname::text, current_user::text, pg_catalog.pg_get_userbyid(c.relowner)::text,
			pg_catalog.has_sequence_privilege(c.oid, 'SELECT,USAGE'),
			CASE WHEN pg_catalog.has_sequence_privilege(c.oid, 'SELECT,USAGE') THEN (SELECT s.last_value FROM pg_catalog.pg_sequences s WHERE s.schemaname = n.nspname AND s.sequencename = c.relname) END
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'S' AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
		AND `+scopes[from]+`
		ORDER BY 1, 2`, publications, schemas, names)
	if err != nil {
		return nil, from, fmt.Errorf("reading the publisher's sequences: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Sequence, error) {
		var s Sequence
		var last *int64
		err := row.Scan(&s.Schema, &s.Name, &s.Role, &s.Owner, &s.Readable, &last)
		if last != nil {
			s.Last, s.Used = *last, true
		}
		return s, err
	})
	if err != nil {
		return nil, from, fmt.Errorf("reading the publisher's sequences: %w", err)
	}
	return out, from, nil
}

// Apply brings each used sequence on the target to the publisher's last
// value, reading the target's first: a target sequence never moves
// backwards (in the direction it counts), one already beyond the
// publisher's is left alone (Ahead), and one the target role may not read
// and set is refused (Grant names what it lacks) rather than set blind,
// since a blind set of a sequence the role cannot read may move it back
// and hand out keys the target already holds.
func Apply(ctx context.Context, conn *pgx.Conn, seqs []Sequence) ([]Result, error) {
	out := make([]Result, 0, len(seqs))
	for _, s := range seqs {
		r := Result{Sequence: s}
		if !s.Used || !s.Readable {
			out = append(out, r)
			continue
		}
		var (
			oid                        uint32
			role                       string
			schemaOK, readOK, updateOK bool
			increment                  int64
		)
		err := conn.QueryRow(ctx, `SELECT c.oid, current_user::text,
				pg_catalog.has_schema_privilege(n.oid, 'USAGE'), pg_catalog.has_sequence_privilege(c.oid, 'SELECT'),
				pg_catalog.has_sequence_privilege(c.oid, 'UPDATE'), q.seqincrement
			FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			JOIN pg_catalog.pg_sequence q ON q.seqrelid = c.oid
			WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'S'`, s.Schema, s.Name).Scan(&oid, &role, &schemaOK, &readOK, &updateOK, &increment)
		if errors.Is(err, pgx.ErrNoRows) {
			r.Missing = true
			out = append(out, r)
			continue
		}
		if err != nil {
			return out, fmt.Errorf("looking up sequence %s on the target: %w", s.QualifiedName(), err)
		}
		if r.Grant = missingGrant(s, role, schemaOK, readOK, updateOK); r.Refused() {
			out = append(out, r)
			continue
		}
		// One statement reads the target's position and sets it only if
		// the publisher's is beyond it: a value handed out on the target
		// between a separate read and the set could be moved back over.
		err = conn.QueryRow(ctx, `SELECT s.last_value, s.is_called,
				CASE WHEN ($3 > 0 AND (s.last_value < $2 OR (NOT s.is_called AND s.last_value = $2)))
					OR ($3 < 0 AND (s.last_value > $2 OR (NOT s.is_called AND s.last_value = $2)))
				THEN pg_catalog.setval($1::oid::regclass, $2, true) IS NOT NULL ELSE false END
			FROM `+s.QualifiedName()+` s`, oid, s.Last, increment).Scan(&r.Before, &r.Called, &r.Moved)
		if err != nil {
			return out, fmt.Errorf("setting sequence %s on the target: %w", s.QualifiedName(), err)
		}
		r.Ahead = !r.Moved && !(r.Called && r.Before == s.Last)
		out = append(out, r)
	}
	return out, nil
}

// missingGrant is the GRANT the target role needs to read and set
// sequence s, or "" when it has what it needs.
func missingGrant(s Sequence, role string, schemaOK, readOK, updateOK bool) string {
	who := pgx.Identifier{role}.Sanitize()
	if !schemaOK {
		return "GRANT USAGE ON SCHEMA " + pgx.Identifier{s.Schema}.Sanitize() + " TO " + who
	}
	var privs []string
	if !readOK {
		privs = append(privs, "SELECT")
	}
	if !updateOK {
		privs = append(privs, "UPDATE")
	}
	if len(privs) == 0 {
		return ""
	}
	return "GRANT " + strings.Join(privs, ", ") + " ON SEQUENCE " + s.QualifiedName() + " TO " + who
}

// Summary counts a sync's results, one count per outcome so that status
// and metrics tell what happened: Moved (set forward), Unchanged (already
// at the publisher's), Ahead (beyond it on the target, left alone),
// Unused (never used on the publisher), Missing (not on the target),
// Unread (the source role may not read it), Refused (the target role may
// not read or set it). Sequences is their total.
type Summary struct {
	At                                time.Time
	Sequences, Moved, Missing, Unread int
	Unchanged, Ahead, Unused, Refused int
}

// Summarize counts results.
func Summarize(rs []Result) Summary {
	s := Summary{At: time.Now(), Sequences: len(rs)}
	for _, r := range rs {
		switch {
		case !r.Readable:
			s.Unread++
		case !r.Used:
			s.Unused++
		case r.Missing:
			s.Missing++
		case r.Refused():
			s.Refused++
		case r.Moved:
			s.Moved++
		case r.Ahead:
			s.Ahead++
		default:
			s.Unchanged++
		}
	}
	return s
}

// Failed is the number of sequences that could not be synced: missing on
// the target, unreadable on the source, or refused on the target.
func (s Summary) Failed() int { return s.Missing + s.Unread + s.Refused }

// Sync reads the publisher's sequences on src (Read) and applies them on
// dst, saying where they came from.
func Sync(ctx context.Context, src, dst *pgx.Conn, mode Mode, publications []string, tables []Table) ([]Result, From, error) {
	seqs, from, err := Read(ctx, src, mode, publications, tables)
	if err != nil {
		return nil, from, err
	}
	res, err := Apply(ctx, dst, seqs)
	return res, from, err
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
		return nil, fmt.Errorf("connecting to %s port %d database %s user %s for the sequences: %w", cc.Host, cc.Port, cc.Database, cc.User, pgerr.Short(err))
	}
	return conn, nil
}
