package subscriber

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/source"
)

// Tables that leave the publication while parapply runs (ALTER PUBLICATION
// ... DROP TABLE, a SET TABLE without them, a table moved out of a FOR
// TABLES IN SCHEMA schema, a partition detached, a table dropped) are
// forgotten as copied, as the built-in's REFRESH PUBLICATION removes them
// from pg_subscription_rel: one that joins again is copied online as any
// table that joins (joined.go), with existing_data deciding what becomes
// of the rows the target kept. Counted as copied still, it would take the
// changes made after it came back and miss those made while it was out.
//
//   - each read of the publication (joined.go) keeps the tables listed and
//     the publisher's WAL position after the listing; a copied table listed
//     at the last read and not at this one left before that position;
//   - it is forgotten once the run has applied everything before that
//     position (its last changes, made before it left, may still be in the
//     stream): its row in parapply.sync_state goes, the appliers (the
//     workers' as after a DDL) take it as not copied, and the leave is
//     logged once;
//   - a table that left and came back between two reads is found by the
//     publisher's rows that publish it (pg_publication_rel, and
//     pg_publication_namespace from PostgreSQL 15 on): all replaced, with
//     its row filter and column list as they were (ALTER PUBLICATION ...
//     SET TABLE keeps the row of a table whose filter and list it leaves
//     alone), it left and came back; it is forgotten at once and copied
//     again. Under FOR ALL TABLES no row publishes a table: such a leave
//     (PostgreSQL 19's EXCEPT, set and unset between two reads) is not
//     seen.

// listedTable is a published table as the last read of the publication
// saw it.
type listedTable struct {
	schema, name    string
	filter, columns string
	// rows are the publisher's rows that publish it ("r" and a
	// pg_publication_rel oid, "n" and a pg_publication_namespace oid),
	// sorted (in Go's order); none under FOR ALL TABLES.
	rows []string
}

// leftTable is a copied table that left the publication, to forget once
// the run has applied everything before at (at once when back).
type leftTable struct {
	schema, name string
	at           parapply.LSN
	// dropped: the publisher no longer has the table; back: it left and
	// came back between two reads.
	dropped, back bool
}

// membershipSQL lists, for the tables named ($2, $3), the publisher's rows
// that make the publications ($1) publish them: the table's or an
// ancestor's pg_publication_rel rows, and (byNamespace) the
// pg_publication_namespace rows of their schemas.
func membershipSQL(byNamespace bool) string {
	q := `SELECT n.nspname, c.relname, ARRAY(
		SELECT 'r' || r.oid FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
		WHERE p.pubname = ANY ($1) AND (r.prrelid = c.oid OR r.prrelid IN (SELECT a.relid FROM pg_catalog.pg_partition_ancestors(c.oid) a))`
	if byNamespace {
		q += `
		UNION ALL
		SELECT 'n' || s.oid FROM pg_catalog.pg_publication_namespace s JOIN pg_catalog.pg_publication p ON p.oid = s.pnpubid
		WHERE p.pubname = ANY ($1) AND s.pnnspid IN (SELECT k.relnamespace FROM pg_catalog.pg_class k
			WHERE k.oid = c.oid OR k.oid IN (SELECT a.relid FROM pg_catalog.pg_partition_ancestors(c.oid) a))`
	}
	return q + `
		)::text[]
	FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE (n.nspname, c.relname) IN (SELECT u.s, u.n FROM ROWS FROM (pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) u(s, n))`
}

// noteLeft compares the tables published now with those of the last read
// (none at the first): a copied table gone from the list, or that left and
// came back since (see the top of this file), is noted to be forgotten.
// conn is the publisher session the list was read on, after the read.
func (l *loop) noteLeft(ctx context.Context, conn *pgx.Conn, published []source.PublishedTable) error {
	var version int
	var at string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int,
		CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_lsn() END::text`).Scan(&version, &at); err != nil {
		return err
	}
	lsn, err := parapply.ParseLSN(at)
	if err != nil {
		return err
	}
	cur, err := listPublishedRows(ctx, conn, version >= 150000, l.s.cfg.Source.Publications, published)
	if err != nil {
		return err
	}
	synced := l.app.Synced()
	if l.leaving == nil {
		l.leaving = map[string]leftTable{}
	}
	for key, prev := range l.listed {
		if _, copied := synced[key]; !copied {
			continue
		}
		if c, ok := cur[key]; ok {
			if cameBack(prev, c) {
				l.leaving[key] = leftTable{schema: c.schema, name: c.name, back: true}
			}
			continue
		}
		if _, ok := l.leaving[key]; ok {
			continue
		}
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL`, key).Scan(&exists); err != nil {
			return err
		}
		l.leaving[key] = leftTable{schema: prev.schema, name: prev.name, at: lsn, dropped: !exists}
	}
	l.listed = cur
	return nil
}

