package apply

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parapply/parapply"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Hand-built tables, as LoadTable would describe them.

// simpleTable: id int4 primary key, value float8.
func simpleTable() *Table {
	rel := &parapply.Relation{ID: 1, Namespace: "public", Name: "simple", ReplicaIdentity: parapply.IdentityDefault,
		Columns: []parapply.Column{
			{Name: "id", TypeOID: 23, TypeMod: -1, Key: true},
			{Name: "value", TypeOID: 701, TypeMod: -1},
		}}
	return &Table{Rel: rel, Name: rel.QualifiedName(), Types: []string{"integer", "double precision"}, Key: []int{0}}
}

// compositeTable: a two-column key (tenant, Odd "name") in a schema that
// needs quoting, plus a text column.
func compositeTable() *Table {
	rel := &parapply.Relation{ID: 2, Namespace: "My Schema", Name: "Composite", ReplicaIdentity: parapply.IdentityDefault,
		Columns: []parapply.Column{
			{Name: "tenant", TypeOID: 20, TypeMod: -1, Key: true},
			{Name: `Odd "name"`, TypeOID: 25, TypeMod: -1, Key: true},
			{Name: "note", TypeOID: 1043, TypeMod: 36},
		}}
	return &Table{Rel: rel, Name: rel.QualifiedName(), Types: []string{"bigint", "text", "character varying"}, Key: []int{0, 1}}
}

// fullTable: REPLICA IDENTITY FULL with a jsonb column, as loadEquality
// reads it.
func fullTable() *Table {
	rel := &parapply.Relation{ID: 3, Namespace: "public", Name: "docs", ReplicaIdentity: parapply.IdentityFull,
		Columns: []parapply.Column{
			{Name: "id", TypeOID: 23, TypeMod: -1, Key: true},
			{Name: "doc", TypeOID: 3802, TypeMod: -1, Key: true},
			{Name: "ts", TypeOID: 1184, TypeMod: -1, Key: true},
		}}
	return &Table{Rel: rel, Name: rel.QualifiedName(), Types: []string{"integer", "jsonb", "timestamp with time zone"}, Key: []int{0, 1, 2}, Full: true, ExtraUnique: true,
		equality: []colEquality{
			{eq: true, hash: "pg_catalog.hashint4", typ: "integer"},
			{eq: true, hash: "pg_catalog.jsonb_hash", typ: "jsonb"},
			{eq: true, hash: "pg_catalog.timestamp_hash", typ: "timestamp with time zone"},
		}}
}

// placesTable: REPLICA IDENTITY FULL with a point column (no equality
// operator) and a text column under a nondeterministic collation.
func placesTable() *Table {
	rel := &parapply.Relation{ID: 14, Namespace: "public", Name: "places", ReplicaIdentity: parapply.IdentityFull,
		Columns: []parapply.Column{
			{Name: "id", TypeOID: 23, TypeMod: -1, Key: true},
			{Name: "at", TypeOID: 600, TypeMod: -1, Key: true},
			{Name: "name", TypeOID: 25, TypeMod: -1, Key: true},
		}}
	return &Table{Rel: rel, Name: rel.QualifiedName(), Types: []string{"integer", "point", "text"}, Key: []int{0, 1, 2}, Full: true,
		equality: []colEquality{
			{eq: true, hash: "pg_catalog.hashint4", typ: "integer"},
			{typ: "point"},
			{eq: true, hash: "pg_catalog.hashtext", collate: `"public"."ci"`, typ: "text"},
		}}
}

// generatedTable: column 2 (total) is generated on the target, so Types
// marks it "" and the builders are never given it.
func generatedTable() *Table {
	rel := &parapply.Relation{ID: 4, Namespace: "public", Name: "orders", ReplicaIdentity: parapply.IdentityDefault,
		Columns: []parapply.Column{
			{Name: "id", TypeOID: 23, TypeMod: -1, Key: true},
			{Name: "qty", TypeOID: 23, TypeMod: -1},
			{Name: "total", TypeOID: 1700, TypeMod: -1},
			{Name: "price", TypeOID: 1700, TypeMod: -1},
		}}
	return &Table{Rel: rel, Name: rel.QualifiedName(), Types: []string{"integer", "integer", "", "numeric"}, Key: []int{0}}
}

