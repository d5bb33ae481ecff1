package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/citus"
	"github.com/parapply/parapply/targetdb"
)

// Table maps a publisher relation onto its target table: which target type
// each published column is cast to, which columns are skipped, and how a row
// is located.
type Table struct {
	Rel  *parapply.Relation
	Name string // quoted, schema-qualified target name
	// OID is the target table's.
	OID uint32
	// Types holds, per published column, the target type to cast the text
	// value to; "" marks a column the target does not take (generated:
	// LoadTable refuses a published one, so only tables built by hand).
	Types []string
	// elem holds, per published column, the element type of its array
	// parameter when that is not text (see textarray.go): with
	// binaryValues, the column's type; else when its type is the
	// publisher's too and one of binaryTypes, that type.
	elem []uint32
	// binaryValues is true when the stream carries the table's values in
	// binary (Config.BinaryValues): they go into the parameters as they
	// are.
	binaryValues bool
	// AlwaysIdentity lists the published columns that are GENERATED
	// ALWAYS AS IDENTITY on the target: inserts give their values with
	// OVERRIDING SYSTEM VALUE (as the built-in apply does, which bypasses
	// the check), and updates, which PostgreSQL lets set them only to
	// DEFAULT, leave them out (see Applier.Update).
	AlwaysIdentity []int
	keyAndIdentity []int // Key, then AlwaysIdentity (and distCol)
	setSkip        []int // AlwaysIdentity (and distCol): never in SET (see deriveSkips)
	// Citus is the target's Citus metadata of the table; nil on a plain
	// PostgreSQL target (see citus.go).
	Citus *citus.Table
	// distCol is the published column Citus distributes the table by,
	// when Citus is a distributed table's metadata (see dist).
	distCol int
	// Key lists the published columns that locate a row (replica identity).
	Key []int
	// Full is true under REPLICA IDENTITY FULL: rows are located by all old
	// values, NULL-safe, one target row per change.
	Full bool
	// equality holds, per published column, how the built-in apply
	// compares its values (see loadEquality): keys and whole old rows are
	// compared under the column's collation.
	equality []colEquality
	// SyncLSN is the position the table's initial copy holds (its
	// snapshot's consistent point): changes of transactions whose commit
	// record starts before it are in the copy already.
	SyncLSN parapply.LSN
	// Unsynced marks a published table parapply has not copied yet (it
	// joined the publication while parapply ran): its changes are skipped
	// until the next start copies it.
	Unsynced bool
	// missing marks a published table the target does not have: its
	// description is the publisher's alone (see HoldMissing).
	missing bool
	// reload marks a description loaded before a DDL changed the
	// target's catalog: the next relation message loads it again, alike
	// or not.
	reload bool
	// Partitioned is true for a partitioned target table: statements then
	// reach its partitions; for a plain table they use ONLY, so rows of
	// inheritance children are never touched, as with the built-in apply.
	Partitioned bool
	// ExtraUnique is true when the target has a unique index beyond the one
	// the key uses: a set-based UPDATE could then hit a transient duplicate
	// that row-by-row order would not, so such updates run under a savepoint
	// and fall back to row order.
	ExtraUnique bool
	// KeyUnique is true when a unique index of the target holds exactly
	// the key's columns: only then do two rows with one key collide.
	KeyUnique bool
	// Uniques are the unique indexes beyond the key whose values the
	// published columns give: a change taking a value of one is keyed by
	// it, so two transactions taking the same value apply in order.
	Uniques []UniqueIndex
	// WholeTable is true when some unique index's values cannot be read
	// from a change (an expression, or a column not published): the table's
	// changes are then keyed as the whole table.
	WholeTable bool
	// NoCopy is true when the target table has row-level security enabled
	// (COPY refuses its policies) or an INSERT rule that fires for
	// replicated changes (COPY ignores rules): its inserts then always go
	// through INSERT.
	NoCopy bool
	// Large is true when the table's heap was larger than the target's
	// shared_buffers when it was loaded: its rows are then likely read
	// from outside the buffer cache, which prefetching takes off the
	// applier's connection.
	Large bool
	// BufferPages is the target's shared_buffers in pages, when it was
	// loaded: how much may be read ahead of a statement (see
	// readAheadRows).
	BufferPages int
	// Triggers is true when a trigger fires on the target for replicated
	// changes (ENABLE ALWAYS or ENABLE REPLICA, on the table or a
	// partition): every change must then reach it as it happened.
	// parapply's own (targetdb.TombstoneTrigger) does nothing in its sessions.
	Triggers bool
	// before holds the pg_trigger.tgtype event bits (tgInsert, tgUpdate,
	// tgDelete) of the BEFORE row triggers that fire for replicated
	// changes: such a trigger may suppress a change (RETURN NULL), which
	// then changes fewer rows than it found (see triggers.go).
	before int
	// Probes are the published columns leading the table's large B-tree
	// indexes (each larger than a quarter of shared_buffers, on a table
	// larger than shared_buffers): an insert must read the leaf page where
	// its value goes in each, likely from outside the buffer cache, so the
	// prefetcher looks the values up first (see InsertProbeSQL).
	Probes []int

	// tally counts what reaches the table; pending holds the open
	// group's changes by kind until it commits.
	tally       *Tally
	pending     [4]int64
	prefetchSQL string         // built on first use
	probeSQL    map[int]string // likewise, per probed column

	// catalogSum is the fingerprint of the catalog rows the description
	// was read from (see reread.go); base, on a description read again
	// until the builder takes it, the one it was read again for.
	catalogSum string
	base       *Table
}

