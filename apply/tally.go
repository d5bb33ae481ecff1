package apply

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/conflict"
)

// Tally counts what reached one table in committed target transactions, so
// that metrics can say which tables the work goes to. A retried or rolled
// back transaction is counted once, when it commits; missing rows are
// counted when a statement finds fewer rows than it should (a transaction
// retried after such a statement may count them again).
type Tally struct {
	Inserts, Updates, Deletes, Truncates atomic.Int64
	// UpdateMissing and DeleteMissing count rows an update or delete did
	// not find on the target (the built-in subscription's update_missing
	// and delete_missing conflicts).
	UpdateMissing, DeleteMissing atomic.Int64
	// conflicts counts the other conflict types, by their place in
	// conflict.Types.
	conflicts [8]atomic.Int64
}

// Conflict returns the counter of conflicts of type ty on the table.
func (t *Tally) Conflict(ty conflict.Type) *atomic.Int64 {
	switch ty {
	case conflict.UpdateMissing:
		return &t.UpdateMissing
	case conflict.DeleteMissing:
		return &t.DeleteMissing
	}
	i := slices.Index(conflict.Types, ty)
	if i < 0 {
		i = len(t.conflicts) - 1
	}
	return &t.conflicts[i]
}

// Tallies holds a Tally per published table, shared by every applier of a
// run (the stream reader's and the workers').
type Tallies struct {
	mu sync.Mutex
	m  map[string]*Tally
}

// NewTallies returns an empty set of tallies.
func NewTallies() *Tallies { return &Tallies{m: map[string]*Tally{}} }

// For returns the tally of the table named schema.name, creating it.
func (ts *Tallies) For(name string) *Tally {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.m[name]
	if !ok {
		t = &Tally{}
		ts.m[name] = t
	}
	return t
}

// Names lists the tables tallied so far, sorted.
func (ts *Tallies) Names() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	names := make([]string, 0, len(ts.m))
	for n := range ts.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// publishedAs is the name the publications publish rel's rows under, for
// its tally: a partition sent as itself while its root is what is
// published and copied (another publication sends it so, or an older
// publisher) counts under the nearest ancestor parapply copied, so that
// every partition's changes count under the root's name as the copy's
// do; name, rel's own, when none is (a table not partitioned, one that
// joined the publication).
func (a *Applier) publishedAs(ctx context.Context, rel *parapply.Relation, name string) string {
	rows, _ := a.conn.Query(ctx, `SELECT n.nspname::text, c.relname::text FROM pg_catalog.pg_partition_ancestors($1::regclass) WITH ORDINALITY p(relid, i)
		JOIN pg_catalog.pg_class c ON c.oid = p.relid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE p.i > 1 ORDER BY p.i`, rel.QualifiedName())
	var schema, table string
	found := ""
	_, err := pgx.ForEachRow(rows, []any{&schema, &table}, func() error {
		if _, ok := a.synced[parapply.QuoteIdent(schema)+"."+parapply.QuoteIdent(table)]; ok && found == "" {
			found = parapply.TableName(schema, table)
		}
		return nil
	})
	if err != nil || found == "" {
		return name
	}
	return found
}

// Kinds of change a table's pending counts hold.
const (
	tallyInsert = iota
	tallyUpdate
	tallyDelete
	tallyTruncate
)

// pendingTally is a table's changes in the open group, added to its Tally
// when the group commits.
type pendingTally struct {
	tally *Tally
	n     [4]int64
}

func (p pendingTally) addTo() {
	for i, c := range []*atomic.Int64{&p.tally.Inserts, &p.tally.Updates, &p.tally.Deletes, &p.tally.Truncates} {
		if p.n[i] != 0 {
			c.Add(p.n[i])
		}
	}
}

// count notes one change of kind k to t in the open group.
func (a *Applier) count(t *Table, k int) {
	if t.pending == ([4]int64{}) {
		a.touched = append(a.touched, t)
	}
	t.pending[k]++
}

// takeCounts returns the open group's counts and forgets them.
func (a *Applier) takeCounts() []pendingTally {
	if len(a.touched) == 0 {
		return nil
	}
	out := make([]pendingTally, len(a.touched))
	for i, t := range a.touched {
		out[i] = pendingTally{t.tally, t.pending}
		t.pending = [4]int64{}
	}
	a.touched = a.touched[:0]
	return out
}

// missing counts rows an update or delete statement of kind did not find.
func missing(t *Table, kind byte, n int64) {
	if t == nil {
		return
	}
	switch kind {
	case 'U', 'F':
		t.tally.UpdateMissing.Add(n)
	case 'D', 'X':
		t.tally.DeleteMissing.Add(n)
	}
}
