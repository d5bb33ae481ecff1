package source

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
)

// PublishedTable is a table the publications send, with its published
// columns (nil: all) and row filter ("" for none).
type PublishedTable struct {
	Schema, Name string
	Columns      []string
	RowFilter    string
	// Key lists the columns of the table's replica identity on the
	// publisher (its primary key, or the index REPLICA IDENTITY USING
	// INDEX names), in the index's order; empty under REPLICA IDENTITY
	// FULL or NOTHING, or without a primary key.
	Key []string
	// Types holds the publisher's type OID of each of the table's columns,
	// by name: whether values can travel in binary depends on them.
	Types map[string]uint32
}

// publishedTables lists what the publications send, computed as PostgreSQL
// 16's subscriptions do (pg_get_publication_tables over all the
// publications at once), by hand so that a PostgreSQL 14 or 15 publisher
// gets the same answer:
//   - when any of the publications publishes through partition roots, a
//     table one of whose ancestors is listed is left out: its changes
//     arrive as that ancestor's, and its rows are in the ancestor's copy
//     (copying both would copy them twice);
//   - a row passes if any publication's filter passes it (no filter passes
//     all);
//   - the columns are the publications' column list, which must be the
//     same in each (PostgreSQL 16+ refuses different lists, as parapply
//     does; a PostgreSQL 15 publisher sends their union, and so parapply
//     takes it).
func (s *Source) publishedTables(ctx context.Context) ([]PublishedTable, error) {
	return ListPublished(ctx, s.conn, s.cfg.Publications)
}

// ListPublished is publishedTables on any connection to the publisher
// database (a replication connection or an ordinary one).
func ListPublished(ctx context.Context, conn *pgconn.PgConn, publications []string) ([]PublishedTable, error) {
	version, _ := strconv.Atoi(conn.ParameterStatus("server_version_num"))
	if version == 0 {
		// Reported at connection start by PostgreSQL 16 to 18 only (not by
		// 15, nor by 19).
		res, err := conn.Exec(ctx, "SHOW server_version_num").ReadAll()
		if err != nil {
			return nil, fmt.Errorf("reading the source's server version: %w", err)
		}
		if len(res) == 0 || len(res[0].Rows) != 1 {
			return nil, errors.New("reading the source's server version: SHOW server_version_num returned no row")
		}
		version, _ = strconv.Atoi(string(res[0].Rows[0][0]))
	}
	pubs := make([]string, len(publications))
	for i, p := range publications {
		pubs[i] = parapply.QuoteLiteral(p)
	}
	cols, filter := "NULL::text", "NULL::text"
	if version >= 180000 {
		cols, filter = "array_to_string(t.attnames, ',')", "t.rowfilter"
	} else if version >= 150000 {
		// Before 18 no generated column is published, but PostgreSQL 15's
		// view lists them with the others: leave them out.
		cols, filter = `array_to_string(ARRAY(SELECT n.attname FROM unnest(t.attnames) WITH ORDINALITY n (attname, ord)
			JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = n.attname WHERE a.attgenerated = '' ORDER BY n.ord), ',')`, "t.rowfilter"
	}
	res, err := conn.Exec(ctx, `SELECT t.schemaname, t.tablename, `+cols+`, `+filter+`, p.pubviaroot, c.oid,
			ARRAY(SELECT a.relid::oid FROM pg_catalog.pg_partition_ancestors(c.oid) a WHERE a.relid::oid <> c.oid),
			(SELECT pg_catalog.json_agg(a.attname ORDER BY pg_catalog.array_position(i.indkey::int2[], a.attnum))
				FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
				WHERE i.indrelid = c.oid AND ((c.relreplident = 'i' AND i.indisreplident) OR (c.relreplident = 'd' AND i.indisprimary)))::text,
			(SELECT pg_catalog.json_object_agg(a.attname, a.atttypid::int8) FROM pg_catalog.pg_attribute a
				WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)::text
		FROM pg_catalog.pg_publication_tables t
		JOIN pg_catalog.pg_publication p ON p.pubname = t.pubname
		JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
		WHERE t.pubname IN (`+strings.Join(pubs, ",")+`) ORDER BY 1, 2`).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("listing published tables: %w", err)
	}
	var rows [][][]byte
	if len(res) > 0 {
		rows = res[len(res)-1].Rows
	}
	return combinePublished(rows, version)
}

