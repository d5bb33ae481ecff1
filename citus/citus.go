// Package citus reads what a Citus coordinator says of its tables (which
// are distributed, by which column, over which shards; which are reference
// tables) and places a distribution value on its shard, so that the apply
// can send statements Citus runs on one shard, leave the distribution
// column out of SET lists and make TRUNCATE reach the shards. It holds no
// connection of its own: the apply's session reads the metadata.
package citus

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Kind says how Citus places a table's rows.
type Kind byte

// Kinds of Citus table (pg_dist_partition's partmethod, repmodel and
// colocationid).
const (
	// Distributed: hash-distributed by a column over shards on the workers.
	Distributed Kind = 'h'
	// Reference: one shard copied to every node; a write goes to all.
	Reference Kind = 'r'
	// SingleShard: distributed without a column, one shard on one node.
	SingleShard Kind = 's'
	// Local: a Citus local table, on the coordinator alone.
	Local Kind = 'l'
)

func (k Kind) String() string {
	switch k {
	case Distributed:
		return "distributed"
	case Reference:
		return "reference"
	case SingleShard:
		return "single-shard distributed"
	case Local:
		return "Citus local"
	}
	return "unknown"
}

// Table is the Citus metadata of one table.
type Table struct {
	Kind Kind
	// Column is the distribution column of a Distributed table.
	Column string
	// Colocation is the table's colocation group: tables of one group
	// have the same shards at the same places.
	Colocation int
	// Shards is the number of shards.
	Shards int
	hash   Hasher
	mins   []int32 // each shard's lowest hash, ascending
}

// Enabled reports whether conn's database has the Citus extension, and if
// so makes the session carry SET LOCAL commands to the workers
// (citus.propagate_set_commands = local): the apply sets
// session_replication_role in each transaction so that it holds on the
// shards too.
func Enabled(ctx context.Context, conn *pgx.Conn) (bool, error) {
	on, err := Installed(ctx, conn)
	if err != nil || !on {
		return false, err
	}
	for _, set := range []string{
		"SET citus.propagate_set_commands = 'local'",
		// One connection per worker node for the session's statements:
		// parapply runs its own sessions side by side, and Citus would
		// otherwise open a connection per shard that a COPY or an
		// INSERT ... SELECT writes in a transaction, anew for every
		// transaction (it keeps one a node): 16 a node and transaction,
		// whose start-up cost the workers nine times the CPU of the
		// inserts themselves at four parapply workers.
		"SET citus.multi_shard_modify_mode = 'sequential'",
	} {
		if _, err := conn.Exec(ctx, set); err != nil {
			return false, fmt.Errorf("%s on the target: %w", set, err)
		}
	}
	return true, nil
}

// Installed reports whether the database q reads has the Citus extension.
func Installed(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	var on bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')").Scan(&on); err != nil {
		return false, fmt.Errorf("looking for the Citus extension on the target: %w", err)
	}
	return on, nil
}

// Read returns the Citus metadata of the table whose OID is oid, or nil
// when Citus does not manage it (or the database has no Citus).
func Read(ctx context.Context, conn *pgx.Conn, oid uint32) (*Table, error) {
	var present bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL").Scan(&present); err != nil {
		return nil, fmt.Errorf("looking for Citus metadata on the target: %w", err)
	}
	if !present {
		return nil, nil
	}
	var method, repmodel, column string
	var typ uint32
	var deterministic bool
	t := &Table{}
	err := conn.QueryRow(ctx, `SELECT p.partmethod::text, p.repmodel::text, p.colocationid, coalesce(a.attname::text, ''),
			coalesce(a.atttypid, 0), coalesce(co.collisdeterministic, true),
			ARRAY(SELECT s.shardminvalue::int4 FROM pg_catalog.pg_dist_shard s
				WHERE s.logicalrelid = p.logicalrelid AND s.shardminvalue IS NOT NULL ORDER BY 1),
			(SELECT pg_catalog.count(*) FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid = p.logicalrelid)
		FROM pg_catalog.pg_dist_partition p
		LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = p.logicalrelid AND p.partkey IS NOT NULL
			AND a.attname = pg_catalog.column_to_column_name(p.logicalrelid, p.partkey)
		LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
		WHERE p.logicalrelid = $1::oid`, oid).Scan(&method, &repmodel, &t.Colocation, &column, &typ, &deterministic, &t.mins, &t.Shards)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the Citus metadata of table OID %d on the target: %w", oid, err)
	}
	switch {
	case method == "h":
		t.Kind, t.Column = Distributed, column
		if deterministic {
			t.hash = HasherFor(typ)
		}
	case repmodel == "t":
		t.Kind = Reference
	case t.Colocation != 0:
		t.Kind = SingleShard
	default:
		t.Kind = Local
	}
	return t, nil
}

