package apply

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/citus"
)

// citusTable: orders distributed by account_id (bigint) over 4 shards,
// keyed by (account_id, id), with a text column.
func citusTable() *Table {
	rel := &parapply.Relation{ID: 20, Namespace: "public", Name: "orders", ReplicaIdentity: parapply.IdentityDefault,
		Columns: []parapply.Column{{Name: "account_id", TypeOID: 20, TypeMod: -1, Key: true}, {Name: "id", TypeOID: 20, TypeMod: -1, Key: true}, {Name: "note", TypeOID: 25, TypeMod: -1}}}
	t := &Table{Rel: rel, Name: rel.QualifiedName(), Types: []string{"bigint", "bigint", "text"}, Key: []int{0, 1}}
	if err := t.loadCitus(citus.Uniform("account_id", 20, 4)); err != nil {
		panic(err)
	}
	t.deriveSkips()
	return t
}

// TestBatcherCitus: on a Citus distributed table, runs are split by the
// shard of the distribution value, an update leaves the distribution
// column out of SET, and one that changes it is a delete and an insert.
func TestBatcherCitus(t *testing.T) {
	ct := citusTable()
	tables := map[uint32]*Table{ct.Rel.ID: ct}
	// a and same share a shard, other is on another.
	shard := func(v string) int32 { return ct.part(tuple([]string{v, "0", "-"})) }
	a, same, other := "1", "", ""
	for v := 2; same == "" || other == ""; v++ {
		s := strconv.Itoa(v)
		switch {
		case shard(s) == shard(a) && same == "":
			same = s
		case shard(s) != shard(a) && other == "":
			other = s
		}
	}
	tests := []struct {
		name    string
		changes []tc
		want    []string
	}{
		{"inserts split by shard, in the order their runs opened",
			[]tc{{'I', 20, nil, []string{a, "1", "x"}}, {'I', 20, nil, []string{other, "2", "y"}}, {'I', 20, nil, []string{same, "3", "z"}}},
			[]string{"INSERT orders {" + a + "," + same + "} {1,3} {x,z}", "INSERT orders {" + other + "} {2} {y}"}},
		{"a key change that keeps the distribution value leaves it out of SET",
			[]tc{{'K', 20, []string{a, "5", "-"}, []string{a, "6", "x"}}},
			[]string{"UPDATE orders {" + a + "} {5} {6} {x}"}},
		// The insert's run closes first (the update's kind differs);
		// the delete's, on another shard, is as independent of it as a
		// run of another table.
		{"a change of the distribution value is a delete and an insert",
			[]tc{{'K', 20, []string{a, "5", "-"}, []string{other, "5", "x"}}, {'U', 20, nil, []string{other, "5", "y"}}},
			[]string{"INSERT orders {" + other + "} {5} {x}", "DELETE orders {" + a + "} {5}", "UPDATE orders {" + other + "} {5} {y}"}},
		{"a row moved away and back keeps its order on each shard",
			[]tc{{'K', 20, []string{a, "5", "-"}, []string{other, "5", "x"}}, {'K', 20, []string{other, "5", "-"}, []string{a, "5", "y"}}},
			[]string{"INSERT orders {" + other + "} {5} {x}", "DELETE orders {" + a + "} {5}", "DELETE orders {" + other + "} {5}", "INSERT orders {" + a + "} {5} {y}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var collapsed atomic.Int64
			got := statements(t, newBatcher(1000, &collapsed), tables, tt.changes)
			if !slices.Equal(got, tt.want) {
				t.Errorf("statements\n got  %q\n want %q", got, tt.want)
			}
		})
	}

	var collapsed atomic.Int64
	b := newBatcher(1000, &collapsed)
	err := tc{'K', 20, []string{a, "5", "-"}, []string{other, "5", "~"}}.add(b, tables)
	if err == nil || !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "parapply skip") {
		t.Errorf("a move with an unchanged TOASTed column: %v; want a schema error naming the way out", err)
	}

	up, del := UpdateSQL(ct, ct.Key, []int{1, 2}), DeleteSQL(ct, ct.Key)
	for _, sql := range []string{up, del} {
		if !strings.HasSuffix(sql, ` AND t."account_id" = ANY ($1::text[]::bigint[])`) {
			t.Errorf("no distribution filter Citus prunes shards by: %s", sql)
		}
	}
	if strings.Contains(up, `SET "account_id"`) {
		t.Errorf("the distribution column is in the SET list: %s", up)
	}
}

// TestLoadCitusRefuses: a distributed table whose rows an update could not
// place on their shard is refused with the fix; a reference table is keyed
// whole.
func TestLoadCitusRefuses(t *testing.T) {
	mk := func(key []int, identity byte) *Table {
		t := citusTable()
		rel := *t.Rel
		rel.ReplicaIdentity = identity
		t.Rel, t.Key, t.Full = &rel, key, identity == parapply.IdentityFull
		return t
	}
	for _, c := range []struct {
		name string
		t    *Table
		ct   *citus.Table
		want string
	}{
		{"the distribution column not in the key", mk([]int{1}, parapply.IdentityIndex), citus.Uniform("account_id", 20, 4), "does not hold"},
		{"REPLICA IDENTITY FULL", mk(nil, parapply.IdentityFull), citus.Uniform("account_id", 20, 4), "REPLICA IDENTITY FULL"},
		{"the distribution column not published", mk([]int{0, 1}, parapply.IdentityDefault), citus.Uniform("region", 25, 4), "does not publish"},
	} {
		err := c.t.loadCitus(c.ct)
		if err == nil || !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a schema error saying %q", c.name, err, c.want)
		}
	}
	ref := citusTable()
	if err := ref.loadCitus(&citus.Table{Kind: citus.Reference}); err != nil || !ref.WholeTable || ref.dist() != -1 {
		t.Errorf("a reference table: %v, keyed whole %v, distribution column %d", err, ref.WholeTable, ref.dist())
	}
}

// TestCitusUniqueViolation: Citus' internal error for a duplicate key met
// through COPY becomes the unique violation it is; other internal errors
// stay what they are.
func TestCitusUniqueViolation(t *testing.T) {
	dup := &pgconn.PgError{Code: pgerrcode.InternalError, Message: `duplicate key value violates unique constraint "accounts_pkey_102009"`}
	citusUniqueViolation(errors.Join(errors.New("applying"), dup))
	if dup.Code != pgerrcode.UniqueViolation || dup.ConstraintName != "accounts_pkey_102009" {
		t.Errorf("got %s, constraint %q", dup.Code, dup.ConstraintName)
	}
	other := &pgconn.PgError{Code: pgerrcode.InternalError, Message: "could not connect"}
	citusUniqueViolation(other)
	if other.Code != pgerrcode.InternalError {
		t.Errorf("an internal error that is no duplicate became %s", other.Code)
	}
}
