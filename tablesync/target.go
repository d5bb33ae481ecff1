package tablesync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/citus"
)

// querier is a connection or a transaction on the target.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// examined is what the copy does to the target tables before it fills
// them. Tables are emptied all at once, before any is copied: a TRUNCATE of
// a table that another table references by a foreign key fails unless that
// table is truncated in the same statement, and truncating one table at a
// time emptied the referencing tables and then stopped at the referenced
// one, with nothing copied.
type examined struct {
	// held are the tables that held rows before the copy (other than an
	// interrupted copy's).
	held map[string]bool
	// interrupted are the tables an interrupted copy left rows in.
	interrupted []string
	// truncate is emptied by one TRUNCATE (ONLY for a table that is not
	// partitioned); del, tables referenced by a table outside that
	// statement whose rows may go all the same (an interrupted copy's own
	// rows), by DELETE with session_replication_role = replica, which
	// checks no foreign key and cascades nothing.
	truncate, del []string
}

// emptyCandidate is a table to empty; policy is set when the rows are the
// user's (existing_data = truncate): a table outside the copy that
// references it refuses the copy, as its rows would be left dangling.
type emptyCandidate struct {
	name   string
	policy bool
}

// examine applies the existing-data policy to the tables about to be
// copied, without changing anything: it refuses the copy (naming every
// table that holds rows under existing_data = error, or the foreign key of
// a table outside the copy that references a table to truncate), or says
// which tables to empty and how.
func examine(ctx context.Context, q querier, existing ExistingData, tables []Table, state map[string]State) (*examined, error) {
	has := map[string]bool{}
	for _, t := range tables {
		name := t.QualifiedName()
		var h bool
		if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+name+")").Scan(&h); err != nil {
			return nil, fmt.Errorf("copy: reading %s on the target: %w", name, err)
		}
		has[name] = h
	}
	ex, cands, err := applyPolicy(existing, tables, state, has)
	if err != nil {
		return nil, err
	}
	if err := ex.choose(ctx, q, cands); err != nil {
		return nil, err
	}
	return ex, nil
}

// applyPolicy is examine's decision, given which tables hold rows (has):
// a table an interrupted copy left (state "copying") is emptied whatever
// the policy (even when empty, so that it is in the same TRUNCATE as the
// tables it references); with existing_data = truncate every table is, as
// the policy's; a table holding rows is kept under keep, and refuses the
// copy under error (every such table named at once). It returns the tables
// to empty, in the order given.
func applyPolicy(existing ExistingData, tables []Table, state map[string]State, has map[string]bool) (*examined, []emptyCandidate, error) {
	if existing == "" {
		existing = ExistingError
	}
	ex := &examined{held: map[string]bool{}}
	var refused []string
	var cands []emptyCandidate
	for _, t := range tables {
		name := t.QualifiedName()
		has := has[name]
		switch {
		case state[name].State == "copying":
			// Emptied even when empty: a table of the copy that
			// references another must be in the same TRUNCATE.
			cands = append(cands, emptyCandidate{name: name})
			if has {
				ex.interrupted = append(ex.interrupted, name)
			}
		case existing == ExistingTruncate:
			cands = append(cands, emptyCandidate{name: name, policy: true})
			ex.held[name] = has
		case !has:
		case existing == ExistingKeep:
			ex.held[name] = true
		default:
			refused = append(refused, name)
		}
	}
	switch len(refused) {
	case 0:
	case 1:
		return nil, nil, fmt.Errorf("target table %s already holds rows; empty it, or set existing_data = truncate (replace them) or keep (copy on top of them), or copy_data = off if it is already in sync", refused[0])
	default:
		return nil, nil, fmt.Errorf("target tables %s already hold rows; empty them, or set existing_data = truncate (replace them) or keep (copy on top of them), or copy_data = off if they are already in sync", strings.Join(refused, ", "))
	}
	return ex, cands, nil
}

