package apply

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/citus"
)

// A Citus coordinator takes the apply's statements through its planner, so
// the statements need three things plain PostgreSQL does not (see package
// citus): an update never names the distribution column in SET unless the
// value changes, and a change of it is a delete and an insert (Citus moves
// no row between shards); update and delete statements filter on the
// distribution values they hold, so that Citus sends each to the shards
// those values are on, and runs are split by shard (run.part), so that
// most statements reach one shard and take no shard locks that concurrent
// workers would queue on; a reference table's changes are keyed as the
// whole table (a write to it goes to every node).

// The statements that set session_replication_role in a transaction on a
// Citus coordinator: a SET LOCAL, which Citus sends on to the workers'
// sessions of the transaction (citus.Enabled), so that triggers and
// foreign keys on the shards act as for replicated changes, as on the
// coordinator (lock_timeout goes the same way, so that a lock wait on a
// worker ends as one on the coordinator would). A TRUNCATE runs under
// origin: Citus truncates the shards from a trigger.
const (
	citusReplicaRole = "SET LOCAL session_replication_role = replica"
	citusOriginRole  = "SET LOCAL session_replication_role = origin"
)

// deriveSkips sets what an update leaves out of its SET list: with the
// key unchanged the key, and always the GENERATED ALWAYS AS IDENTITY
// columns and a Citus distribution column (an update that changes it is a
// delete and an insert).
func (t *Table) deriveSkips() {
	t.keyAndIdentity = append(slices.Clone(t.Key), t.AlwaysIdentity...)
	t.setSkip = t.AlwaysIdentity
	if d := t.dist(); d >= 0 {
		t.setSkip = append(slices.Clone(t.AlwaysIdentity), d)
		if !slices.Contains(t.keyAndIdentity, d) {
			t.keyAndIdentity = append(t.keyAndIdentity, d)
		}
	}
}

// dist returns the published column Citus distributes the table by, or -1
// (not a Citus distributed table).
func (t *Table) dist() int {
	if t.Citus == nil || t.Citus.Kind != citus.Distributed {
		return -1
	}
	return t.distCol
}

// loadCitus reads the Citus metadata of t (none on a plain PostgreSQL
// target) and checks that its changes can be located on its shards.
func (t *Table) loadCitus(ct *citus.Table) error {
	t.Citus = ct
	if ct == nil {
		return nil
	}
	switch ct.Kind {
	case citus.Reference:
		// A write goes to every node, under a lock on the table's one
		// shard: two workers writing it would only wait on each other.
		t.WholeTable = true
	case citus.Distributed:
		t.distCol = slices.IndexFunc(t.Rel.Columns, func(c parapply.Column) bool { return c.Name == ct.Column })
		if t.distCol < 0 {
			return fmt.Errorf("%w: %s is distributed by Citus by column %s, which the publication does not publish: publish it (a column list that names it), or distribute the table by a published column", ErrSchema, t.Name, parapply.QuoteIdent(ct.Column))
		}
		if !t.Full && len(t.Key) > 0 && !slices.Contains(t.Key, t.distCol) {
			return fmt.Errorf("%w: %s is distributed by Citus by column %s, which the replica identity of the table on the publisher does not hold, so an update or delete cannot name the shard its row is on: make the publisher's primary key (or REPLICA IDENTITY USING INDEX) include %s", ErrSchema, t.Name, parapply.QuoteIdent(ct.Column), parapply.QuoteIdent(ct.Column))
		}
		if t.Full {
			return fmt.Errorf("%w: %s has REPLICA IDENTITY FULL on the publisher and is distributed by Citus on the target, where a row located by its whole old image cannot be updated or deleted (Citus refuses the statement that finds it: \"modifications with ctid on where clause are not supported\"); give the table a primary key (or REPLICA IDENTITY USING INDEX) on the publisher that holds %s", ErrSchema, t.Name, parapply.QuoteIdent(ct.Column))
		}
	}
	return nil
}

// part returns the shard a row whose tuple (new row, old key or old row)
// is tup lands on, for a Citus distributed table; 0 for other tables, and
// -1 when the value's shard cannot be told here (its statement then
// reaches the shards its values are on: Citus prunes them).
func (t *Table) part(tup parapply.Tuple) int32 {
	d := t.dist()
	if d < 0 {
		return 0
	}
	v := tup[d]
	if v.Kind != parapply.ValueText && v.Kind != parapply.ValueBinary {
		return -1
	}
	n, ok := t.Citus.Shard(v.Data, v.Kind == parapply.ValueBinary)
	if !ok {
		return -1
	}
	return int32(n)
}

// moves reports whether an update changes the row's distribution value.
func (t *Table) moves(old, new parapply.Tuple) bool {
	d := t.dist()
	if d < 0 {
		return false
	}
	o, n := old[d], new[d]
	return n.Kind != parapply.ValueUnchanged && (o.Kind != n.Kind || !bytes.Equal(o.Data, n.Data))
}

// move applies an update that changes a row's distribution value as Citus
// needs it: a delete of the old row, then an insert of the new one, in the
// same target transaction. The insert needs every column: a change that
// leaves one out (an unchanged TOASTed value) is refused.
func (b *batcher) move(t *Table, old, new parapply.Tuple) (*run, error) {
	for i, v := range new {
		if v.Kind == parapply.ValueUnchanged {
			return nil, fmt.Errorf("%w: an update of %s moves its row to another value of the Citus distribution column %s, which Citus takes only as a delete and an insert, but the change does not carry column %s (an unchanged TOASTed value, which the publisher leaves out): make that change on the target by hand (UPDATE ... SET %s = ...), then skip this transaction (parapply skip)",
				ErrSchema, t.Name, parapply.QuoteIdent(t.Rel.Columns[t.distCol].Name), parapply.QuoteIdent(t.Rel.Columns[i].Name), parapply.QuoteIdent(t.Rel.Columns[t.distCol].Name))
		}
	}
	if _, err := b.delete(t, old); err != nil {
		return nil, err
	}
	return b.insert(t, new), nil
}

// distFilter appends to an update or delete statement of a Citus
// distributed table " AND t.<column> = ANY(<its values>)", where the key
// columns key are parameters from $1 on: the filter Citus prunes shards
// by, so that the statement reaches only the shards its rows are on.
func distFilter(b *strings.Builder, t *Table, key []int) {
	d := t.dist()
	i := slices.Index(key, d)
	if d < 0 || i < 0 {
		return
	}
	b.WriteString(" AND t." + colName(t, d) + " = ANY (")
	param(b, i+1, t.paramType(d))
	b.WriteString("::" + t.Types[d] + "[])")
}

// citusUniqueViolation gives a unique violation that Citus reports as an
// internal error (SQLSTATE XX000, from its COPY into a shard, which
// INSERT ... SELECT uses) its meaning back, SQLSTATE 23505, so that it is
// told apart as a unique violation (a retry behind an earlier transaction,
// on_error = skip_transaction) and not taken for a fault to ride out.
func citusUniqueViolation(err error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgerrcode.InternalError && strings.HasPrefix(pe.Message, "duplicate key value violates unique constraint ") {
		pe.Code = pgerrcode.UniqueViolation
		if pe.ConstraintName == "" {
			name := strings.TrimPrefix(pe.Message, "duplicate key value violates unique constraint ")
			pe.ConstraintName = strings.Trim(name, `"`)
		}
	}
}