// Shard returns the index of the shard a distribution value (text, or
// binary when bin) lands on; ok is false when it cannot tell (a type
// without a Hasher, a value it cannot parse).
func (t *Table) Shard(v []byte, bin bool) (int, bool) {
	if t.hash == nil || len(t.mins) == 0 {
		return 0, false
	}
	h, ok := t.hash(v, bin)
	if !ok {
		return 0, false
	}
	// The last shard whose lowest hash is at most h.
	i := sort.Search(len(t.mins), func(i int) bool { return t.mins[i] > h }) - 1
	if i < 0 {
		return 0, false
	}
	return i, true
}

// Managed returns, of the tables named by schemas[i].names[i], those
// Citus manages on conn's database (distributed or reference; not Citus
// local tables), as schema.name; none on a database without Citus.
func Managed(ctx context.Context, conn *pgx.Conn, schemas, names []string) ([]string, error) {
	var present bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL").Scan(&present); err != nil {
		return nil, fmt.Errorf("looking for Citus metadata on the target: %w", err)
	}
	if !present {
		return nil, nil
	}
	rows, err := conn.Query(ctx, `SELECT u.s || '.' || u.r FROM unnest($1::text[], $2::text[]) AS u(s, r)
		JOIN pg_catalog.pg_namespace n ON n.nspname = u.s
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = u.r
		JOIN pg_catalog.pg_dist_partition p ON p.logicalrelid = c.oid
		WHERE p.partmethod <> 'n' OR p.repmodel = 't' OR p.colocationid <> 0
		ORDER BY 1`, schemas, names)
	if err != nil {
		return nil, fmt.Errorf("reading the Citus metadata of the published tables on the target: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Uniform returns the metadata create_distributed_table gives a new table
// distributed by column (of type OID typ) over n shards: the 32-bit hash
// space cut into n equal ranges, the last taking the remainder.
func Uniform(column string, typ uint32, n int) *Table {
	t := &Table{Kind: Distributed, Column: column, Shards: n, hash: HasherFor(typ)}
	step := (int64(1) << 32) / int64(n)
	for i := range n {
		t.mins = append(t.mins, int32(math.MinInt32+int64(i)*step))
	}
	return t
}

// Refusal is a setting of a run that Citus cannot serve, with its fix.
type Refusal struct{ What, Fix string }

// DetectionOff says that conflict detection, at detect_conflicts = auto,
// is off for the tables Citus manages (managed, as Managed names them) and on for the
// others: Citus does not run its statements.
func DetectionOff(managed []string) string {
	return "conflict detection is off for the tables Citus manages (" + strings.Join(managed, ", ") +
		"), whose statements Citus does not run: an update or delete whose row is missing there is counted and skipped, and an insert that meets an existing row stops the run (or with on_error = skip_transaction has its transaction skipped and logged); it is on for the other published tables (detect_conflicts = auto; on would refuse this target)"
}

// Refusals lists what a run with these settings asks of a Citus
// coordinator that distributes its tables and Citus does not run:
// conflict detection asked for (detect_conflicts = on; auto leaves those
// tables out) (its statements, counts over modifying CTEs and
// correlated lookups, are not ones Citus runs on shards) and two_phase
// (Citus prepares no transaction that wrote to its workers: "cannot use
// 2PC in transactions involving multiple servers").
func Refusals(detectConflicts, twoPhase bool) []Refusal {
	var out []Refusal
	if detectConflicts {
		out = append(out, Refusal{"detect_conflicts is on, but conflict detection does not run on tables Citus distributes",
			"set detect_conflicts = auto (the default: off for the tables Citus manages, on for the others) or off (an update or delete whose row is missing is then counted and skipped, and an insert that meets an existing row stops the run, or with on_error = skip_transaction has its transaction skipped and logged)"})
	}
	if twoPhase {
		out = append(out, Refusal{"two_phase is on, but Citus prepares no transaction that wrote to its workers",
			"set two_phase = off (prepared transactions are then applied when they commit)"})
	}
	return out
}