// choose splits the tables to empty between one TRUNCATE and DELETEs: a
// table referenced by a foreign key of a table outside the TRUNCATE is
// deleted from if its rows are parapply's own, and refuses the copy if they
// are the user's and the referencing table is not the copy's.
func (ex *examined) choose(ctx context.Context, q querier, cands []emptyCandidate) error {
	if len(cands) == 0 {
		return nil
	}
	owner := map[uint32]int{} // relation (a partitioned table's whole tree) -> candidate
	partitioned := make([]bool, len(cands))
	var all []uint32
	for i, c := range cands {
		var rels []uint32
		err := q.QueryRow(ctx, `SELECT c.relkind = 'p', coalesce((SELECT array_agg(t.relid::oid) FROM pg_catalog.pg_partition_tree(c.oid) t), ARRAY[c.oid])
			FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass`, c.name).Scan(&partitioned[i], &rels)
		if err != nil {
			return fmt.Errorf("copy: reading %s on the target: %w", c.name, err)
		}
		for _, r := range rels {
			owner[r] = i
		}
		all = append(all, rels...)
	}
	rows, err := q.Query(ctx, `SELECT f.conname, '"' || replace(n.nspname, '"', '""') || '"."' || replace(c.relname, '"', '""') || '"', f.conrelid::oid, f.confrelid::oid
		FROM pg_catalog.pg_constraint f JOIN pg_catalog.pg_class c ON c.oid = f.conrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE f.contype = 'f' AND f.confrelid = ANY($1::oid[]) ORDER BY f.conparentid <> 0, f.conrelid, f.conname`, all)
	if err != nil {
		return fmt.Errorf("copy: reading the foreign keys on the target: %w", err)
	}
	fks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (foreignKey, error) {
		var f foreignKey
		err := r.Scan(&f.name, &f.from, &f.conrel, &f.toRel)
		return f, err
	})
	if err != nil {
		return fmt.Errorf("copy: reading the foreign keys on the target: %w", err)
	}
	ex.truncate, ex.del, err = splitEmptying(cands, partitioned, owner, fks)
	return err
}

// foreignKey is a foreign key on the target that references a table to
// empty: its name, the referencing table (quoted) and the relations, by
// OID, it goes from and to.
type foreignKey struct {
	name, from    string
	conrel, toRel uint32
}

// splitEmptying is choose's decision, given the relations of each candidate
// (owner: relation -> index in cands, a partitioned table owning its whole
// tree) and the foreign keys referencing them: a candidate referenced by a
// table outside the TRUNCATE (not a candidate, or one deleted from) is
// deleted from, until nothing changes, unless its rows are the user's
// (policy), which refuses the copy. It returns the names for the TRUNCATE
// and for DELETE, with ONLY for a table that is not partitioned.
func splitEmptying(cands []emptyCandidate, partitioned []bool, owner map[uint32]int, fks []foreignKey) (truncate, del []string, err error) {
	deleted := make([]bool, len(cands))
	for changed := true; changed; {
		changed = false
		for _, f := range fks {
			to := owner[f.toRel]
			if deleted[to] {
				continue
			}
			from, ours := owner[f.conrel]
			if ours && !deleted[from] {
				continue // truncated in the same statement
			}
			if !ours && cands[to].policy {
				return nil, nil, fmt.Errorf("existing_data = truncate would empty target table %s, but foreign key %s of table %s, which the copy does not fill, references it: a TRUNCATE would have to empty %s too, and nothing was truncated; empty the tables yourself (TRUNCATE %s, %s) or drop the foreign key, then start again",
					cands[to].name, f.name, f.from, f.from, cands[to].name, f.from)
			}
			deleted[to], changed = true, true
		}
	}
	for i, c := range cands {
		name := c.name
		if !partitioned[i] {
			name = "ONLY " + name
		}
		if deleted[i] {
			del = append(del, name)
		} else {
			truncate = append(truncate, name)
		}
	}
	return truncate, del, nil
}