// listPublishedRows reads the rows that publish each of the published
// tables (see membershipSQL), by qualified name.
func listPublishedRows(ctx context.Context, conn *pgx.Conn, byNamespace bool, publications []string, published []source.PublishedTable) (map[string]listedTable, error) {
	cur := make(map[string]listedTable, len(published))
	schemas, names := make([]string, len(published)), make([]string, len(published))
	for i, pt := range published {
		schemas[i], names[i] = pt.Schema, pt.Name
		cur[parapply.QuoteIdent(pt.Schema)+"."+parapply.QuoteIdent(pt.Name)] = listedTable{
			schema: pt.Schema, name: pt.Name, filter: pt.RowFilter, columns: strings.Join(pt.Columns, ","),
		}
	}
	rows, err := conn.Query(ctx, membershipSQL(byNamespace), publications, schemas, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var schema, name string
		var by []string
		if err := rows.Scan(&schema, &name, &by); err != nil {
			return nil, err
		}
		key := parapply.QuoteIdent(schema) + "." + parapply.QuoteIdent(name)
		if t, ok := cur[key]; ok {
			slices.Sort(by)
			t.rows = by
			cur[key] = t
		}
	}
	return cur, rows.Err()
}

// cameBack reports whether a table listed at two reads left and came back
// in between: every row that published it was replaced, while its row
// filter and column list stayed as they were (a change of either replaces
// the row without the table leaving).
func cameBack(prev, cur listedTable) bool {
	if len(prev.rows) == 0 || len(cur.rows) == 0 || prev.filter != cur.filter || prev.columns != cur.columns {
		return false
	}
	for _, r := range cur.rows {
		if _, found := slices.BinarySearch(prev.rows, r); found {
			return false
		}
	}
	return true
}

// forgetLeft forgets, as copied, the tables that left the publication
// once the run has applied everything before they left (those that came
// back, at once), with everything taken committed; it reports whether it
// forgot any (they may be published again: the caller reads the
// publication). It runs between source transactions.
func (l *loop) forgetLeft(ctx context.Context) (bool, error) {
	if len(l.leaving) == 0 {
		return false, nil
	}
	applied, _, _ := l.tracker.Positions()
	var due []string
	for key, lt := range l.leaving {
		if lt.back || applied >= lt.at {
			due = append(due, key)
		}
	}
	if len(due) == 0 {
		return false, nil
	}
	slices.Sort(due)
	if err := l.commitTaken(ctx); err != nil {
		return false, err
	}
	if _, err := l.app.Conn().Exec(ctx, `DELETE FROM parapply.sync_state WHERE slot_name = $1 AND table_name = ANY ($2)`, l.s.cfg.Source.Slot, due); err != nil {
		return false, fmt.Errorf("forgetting tables that left the publication (%v) in parapply.sync_state: %w", due, err)
	}
	synced := maps.Clone(l.app.Synced())
	for _, key := range due {
		delete(synced, key)
		l.logLeft(l.leaving[key])
		delete(l.leaving, key)
	}
	l.app.SetSynced(synced)
	l.app.Reload() // a relation message of one that is back notes it as joined
	l.afterDDL(synced)
	return true, nil
}

// logLeft says once that a table left the publication.
func (l *loop) logLeft(lt leftTable) {
	name := parapply.TableName(lt.schema, lt.name)
	pubs := "publication " + parapply.Ident(l.s.cfg.Source.Publications[0])
	if len(l.s.cfg.Source.Publications) > 1 {
		idents := make([]string, len(l.s.cfg.Source.Publications))
		for i, p := range l.s.cfg.Source.Publications {
			idents[i] = parapply.Ident(p)
		}
		pubs = "publications " + strings.Join(idents, ", ")
	}
	switch {
	case lt.back:
		l.s.log.Warn(fmt.Sprintf("table %s left %s and joined it again between two reads of it: it is copied again, as a table that joins", name, pubs))
	case lt.dropped:
		l.s.log.Info(fmt.Sprintf("table %s was dropped on the publisher: it no longer counts as copied", name))
	default:
		l.s.log.Warn(fmt.Sprintf("table %s left %s: its changes are no longer applied; if it joins again, it is copied again as a table that joins", name, pubs))
	}
}