// combinePublished applies publishedTables' rules to its rows: schema,
// table, column names (comma separated; empty or NULL for all), row filter
// (NULL for none), pubviaroot, oid, the oids of its ancestors and its
// replica identity's columns (a JSON array, NULL for none) and its columns' type
// OIDs (a JSON object by name), one row per
// table and publication, ordered by table.
func combinePublished(rows [][][]byte, serverVersion int) ([]PublishedTable, error) {
	viaRoot := false
	listed := map[string]bool{}
	for _, r := range rows {
		viaRoot = viaRoot || string(r[4]) == "t"
		listed[string(r[5])] = true
	}
	var out []PublishedTable
	var colSets []string // per entry of out, the first column list seen ("*" for all)
	allCols, noFilter := map[int]bool{}, map[int]bool{}
	for _, r := range rows {
		if viaRoot && hasListedAncestor(string(r[6]), listed) {
			continue
		}
		i := len(out) - 1
		set := "*"
		if len(r[2]) > 0 {
			set = string(r[2])
		}
		switch {
		case i < 0 || out[i].Schema != string(r[0]) || out[i].Name != string(r[1]):
			t, err := firstPublished(r)
			if err != nil {
				return nil, err
			}
			out, colSets = append(out, t), append(colSets, set)
			i++
		case set != colSets[i] && serverVersion >= 160000:
			return nil, fmt.Errorf("table %s is published with different column lists in the given publications (%s and %s); PostgreSQL 16+ refuses such a subscription too: give the table the same column list in each, or subscribe to fewer publications",
				parapply.QuoteIdent(out[i].Schema)+"."+parapply.QuoteIdent(out[i].Name), describeColumns(colSets[i]), describeColumns(set))
		}
		allCols[i] = addColumns(&out[i], set) || allCols[i]
		noFilter[i] = addFilter(&out[i], r[3]) || noFilter[i]
	}
	for i := range out {
		if allCols[i] {
			out[i].Columns = nil
		}
		if noFilter[i] {
			out[i].RowFilter = ""
		}
	}
	return out, nil
}

// firstPublished is a published table as its first row (of
// combinePublished's) has it: its names, replica identity and column
// types.
func firstPublished(r [][]byte) (PublishedTable, error) {
	t := PublishedTable{Schema: string(r[0]), Name: string(r[1])}
	if len(r) > 7 && r[7] != nil {
		if err := json.Unmarshal(r[7], &t.Key); err != nil {
			return t, fmt.Errorf("reading the replica identity of %s.%s: %w", t.Schema, t.Name, err)
		}
	}
	if len(r) > 8 && r[8] != nil {
		if err := json.Unmarshal(r[8], &t.Types); err != nil {
			return t, fmt.Errorf("reading the column types of %s.%s: %w", t.Schema, t.Name, err)
		}
	}
	return t, nil
}

// addColumns adds a publication's column list (comma separated, "*" for
// all) to a table's, reporting whether it is all.
func addColumns(t *PublishedTable, set string) (all bool) {
	if set == "*" {
		return true
	}
	for _, c := range strings.Split(set, ",") {
		if !slices.Contains(t.Columns, c) {
			t.Columns = append(t.Columns, c)
		}
	}
	return false
}

// addFilter ORs a publication's row filter (nil for none) into a table's,
// reporting whether there is none.
func addFilter(t *PublishedTable, filter []byte) (none bool) {
	switch {
	case filter == nil:
		return true
	case t.RowFilter == "":
		t.RowFilter = "(" + string(filter) + ")"
	default:
		t.RowFilter += " OR (" + string(filter) + ")"
	}
	return false
}

func describeColumns(set string) string {
	if set == "*" {
		return "all columns"
	}
	return "(" + set + ")"
}

// hasListedAncestor reports whether an oid array's text form ({1,2})
// names a listed oid.
func hasListedAncestor(ancestors string, listed map[string]bool) bool {
	for _, a := range strings.Split(strings.Trim(ancestors, "{}"), ",") {
		if a != "" && listed[a] {
			return true
		}
	}
	return false
}