// empty empties the chosen tables, in the caller's transaction.
func (ex *examined) empty(ctx context.Context, tx pgx.Tx) error {
	if len(ex.truncate) > 0 {
		// On a Citus coordinator the shards are truncated by a trigger of
		// Citus', which fires only under session_replication_role =
		// origin: a TRUNCATE of the session's replica role would leave
		// every row where Citus reads.
		var role string
		onCitus, err := citus.Installed(ctx, tx)
		if err == nil && onCitus {
			err = tx.QueryRow(ctx, "SELECT pg_catalog.current_setting('session_replication_role')").Scan(&role)
		}
		if err == nil && onCitus {
			_, err = tx.Exec(ctx, "SET LOCAL session_replication_role = origin")
		}
		if err == nil {
			_, err = tx.Exec(ctx, "TRUNCATE "+strings.Join(ex.truncate, ", "))
		}
		if err == nil && onCitus {
			_, err = tx.Exec(ctx, "SELECT pg_catalog.set_config('session_replication_role', $1, true)", role)
		}
		if err != nil {
			return fmt.Errorf("truncating %s on the target: %w", strings.Join(ex.truncate, ", "), err)
		}
	}
	if len(ex.del) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
		return fmt.Errorf("emptying %s on the target: %w", strings.Join(ex.del, ", "), err)
	}
	for _, name := range ex.del {
		if _, err := tx.Exec(ctx, "DELETE FROM "+name); err != nil {
			return fmt.Errorf("emptying %s on the target: %w", name, err)
		}
	}
	_, err := tx.Exec(ctx, "SET LOCAL session_replication_role = DEFAULT")
	return err
}

// heldRows refuses, before anything is created or emptied, a copy of
// tables that the existing-data policy would refuse (see Copy), so that a
// start can refuse before it creates its slot; it returns the tables that
// hold rows.
func heldRows(ctx context.Context, conn *pgx.Conn, existing ExistingData, tables []Table, state map[string]State) ([]string, error) {
	ex, err := examine(ctx, conn, existing, tables, state)
	if err != nil {
		return nil, err
	}
	var held []string
	for name, has := range ex.held {
		if has {
			held = append(held, name)
		}
	}
	slices.Sort(held)
	return held, nil
}

// Forget undoes, in tx, what the copy recorded and wrote for slot, for a
// start that created its slot and was refused: the next start is then a
// first start again. It empties the tables the copy began (if copied: with
// copy_data = off nothing was written), except those in keep, whose rows
// from before cannot be told from the copied ones; rebuilds the indexes
// the copy deferred; and deletes the slot's sync state. It returns the
// tables the copy began that kept their rows.
func Forget(ctx context.Context, tx pgx.Tx, slot string, copied bool, keep []string) ([]string, error) {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.to_regclass('parapply.sync_state') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT table_name FROM parapply.sync_state WHERE slot_name = $1 ORDER BY table_name`, slot)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading parapply.sync_state: %w", err)
	}
	var left []string
	if copied {
		var cands []emptyCandidate
		for _, n := range names {
			if slices.Contains(keep, n) {
				left = append(left, n)
			} else {
				cands = append(cands, emptyCandidate{name: n})
			}
		}
		ex := &examined{}
		if err := ex.choose(ctx, tx, cands); err != nil {
			return nil, err
		}
		if err := ex.empty(ctx, tx); err != nil {
			return nil, err
		}
	}
	rows, err = tx.Query(ctx, `SELECT recreate FROM parapply.deferred_index WHERE slot_name = $1 ORDER BY table_name, ord`, slot)
	if err != nil {
		return nil, err
	}
	deferred, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading parapply.deferred_index: %w", err)
	}
	for _, q := range deferred {
		if _, err := tx.Exec(ctx, q); err != nil {
			return nil, fmt.Errorf("rebuilding an index the copy deferred (%s): %w", q, err)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM parapply.deferred_index WHERE slot_name = $1`, slot); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM parapply.sync_state WHERE slot_name = $1`, slot); err != nil {
		return nil, err
	}
	return left, nil
}
