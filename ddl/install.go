package ddl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
)

// Prefix is the logical message prefix of a captured DDL statement.
const Prefix = "parapply.ddl"

// Trigger names, for status and uninstall.
const (
	// RevokeMessages takes from PUBLIC the right to write logical
	// messages (every form of pg_logical_emit_message, which differ
	// between versions).
	RevokeMessages = `DO $$ DECLARE f regprocedure; BEGIN
	FOR f IN SELECT oid::regprocedure FROM pg_catalog.pg_proc WHERE proname = 'pg_logical_emit_message' AND pronamespace = 'pg_catalog'::regnamespace LOOP
		EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
	END LOOP; END $$`
	TriggerEnd  = "parapply_ddl_end"
	TriggerDrop = "parapply_ddl_drop"
)

// installSQL makes the publisher's side (with parapply.ddl_followed(),
// the followed publications, made by Install): the test of whether a
// relation is published by one of them, the capture function the event
// triggers run, and parapply.replicate_ddl.
var installSQL = []string{
	`CREATE SCHEMA IF NOT EXISTS parapply`,
	// ddl_published: rel (a table, or an index's table) is published by
	// a followed publication, itself, through an ancestor partitioned
	// table, its schema, or FOR ALL TABLES.
	`CREATE OR REPLACE FUNCTION parapply.ddl_published(rel oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog AS $f$
WITH t AS (
	SELECT coalesce(i.indrelid, c.oid) AS relid
	FROM pg_class c LEFT JOIN pg_index i ON i.indexrelid = c.oid
	WHERE c.oid = rel AND c.relkind IN ('r', 'p', 'i', 'I') AND c.relpersistence = 'p'
), tab AS (
	SELECT c.oid, c.relnamespace FROM t JOIN pg_class c ON c.oid = t.relid
	WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
	  AND c.relnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace, 'parapply'::regnamespace)
), anc AS ( -- the table and, for a partition, the tables above it
	SELECT oid AS relid FROM tab
	UNION SELECT a.relid FROM tab, pg_partition_ancestors(tab.oid) a(relid)
)
SELECT EXISTS (
	SELECT 1 FROM pg_publication p WHERE p.pubname = ANY (parapply.ddl_followed())
	  AND ((p.puballtables AND EXISTS (SELECT 1 FROM tab))
	   OR EXISTS (SELECT 1 FROM anc JOIN pg_publication_rel pr ON pr.prrelid = anc.relid WHERE pr.prpubid = p.oid)
	   OR EXISTS (SELECT 1 FROM anc JOIN pg_class ac ON ac.oid = anc.relid
	              JOIN pg_publication_namespace pn ON pn.pnnspid = ac.relnamespace WHERE pn.pnpubid = p.oid)))
$f$`,
	// ddl_type_published: a type (an enum whose labels change, say) that
	// a column of a published table uses, itself, as an array or under a
	// domain, or that lives where every new table is published (a
	// followed FOR TABLES IN SCHEMA schema, or FOR ALL TABLES): the
	// target needs it before the columns that use it.
	`CREATE OR REPLACE FUNCTION parapply.ddl_type_published(typ oid) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog AS $f$
SELECT EXISTS (
	SELECT 1 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
	WHERE a.attnum > 0 AND NOT a.attisdropped
	  AND (t.oid = typ OR (t.typelem = typ AND t.typcategory = 'A') OR t.typbasetype = typ)
	  AND parapply.ddl_published(a.attrelid)
) OR EXISTS (
	SELECT 1 FROM pg_type t, pg_publication p WHERE t.oid = typ AND p.pubname = ANY (parapply.ddl_followed())
	  AND ((p.puballtables AND t.typnamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace, 'parapply'::regnamespace))
	   OR EXISTS (SELECT 1 FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid AND pn.pnnspid = t.typnamespace))
)
$f$`,
	// ddl_table_definition: CREATE TABLE for a table CREATE TABLE AS
	// made (its columns, their types and collations, its access method
	// and storage parameters), run in pg_catalog's search_path so that
	// every other name comes qualified.
	`CREATE OR REPLACE FUNCTION parapply.ddl_table_definition(rel oid, identity text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog AS $f$
SELECT 'CREATE TABLE ' || identity || ' (' || coalesce((
	SELECT string_agg(quote_ident(a.attname) || ' ' || format_type(a.atttypid, a.atttypmod)
		|| CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation THEN ' COLLATE ' || a.attcollation::regcollation::text ELSE '' END,
		', ' ORDER BY a.attnum)
	FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
	WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped), '') || ')'
	|| coalesce((SELECT ' USING ' || quote_ident(am.amname) FROM pg_class c JOIN pg_am am ON am.oid = c.relam
	             WHERE c.oid = rel AND am.amname <> 'heap'), '')
	|| coalesce((SELECT ' WITH (' || array_to_string(c.reloptions, ', ') || ')' FROM pg_class c WHERE c.oid = rel AND c.reloptions IS NOT NULL), '')
FROM (SELECT 1) one
$f$`,
	// ddl_capture: the event triggers' function. A statement string
	// fires it once per DDL statement it holds; it is sent once per
	// transaction (the target runs all of its DDL statements then). It
	// runs as its owner (SECURITY DEFINER: pg_logical_emit_message may
	// then be revoked from PUBLIC, see docs/ddl.md), so it reads the
	// user's search_path first, then works under pg_catalog's alone (no
	// user's object can stand in for one of its own) and gives the user's
	// back before it returns.
	`CREATE OR REPLACE FUNCTION parapply.ddl_capture() RETURNS event_trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $f$
DECLARE
	user_path text := pg_catalog.current_setting('search_path');
	schemas jsonb := pg_catalog.to_jsonb(pg_catalog.current_schemas(false));
	r record;
	objs jsonb := '[]';
	q text;
	k text;
	sql text;
BEGIN
	PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
	-- Everything that could fail runs in this block, whose errors are
	-- warnings; the message is sent after it, from the transaction
	-- itself: one sent from a subtransaction (the block's) is decoded
	-- after row changes that followed it.
	<<capture>>
	BEGIN
		IF TG_TAG IN ('CREATE TABLE AS', 'SELECT INTO') THEN
			-- The table's definition is sent, never the query (the
			-- target would run it on its own rows): the rows follow
			-- as changes. Also under parapply.replicate_ddl, whose
			-- message the target passes over such a statement in.
			FOR r IN SELECT c.object_identity, c.objid FROM pg_event_trigger_ddl_commands() c
			         WHERE NOT c.in_extension AND c.classid = 'pg_class'::regclass AND c.object_type = 'table' LOOP
				IF parapply.ddl_published(r.objid) THEN
					objs := objs || jsonb_build_object('type', 'table', 'identity', r.object_identity);
					sql := coalesce(sql || '; ', '') || parapply.ddl_table_definition(r.objid, r.object_identity);
				END IF;
			END LOOP;
		ELSIF coalesce(current_setting('parapply.ddl_replicating', true), '') = 'on' THEN
			EXIT capture; -- parapply.replicate_ddl sends its own message
		ELSIF TG_EVENT = 'ddl_command_end' THEN
			FOR r IN SELECT c.object_type, c.object_identity, c.objid, c.classid FROM pg_event_trigger_ddl_commands() c
			         WHERE NOT c.in_extension AND c.classid IN ('pg_class'::regclass, 'pg_type'::regclass) LOOP
				IF (r.classid = 'pg_type'::regclass AND parapply.ddl_type_published(r.objid))
				   OR (r.classid = 'pg_class'::regclass AND parapply.ddl_published(r.objid)) THEN
					objs := objs || jsonb_build_object('type', r.object_type, 'identity', r.object_identity);
				END IF;
			END LOOP;
		ELSIF TG_TAG IN ('DROP TABLE', 'DROP INDEX') THEN
			FOR r IN SELECT d.object_type, d.object_identity, d.schema_name, d.original FROM pg_event_trigger_dropped_objects() d
			         WHERE NOT d.is_temporary LOOP
				IF (r.object_type = 'publication relation' AND EXISTS (
				        SELECT 1 FROM unnest(parapply.ddl_followed()) f(pubname)
				        WHERE r.object_identity LIKE '% in publication ' || quote_ident(f.pubname)))
				   OR (r.object_type = 'table' AND EXISTS (
				        SELECT 1 FROM pg_publication p WHERE p.pubname = ANY (parapply.ddl_followed())
				        AND ((p.puballtables AND r.schema_name NOT IN ('pg_catalog', 'information_schema', 'parapply'))
				           OR EXISTS (SELECT 1 FROM pg_publication_namespace pn JOIN pg_namespace n ON n.oid = pn.pnnspid
				                      WHERE pn.pnpubid = p.oid AND n.nspname = r.schema_name))))
				   OR (r.object_type = 'index' AND r.original AND TG_TAG = 'DROP INDEX') THEN
					objs := objs || jsonb_build_object('type', r.object_type, 'identity', r.object_identity);
				END IF;
			END LOOP;
		END IF;
		IF jsonb_array_length(objs) = 0 THEN
			EXIT capture;
		END IF;
		-- From PostgreSQL 19 on, effective_wal_level: logical under
		-- wal_level = replica while a logical slot exists.
		IF coalesce(current_setting('effective_wal_level', true), current_setting('wal_level')) <> 'logical' THEN
			RAISE EXCEPTION 'wal_level is %, not logical%', current_setting('wal_level'),
				coalesce(' (effective_wal_level ' || current_setting('effective_wal_level', true) || ': no logical slot has turned logical decoding on)', '');
		END IF;
		IF sql IS NULL THEN
			sql := current_query();
			k := txid_current()::text || ':' || md5(sql);
			IF coalesce(current_setting('parapply.ddl_sent', true), '') = k THEN
				EXIT capture; -- the string's first DDL statement sent it
			END IF;
			PERFORM set_config('parapply.ddl_sent', k, true);
		END IF;
		q := jsonb_build_object('sql', sql, 'search_path', schemas,
			'role', session_user::text, 'tag', TG_TAG, 'objects', objs)::text;
	EXCEPTION WHEN OTHERS THEN
		PERFORM pg_catalog.set_config('search_path', user_path, true);
		RAISE WARNING 'parapply: this DDL was not sent to parapply''s subscribers: %', SQLERRM
			USING HINT = 'run it on the target by hand; parapply stops at the first change the target cannot take';
		RETURN;
	END;
	PERFORM pg_catalog.set_config('search_path', user_path, true);
	IF q IS NOT NULL THEN
		PERFORM pg_catalog.pg_logical_emit_message(true, 'parapply.ddl', q);
	END IF;
END
$f$`,
	`CREATE OR REPLACE FUNCTION parapply.replicate_ddl(command text) RETURNS void
LANGUAGE plpgsql VOLATILE AS $f$
BEGIN
	PERFORM pg_catalog.set_config('parapply.ddl_replicating', 'on', true);
	EXECUTE command;
	PERFORM pg_catalog.set_config('parapply.ddl_replicating', '', true);
	PERFORM pg_catalog.pg_logical_emit_message(true, 'parapply.ddl', pg_catalog.jsonb_build_object(
		'sql', command, 'search_path', pg_catalog.to_jsonb(pg_catalog.current_schemas(false)),
		'role', current_user::text, 'tag', 'replicate_ddl')::text);
END
$f$`,
	`COMMENT ON FUNCTION parapply.replicate_ddl(text) IS 'parapply: runs a DDL command and sends it to parapply''s subscribers (with ddl = apply), for DDL run inside functions or without the event triggers'`,
}