// takenCols lists the columns of t the target takes (non-generated), as
// Applier.present does for a tuple without unchanged TOAST values.
func takenCols(t *Table, skip []int) []int {
	var cols []int
	for i, typ := range t.Types {
		if typ != "" && !slices.Contains(skip, i) {
			cols = append(cols, i)
		}
	}
	return cols
}

type sqlCase struct {
	name   string
	sql    string
	params int // parameters the caller binds: the columns passed
}

func sqlCases() []sqlCase {
	s, c, f, g := simpleTable(), compositeTable(), fullTable(), generatedTable()
	return []sqlCase{
		{"simple_insert", InsertSQL(s, []int{0, 1}), 2},
		{"simple_update", UpdateSQL(s, s.Key, []int{1}), 2},
		{"simple_update_key_change", UpdateSQL(s, s.Key, []int{0, 1}), 3},
		{"simple_delete", DeleteSQL(s, s.Key), 1},
		{"simple_prefetch", PrefetchSQL(s), 1},
		{"simple_insert_probe", InsertProbeSQL(s, 1), 1},

		{"composite_insert", InsertSQL(c, []int{0, 1, 2}), 3},
		{"composite_insert_partial", InsertSQL(c, []int{0, 1}), 2},
		{"composite_update", UpdateSQL(c, c.Key, []int{2}), 3},
		{"composite_update_all", UpdateSQL(c, c.Key, []int{0, 1, 2}), 5},
		{"composite_delete", DeleteSQL(c, c.Key), 2},

		{"full_update", UpdateFullSQL(f, []int{0, 1, 2}, []int{0, 1, 2}), 6},
		{"full_update_partial", UpdateFullSQL(f, []int{0, 2}, []int{1}), 3},
		{"full_delete_collated", DeleteFullSQL(placesTable(), []int{0, 1, 2}), 3},
		{"full_delete", DeleteFullSQL(f, []int{0, 1, 2}), 3},
		{"full_delete_one_column", DeleteFullSQL(f, []int{1}), 1},

		{"generated_insert", InsertSQL(g, takenCols(g, nil)), 3},
		{"generated_update", UpdateSQL(g, g.Key, takenCols(g, g.Key)), 3},
		{"generated_delete", DeleteSQL(g, g.Key), 1},

		{"truncate", TruncateSQL([]string{s.Name}, false, false), 0},
		{"truncate_cascade", TruncateSQL([]string{s.Name, c.Name}, true, false), 0},
		{"truncate_restart_identity", TruncateSQL([]string{s.Name}, false, true), 0},
		{"truncate_both", TruncateSQL([]string{s.Name, c.Name, f.Name}, true, true), 0},
	}
}

func TestGoldenSQL(t *testing.T) {
	for _, tc := range sqlCases() {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join("testdata", tc.name+".sql")
			got := tc.sql + "\n"
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./apply -run Golden -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("SQL differs from %s:\n got: %s\nwant: %s", path, got, want)
			}
		})
	}
}

var paramRE = regexp.MustCompile(`\$([0-9]+)`)

// TestSQLParamCount checks that every builder numbers its parameters
// $1..$N with N the number of columns passed, each used exactly once and
// bound as a text array.
func TestSQLParamCount(t *testing.T) {
	for _, tc := range sqlCases() {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[int]int{}
			highest := 0
			for _, m := range paramRE.FindAllStringSubmatch(tc.sql, -1) {
				n, err := strconv.Atoi(m[1])
				if err != nil {
					t.Fatal(err)
				}
				seen[n]++
				if n > highest {
					highest = n
				}
			}
			if highest != tc.params {
				t.Errorf("highest parameter $%d, want $%d: %s", highest, tc.params, tc.sql)
			}
			for n := 1; n <= tc.params; n++ {
				if seen[n] != 1 {
					t.Errorf("$%d used %d times, want once: %s", n, seen[n], tc.sql)
				}
			}
			if got := strings.Count(tc.sql, "::text[]"); got != tc.params {
				t.Errorf("%d text[] parameters, want %d: %s", got, tc.params, tc.sql)
			}
		})
	}
}

