package e2e

import (
	"context"
	"testing"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
)

// TestKeysFromTargetConstraints checks which scheduling keys a target
// table's constraints give: a unique index of one of its partitions is
// keyed like one of its own, and an exclusion constraint (on the table or
// a partition), whose conflicts no value names, keys the whole table.
func TestKeysFromTargetConstraints(t *testing.T) {
	e := newEnv(t, "")
	e.exec(e.sub, `CREATE EXTENSION IF NOT EXISTS btree_gist`)
	e.exec(e.sub, `CREATE TABLE parted (id int, v int, w int, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100);
		CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (100) TO (200);
		CREATE UNIQUE INDEX parted_1_v ON parted_1 (v);
		CREATE TABLE plain (id int PRIMARY KEY, v int);
		CREATE TABLE booked (id int PRIMARY KEY, room int, during int4range, EXCLUDE USING gist (room WITH =, during WITH &&));
		CREATE TABLE booked_parted (id int, room int, during int4range, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE booked_parted_1 PARTITION OF booked_parted FOR VALUES FROM (0) TO (100);
		ALTER TABLE booked_parted_1 ADD EXCLUDE USING gist (room WITH =, during WITH &&)`)
	rel := func(name string, cols ...string) *parapply.Relation {
		r := &parapply.Relation{Namespace: "public", Name: name, ReplicaIdentity: parapply.IdentityDefault}
		for i, c := range cols {
			r.Columns = append(r.Columns, parapply.Column{Name: c, Key: i == 0})
		}
		return r
	}
	for _, c := range []struct {
		rel        *parapply.Relation
		uniques    []string
		wholeTable bool
	}{
		{rel("parted", "id", "v", "w"), []string{"parted_1_v"}, false},
		{rel("plain", "id", "v"), nil, false},
		{rel("booked", "id", "room", "during"), nil, true},
		{rel("booked_parted", "id", "room", "during"), nil, true},
	} {
		tb, err := apply.LoadTable(context.Background(), e.sub, c.rel, false)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, u := range tb.Uniques {
			names = append(names, u.Name)
		}
		if len(names) != len(c.uniques) || (len(names) > 0 && names[0] != c.uniques[0]) || tb.WholeTable != c.wholeTable {
			t.Errorf("%s: unique keys %v, whole table %v; want %v, %v", c.rel.Name, names, tb.WholeTable, c.uniques, c.wholeTable)
		}
	}
}