// triggerSQL (re)creates the event triggers; kept apart so that a failure
// for want of privilege is told from the rest.
var triggerSQL = []string{
	`DROP EVENT TRIGGER IF EXISTS ` + TriggerEnd,
	`DROP EVENT TRIGGER IF EXISTS ` + TriggerDrop,
	`CREATE EVENT TRIGGER ` + TriggerEnd + ` ON ddl_command_end EXECUTE FUNCTION parapply.ddl_capture()`,
	`CREATE EVENT TRIGGER ` + TriggerDrop + ` ON sql_drop EXECUTE FUNCTION parapply.ddl_capture()`,
}

// Install makes (or remakes) the capture on the publisher conn is
// connected to, following pubs, in one transaction: it is all there or
// not at all. Publications that do not exist are refused by name. Without
// triggers only parapply.replicate_ddl sends DDL (no superuser needed;
// event triggers already there are removed).
func Install(ctx context.Context, conn *pgx.Conn, pubs []string, triggers bool) error {
	if len(pubs) == 0 {
		return errors.New("ddl install needs the publications whose tables' DDL is to be sent (--publication, or publication in the config file)")
	}
	var missing []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(p), '{}') FROM unnest($1::text[]) p WHERE p NOT IN (SELECT pubname FROM pg_catalog.pg_publication)`, pubs).Scan(&missing); err != nil {
		return fmt.Errorf("reading the publisher's publications: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("publication %s does not exist on the publisher: create it first, or name the ones parapply follows", strings.Join(missing, ", "))
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	// The followed publications are a function's result, not a table's
	// rows: a FOR ALL TABLES publication would publish a table.
	quoted := make([]string, len(pubs))
	for i, p := range pubs {
		quoted[i] = parapply.QuoteLiteral(p)
	}
	followed := `CREATE OR REPLACE FUNCTION parapply.ddl_followed() RETURNS name[] LANGUAGE sql IMMUTABLE AS $f$ SELECT ARRAY[` + strings.Join(quoted, ", ") + `]::name[] $f$`
	for _, s := range append([]string{installSQL[0], followed}, installSQL[1:]...) {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("installing the DDL capture on the publisher: %w (the statement: %.60s...)", err, s)
		}
	}
	steps := triggerSQL
	if !triggers {
		steps = steps[:2] // the drops
	}
	for _, s := range steps {
		if _, err := tx.Exec(ctx, s); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == pgerrcode.InsufficientPrivilege {
				return fmt.Errorf("creating the event triggers on the publisher: %w; event triggers need a superuser on PostgreSQL 15 to 18: run parapply ddl install as one (the triggers then capture every role's DDL), or install with --event-triggers=false and send DDL through parapply.replicate_ddl", err)
			}
			return fmt.Errorf("creating the event triggers on the publisher: %w", err)
		}
	}
	return tx.Commit(ctx)
}

// Uninstall removes the capture: the event triggers first (DDL is no longer
// sent from then on), then the functions and the table; the schema only if
// nothing else of parapply's is in it (a publisher that is also a target
// keeps parapply's target objects there).
func Uninstall(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	for _, s := range []string{
		`DROP EVENT TRIGGER IF EXISTS ` + TriggerEnd,
		`DROP EVENT TRIGGER IF EXISTS ` + TriggerDrop,
		`DROP FUNCTION IF EXISTS parapply.ddl_capture()`,
		`DROP FUNCTION IF EXISTS parapply.replicate_ddl(text)`,
		`DROP FUNCTION IF EXISTS parapply.ddl_type_published(oid)`,
		`DROP FUNCTION IF EXISTS parapply.ddl_table_definition(oid, text)`,
		`DROP FUNCTION IF EXISTS parapply.ddl_published(oid)`,
		`DROP FUNCTION IF EXISTS parapply.ddl_followed()`,
	} {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("removing the DDL capture from the publisher: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `DO $$ BEGIN
		IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_namespace n ON d.refobjid = n.oid
		               WHERE d.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass AND n.nspname = 'parapply') THEN
			DROP SCHEMA IF EXISTS parapply;
		END IF;
	END $$`); err != nil {
		return fmt.Errorf("removing schema parapply from the publisher: %w", err)
	}
	return tx.Commit(ctx)
}

// State is what a publisher has of the capture, for parapply check and
// parapply ddl status.
type State struct {
	// Triggers: both event triggers are there and enabled.
	Triggers bool
	// Function: parapply.replicate_ddl is there.
	Function bool
	// Publications are those the capture follows.
	Publications []string
	// PublicMessages: every role may call pg_logical_emit_message, and so
	// write a message parapply would take for the capture's.
	PublicMessages bool
	// EventTriggersOff: the event_triggers setting (PostgreSQL 17) is
	// off, which silences every event trigger.
	EventTriggersOff bool
	// Unreadable: the capture is there, and the role may not read which
	// publications it follows (Publications is nil): it lacks Grants.
	Unreadable bool
}

// Inspect reads the capture's state on the publisher conn is connected to.
// It reads the catalogs, which every role may, and calls into schema
// parapply only where the role may (Grants): a replication role without
// them gets Unreadable, never a permission error.
func Inspect(ctx context.Context, conn *pgx.Conn) (State, error) {
	var st State
	var n int
	var followed *bool
	err := conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_catalog.pg_event_trigger WHERE evtname IN ($1, $2) AND evtenabled <> 'D')::int,
		EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		        WHERE n.nspname = 'parapply' AND p.proname = 'replicate_ddl' AND p.proargtypes::text = '25'),
		(SELECT coalesce(bool_or(pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')), false) FROM pg_catalog.pg_proc p
		 WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace),
		coalesce(pg_catalog.current_setting('event_triggers', true), 'on') = 'off',
		(SELECT pg_catalog.has_schema_privilege(n.oid, 'USAGE') AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE')
		 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
		 WHERE n.nspname = 'parapply' AND p.proname = 'ddl_followed' AND p.pronargs = 0)`, TriggerEnd, TriggerDrop).Scan(&n, &st.Function, &st.PublicMessages, &st.EventTriggersOff, &followed)
	if err != nil {
		return st, fmt.Errorf("reading the publisher's DDL capture: %w", err)
	}
	st.Triggers = n == 2
	if followed == nil {
		return st, nil
	}
	if !*followed {
		st.Unreadable = true
		return st, nil
	}
	err = conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(p::text ORDER BY p), '{}') FROM pg_catalog.unnest(parapply.ddl_followed()) p`).Scan(&st.Publications)
	return st, err
}