// unnestAliasRE captures the parameter list and the alias list of the one
// unnest call a statement has.
var unnestAliasRE = regexp.MustCompile(`unnest\(([^)]*)\)( WITH ORDINALITY)? AS u\(([^)]*)\)`)

// TestSQLUnnestArity checks that unnest gets as many aliases as arrays
// (plus n for WITH ORDINALITY), and that every alias is used.
func TestSQLUnnestArity(t *testing.T) {
	for _, tc := range sqlCases() {
		if tc.params == 0 {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			ms := unnestAliasRE.FindAllStringSubmatch(tc.sql, -1)
			if len(ms) != 1 {
				t.Fatalf("found %d unnest calls, want 1: %s", len(ms), tc.sql)
			}
			m := ms[0]
			arrays := strings.Split(m[1], ", ")
			names := strings.Split(m[3], ", ")
			ordinality := m[2] != ""
			want := len(arrays)
			if ordinality {
				want++
				if names[len(names)-1] != "n" {
					t.Errorf("WITH ORDINALITY column is %q, want n", names[len(names)-1])
				}
			}
			if len(names) != want {
				t.Errorf("%d arrays but %d aliases: %s", len(arrays), len(names), tc.sql)
			}
			for _, a := range names {
				if !strings.Contains(tc.sql, "u."+a) && !strings.Contains(tc.sql, "m."+a) {
					t.Errorf("alias %s is never used: %s", a, tc.sql)
				}
			}
			full := strings.Contains(tc.name, "full")
			if full != ordinality || full != strings.Contains(tc.sql, "WHERE x.cn = x.bn") {
				t.Errorf("full=%v but WITH ORDINALITY=%v, pairing by rank=%v: %s", full, ordinality,
					strings.Contains(tc.sql, "WHERE x.cn = x.bn"), tc.sql)
			}
		})
	}
}

// TestSQLCastsUseTableTypes checks that each column value is cast to the
// type Types gives for it, and that a generated column never appears.
func TestSQLCastsUseTableTypes(t *testing.T) {
	g := generatedTable()
	for _, q := range []string{InsertSQL(g, takenCols(g, nil)), UpdateSQL(g, g.Key, takenCols(g, g.Key))} {
		if strings.Contains(q, `"total"`) {
			t.Errorf("generated column total appears: %s", q)
		}
		if strings.Contains(q, "::,") || strings.HasSuffix(q, "::") || strings.Contains(q, ":: ") {
			t.Errorf("empty cast: %s", q)
		}
		if !strings.Contains(q, "::numeric") {
			t.Errorf("price not cast to numeric: %s", q)
		}
	}
	c := compositeTable()
	q := InsertSQL(c, []int{2, 0, 1})
	want := `INSERT INTO "My Schema"."Composite" ("note", "tenant", "Odd ""name""") SELECT u.v1::character varying, u.v2::bigint, u.v3::text FROM`
	if !strings.HasPrefix(q, want) {
		t.Errorf("InsertSQL with reordered columns:\n got: %s\nwant prefix: %s", q, want)
	}

	q = DeleteFullSQL(placesTable(), []int{0, 1, 2})
	for _, want := range []string{
		`coalesce(pg_catalog.hashint4(c."id"), 0) = coalesce(pg_catalog.hashint4(u.o1::integer), 0)`,
		`c."id" IS NOT DISTINCT FROM u.o1::integer`,
		`(c."at" IS NULL AND u.o2 IS NULL)`,
		`coalesce(pg_catalog.hashtext(c."name"), 0) = coalesce(pg_catalog.hashtext((u.o3::text COLLATE "public"."ci")), 0)`,
		`c."name" IS NOT DISTINCT FROM (u.o3::text COLLATE "public"."ci")`,
	} {
		if !strings.Contains(q, want) {
			t.Errorf("DeleteFullSQL does not compare with %s: %s", want, q)
		}
	}
	if strings.Contains(q, "::text = ") {
		t.Errorf("DeleteFullSQL compares text forms: %s", q)
	}
}