// Target names the table in UPDATE, DELETE and TRUNCATE: with ONLY for a
// plain table, without for a partitioned one.
func (t *Table) Target() string {
	if t.Partitioned {
		return t.Name
	}
	return "ONLY " + t.Name
}

// ErrSchema marks a published table the target cannot take as it is
// (targetdb.ErrSchema, where the checks of the target live).
var ErrSchema = targetdb.ErrSchema

// errNoTable is matched (errors.Is) by LoadTable's error for a table
// missing on the target.
var errNoTable = targetdb.ErrNoTable

// ErrBinaryUnfit marks a table whose values a binary stream cannot bring
// (see targetdb.Column.BinaryFit): the run must start again with text.
var ErrBinaryUnfit = errors.New("a published column cannot travel in binary")

// LoadTable reads the target's catalog for the table rel names and checks
// that every published column exists there. binaryValues says the stream
// carries values in binary: a column that cannot take them so is an error
// that wraps ErrBinaryUnfit.
func LoadTable(ctx context.Context, conn *pgx.Conn, rel *parapply.Relation, binaryValues bool) (*Table, error) {
	t := &Table{Rel: rel, Name: rel.QualifiedName(), Full: rel.ReplicaIdentity == parapply.IdentityFull}
	tt, err := targetdb.ReadTable(ctx, conn, rel)
	if err != nil {
		return nil, err
	}
	oid := tt.OID
	t.OID, t.Partitioned, t.NoCopy = tt.OID, tt.Partitioned, tt.NoCopy
	t.Types = make([]string, len(rel.Columns))
	t.elem = make([]uint32, len(rel.Columns))
	t.binaryValues = binaryValues
	for i, c := range rel.Columns {
		tc := tt.Columns[i]
		t.Types[i] = tc.Type
		switch {
		case binaryValues && !tc.BinaryFit(c.TypeOID):
			return nil, fmt.Errorf("%w: column %s of %s is of type %s on the target and of type OID %d on the publisher", ErrBinaryUnfit, parapply.QuoteIdent(c.Name), t.Name, tc.Type, c.TypeOID)
		case binaryValues:
			t.elem[i] = tc.TypeOID
		default:
			if _, ok := binaryTypes[tc.TypeOID]; ok && tc.TypeOID == c.TypeOID {
				t.elem[i] = tc.TypeOID
			}
		}
		if tc.AlwaysIdentity {
			t.AlwaysIdentity = append(t.AlwaysIdentity, i)
		}
		if c.Key {
			t.Key = append(t.Key, i)
		}
	}
	if !t.Full && len(t.Key) == 0 && rel.ReplicaIdentity != parapply.IdentityNothing {
		// No key flagged (a table with REPLICA IDENTITY DEFAULT and no primary key): only inserts can be published.
		t.Key = nil
	}
	if err := loadUniques(ctx, conn, oid, t); err != nil {
		return nil, err
	}
	ct, err := citus.Read(ctx, conn, oid)
	if err != nil {
		return nil, err
	}
	if err := t.loadCitus(ct); err != nil { // after loadUniques: it may set WholeTable
		return nil, err
	}
	t.deriveSkips()
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger WHERE NOT tgisinternal AND tgenabled IN ('A', 'R') AND tgname <> '`+targetdb.TombstoneTrigger+`'
		AND (tgrelid = $1::oid OR tgrelid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::oid::regclass)))),
		(SELECT coalesce(sum(pg_catalog.pg_relation_size(relid)), pg_catalog.pg_relation_size($1::oid::regclass))
			FROM pg_catalog.pg_partition_tree($1::oid::regclass))
			> pg_catalog.pg_size_bytes(pg_catalog.current_setting('shared_buffers')),
		(pg_catalog.pg_size_bytes(pg_catalog.current_setting('shared_buffers')) / pg_catalog.current_setting('block_size')::int)::int,
		`+beforeTriggersSQL, oid).Scan(&t.Triggers, &t.Large, &t.BufferPages, &t.before)
	if err != nil {
		return nil, fmt.Errorf("reading triggers and size of %s on the target: %w", t.Name, err)
	}
	{
		if err := loadEquality(ctx, conn, oid, t); err != nil {
			return nil, err
		}
	}
	if t.Large && !t.Partitioned {
		if err := loadProbes(ctx, conn, oid, t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// loadProbes sets t.Probes: the published columns that lead a valid,
// non-partial B-tree index of the table larger than a quarter of
// shared_buffers (smaller ones stay in the cache), except columns filled
// from a sequence (serial, identity): their new values all go to the
// index's last leaf, which stays in the cache.
func loadProbes(ctx context.Context, conn *pgx.Conn, oid uint32, t *Table) error {
	rows, err := conn.Query(ctx, `SELECT DISTINCT a.attname::text FROM pg_catalog.pg_index i
		JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_catalog.pg_am am ON am.oid = ic.relam
		JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = $1 AND i.indisvalid AND i.indisready AND i.indpred IS NULL AND am.amname = 'btree'
		AND pg_catalog.pg_relation_size(i.indexrelid) > pg_catalog.pg_size_bytes(pg_catalog.current_setting('shared_buffers')) / 4
		AND a.attidentity = '' AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum
			AND pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%')`, oid)
	if err != nil {
		return fmt.Errorf("reading index sizes of %s on the target: %w", t.Name, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("reading index sizes of %s on the target: %w", t.Name, err)
	}
	for _, n := range names {
		for i, c := range t.Rel.Columns {
			if c.Name == n {
				t.Probes = append(t.Probes, i)
			}
		}
	}
	slices.Sort(t.Probes)
	return nil
}

// UniqueIndex is a unique index beyond the key, by the published columns it
// holds.
type UniqueIndex struct {
	// Name is the index as regclass text: unique in the database, so it
	// alone names the index in scheduling keys.
	Name string
	Cols []int // positions in the relation's columns
	// NullsEqual is NULLS NOT DISTINCT: a NULL is a value like any other.
	NullsEqual bool
}

// loadUniques reads the target's unique indexes on t, and on its partitions
// when it is partitioned (an index of a partition that is not part of one
// of t's counts as if it were on t: values that collide in it collide in
// t): those beyond the one matching the key set ExtraUnique, and become
// t.Uniques, or t.WholeTable when their values cannot be read from a
// change. An exclusion constraint, whose conflicts no value names, makes
// t.WholeTable too.
func loadUniques(ctx context.Context, conn *pgx.Conn, oid uint32, t *Table) error {
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
		WHERE contype = 'x' AND (conrelid = $1 OR conrelid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::oid::regclass))))`, oid).Scan(&t.WholeTable); err != nil {
		return fmt.Errorf("reading exclusion constraints of %s on the target: %w", t.Name, err)
	}
	rel := t.Rel
	var keyNames []string
	for _, k := range t.Key {
		keyNames = append(keyNames, rel.Columns[k].Name)
	}
	keySet := strings.Join(slices.Sorted(slices.Values(keyNames)), ",")
	// indnullsnotdistinct exists from PostgreSQL 15; read through jsonb so
	// that older targets give NULL.
	rows, err := conn.Query(ctx, `SELECT i.indexrelid::regclass::text, i.indexprs IS NOT NULL, i.indpred IS NOT NULL,
			coalesce((pg_catalog.to_jsonb(i) ->> 'indnullsnotdistinct')::bool, false),
			ARRAY(SELECT a.attname::text FROM pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, n)
				JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
				WHERE k.n <= i.indnkeyatts ORDER BY k.n)
		FROM pg_catalog.pg_index i
		WHERE (i.indrelid = $1 OR i.indrelid IN (SELECT relid FROM pg_catalog.pg_partition_tree($1::oid::regclass))) AND i.indisunique
		AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits h WHERE h.inhrelid = i.indexrelid)
		ORDER BY i.indexrelid`, oid)
	if err != nil {
		return fmt.Errorf("reading indexes of %s on the target: %w", t.Name, err)
	}
	defer rows.Close()
	pos := map[string]int{}
	for i, c := range rel.Columns {
		pos[c.Name] = i
	}
	for rows.Next() {
		var u UniqueIndex
		var expr, pred bool
		var names []string
		if err := rows.Scan(&u.Name, &expr, &pred, &u.NullsEqual, &names); err != nil {
			return err
		}
		if !t.Full && !expr && !pred && strings.Join(slices.Sorted(slices.Values(names)), ",") == keySet {
			t.KeyUnique = true
			continue // the key's own index: the identity keys cover it
		}
		t.ExtraUnique = true
		if expr {
			t.WholeTable = true
			continue
		}
		for _, n := range names {
			i, ok := pos[n]
			if !ok {
				t.WholeTable = true
				break
			}
			u.Cols = append(u.Cols, i)
		}
		if len(u.Cols) == len(names) {
			t.Uniques = append(t.Uniques, u)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading indexes of %s on the target: %w", t.Name, err)
	}
	return nil
}

// colEquality is how a column's values are compared when a row is located
// by its whole old image.
type colEquality struct {
	// eq is false when the column's type has no default equality operator
	// (no default B-tree or hash operator class: json, point, xml): the
	// built-in apply then fails with "could not identify an equality
	// operator for type ...".
	eq bool
	// hash names the hash function of the type's default hash operator
	// class, schema-qualified; "" when it has none.
	hash string
	// collate is the column's collation when it is not the database
	// default, schema-qualified and quoted: values are compared under it,
	// as the built-in apply does.
	collate string
	typ     string // the column's type, for messages
}

// loadEquality sets t.equality from the target's catalog, as PostgreSQL's
// type cache finds a type's equality operator (lookup_type_cache with
// TYPECACHE_EQ_OPR): the equality member of the default B-tree or hash
// operator class for the column's type, its domain's base type, a type it
// is binary coercible to, or the polymorphic class its kind falls under
// (arrays, enums, ranges, composites). The hash function is kept only where
// it is declared for the class's input type, so that it can be called on
// the column: bool's class on PostgreSQL 15 lists hashchar("char"), which
// is not (without one, rows are matched by equality alone).
func loadEquality(ctx context.Context, conn *pgx.Conn, oid uint32, t *Table) error {
	rows, err := conn.Query(ctx, `WITH RECURSIVE d(name, coll, typ, shown) AS (
			SELECT a.attname::text, a.attcollation, a.atttypid, pg_catalog.format_type(a.atttypid, NULL) FROM pg_catalog.pg_attribute a
			WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
			UNION ALL
			SELECT d.name, d.coll, y.typbasetype, d.shown FROM d JOIN pg_catalog.pg_type y ON y.oid = d.typ WHERE y.typtype = 'd'),
		b AS (SELECT d.name, d.coll, d.shown, y.oid AS typ, CASE WHEN y.typcategory = 'A' THEN 'anyarray'::regtype
				WHEN y.typtype = 'e' THEN 'anyenum'::regtype WHEN y.typtype = 'r' THEN 'anyrange'::regtype
				WHEN y.typtype = 'c' THEN 'record'::regtype END::oid AS poly
			FROM d JOIN pg_catalog.pg_type y ON y.oid = d.typ AND y.typtype <> 'd'),
		oc AS (SELECT b.name, am.amname, oc.opcfamily, oc.opcintype, oc.opcintype = b.typ AS exact FROM b
			JOIN pg_catalog.pg_opclass oc ON oc.opcdefault AND (oc.opcintype IN (b.typ, b.poly) OR EXISTS (SELECT 1 FROM pg_catalog.pg_cast k
				WHERE k.castsource = b.typ AND k.casttarget = oc.opcintype AND k.castmethod = 'b'))
			JOIN pg_catalog.pg_am am ON am.oid = oc.opcmethod AND am.amname IN ('btree', 'hash'))
		SELECT b.name, b.shown, EXISTS (SELECT 1 FROM oc WHERE oc.name = b.name),
			coalesce((SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(p.proname) FROM oc
				JOIN pg_catalog.pg_amproc ap ON ap.amprocfamily = oc.opcfamily AND ap.amprocnum = 1
					AND ap.amproclefttype = oc.opcintype AND ap.amprocrighttype = oc.opcintype
				JOIN pg_catalog.pg_proc p ON p.oid = ap.amproc AND p.proargtypes[0] = oc.opcintype JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
				WHERE oc.name = b.name AND oc.amname = 'hash' ORDER BY oc.exact DESC LIMIT 1), ''),
			coalesce((SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.collname) FROM pg_catalog.pg_collation c
				JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace WHERE c.oid = b.coll AND b.coll <> 100), '')
		FROM b`, oid)
	if err != nil {
		return fmt.Errorf("reading the equality operators of %s's column types on the target: %w", t.Name, err)
	}
	byName := map[string]colEquality{}
	for rows.Next() {
		var name string
		var e colEquality
		if err := rows.Scan(&name, &e.typ, &e.eq, &e.hash, &e.collate); err != nil {
			return err
		}
		byName[name] = e
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading the equality operators of %s's column types on the target: %w", t.Name, err)
	}
	t.equality = make([]colEquality, len(t.Rel.Columns))
	for i, c := range t.Rel.Columns {
		t.equality[i] = byName[c.Name]
	}
	return nil
}
