package targetdb

// migration1 brings the parapply schema of any release before schema
// versions to one shape, keeping its rows: those releases created their
// tables with CREATE TABLE IF NOT EXISTS and added columns with ALTER
// TABLE ... ADD COLUMN IF NOT EXISTS at every start, so a target holds
// any subset of today's tables, some with fewer columns, parapply.skip
// perhaps keyed by slot alone, and the conflict functions perhaps of an
// earlier body. Every statement here is therefore idempotent and checks
// the shape it changes. (The tombstone objects are not part of it: see
// TombstonesSQL.)
const migration1 = `CREATE SCHEMA IF NOT EXISTS parapply;
CREATE TABLE IF NOT EXISTS parapply.schema_version (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE parapply.schema_version IS 'parapply: the migrations applied to this schema, one row each, written in the migration''s transaction; do not edit';
CREATE TABLE IF NOT EXISTS parapply.progress (
	slot_name   text PRIMARY KEY,
	source_id   text NOT NULL,
	commit_lsn  pg_lsn NOT NULL,
	end_lsn     pg_lsn NOT NULL,
	source_xid  bigint,
	commit_time timestamptz,
	applied_at  timestamptz
);
CREATE TABLE IF NOT EXISTS parapply.prepared (
	slot_name   text NOT NULL,
	gid         text NOT NULL,
	source_xid  bigint,
	prepare_lsn pg_lsn,
	end_lsn     pg_lsn,
	PRIMARY KEY (slot_name, gid)
);
CREATE TABLE IF NOT EXISTS parapply.applied (
	slot_name       text NOT NULL,
	commit_lsn      pg_lsn NOT NULL,
	last_commit_lsn pg_lsn NOT NULL,
	end_lsn         pg_lsn NOT NULL,
	PRIMARY KEY (slot_name, commit_lsn)
);
CREATE TABLE IF NOT EXISTS parapply.skip (
	slot_name    text NOT NULL,
	commit_lsn   pg_lsn NOT NULL,
	requested_at timestamptz NOT NULL DEFAULT now(),
	reason       text,
	skipped_at   timestamptz,
	PRIMARY KEY (slot_name, commit_lsn)
);
CREATE TABLE IF NOT EXISTS parapply.conflicts (
	id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	logged_at          timestamptz NOT NULL DEFAULT now(),
	slot_name          text NOT NULL,
	conflict_type      text NOT NULL,
	table_name         text NOT NULL,
	key                jsonb,
	local_row          jsonb,
	local_origin       text,
	local_commit_time  timestamptz,
	remote_row         jsonb,
	source_xid         bigint,
	commit_lsn         pg_lsn,
	remote_commit_time timestamptz,
	resolution         text NOT NULL,
	remote_applied     boolean NOT NULL,
	detail             text
);
CREATE TABLE IF NOT EXISTS parapply.retired_origins (
	slot_name  text NOT NULL,
	roident    oid NOT NULL,
	roname     text NOT NULL,
	retired_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (slot_name, roident)
);
CREATE TABLE IF NOT EXISTS parapply.table_claims (
	table_name text NOT NULL,
	slot_name  text NOT NULL,
	shared     boolean NOT NULL DEFAULT false,
	claimed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (table_name, slot_name)
);
CREATE TABLE IF NOT EXISTS parapply.slot_claims (
	slot_name        text PRIMARY KEY,
	host             text,
	pid              integer,
	application_name text,
	backend_pid      integer,
	claimed_at       timestamptz
);
-- Columns added over time, for tables an earlier release made.
ALTER TABLE parapply.skip ADD COLUMN IF NOT EXISTS reason text;
ALTER TABLE parapply.skip ADD COLUMN IF NOT EXISTS skipped_at timestamptz;
-- parapply.skip held one request per slot (primary key slot_name):
-- one row per request, keeping its rows.
DO $do$
DECLARE
	pk name;
BEGIN
	SELECT conname INTO pk FROM pg_catalog.pg_constraint WHERE conrelid = 'parapply.skip'::regclass AND contype = 'p' AND pg_catalog.cardinality(conkey) = 1;
	IF pk IS NOT NULL THEN
		EXECUTE pg_catalog.format('ALTER TABLE parapply.skip DROP CONSTRAINT %I, ADD PRIMARY KEY (slot_name, commit_lsn)', pk);
	END IF;
END $do$;
-- conflicts.detail came in CREATE TABLE only: a table an earlier release
-- made lacks it.
ALTER TABLE parapply.conflicts ADD COLUMN IF NOT EXISTS detail text;
ALTER TABLE parapply.conflicts ADD COLUMN IF NOT EXISTS remote_origin text;
CREATE INDEX IF NOT EXISTS conflicts_source_xid ON parapply.conflicts (source_xid);
-- The bodies of an earlier release are replaced; the form of
-- conflict_error that took no rows (six arguments) is gone.
DROP FUNCTION IF EXISTS parapply.conflict_error(text, text, text, jsonb, text, text);
CREATE OR REPLACE FUNCTION parapply.conflict_check(changed bigint, expected bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
BEGIN
	IF changed < expected THEN
		RAISE EXCEPTION USING ERRCODE = '` + SQLStateConflictFound + `',
			MESSAGE = pg_catalog.format('a replicated change met a conflict (%s of %s rows changed as expected)', changed, expected),
			HINT = 'parapply applies the transaction again, resolving the conflict';
	END IF;
	RETURN changed;
END $f$;
CREATE OR REPLACE FUNCTION parapply.conflict_other_origin(changed bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
BEGIN
	RAISE EXCEPTION USING ERRCODE = '` + SQLStateConflictFound + `',
		MESSAGE = pg_catalog.format('a replicated change met a conflict (of %s rows changed, one or more were last changed by another origin or a local session)', changed),
		HINT = 'parapply applies the transaction again, resolving the conflict';
END $f$;
CREATE OR REPLACE FUNCTION parapply.conflict_error(slot text, ctype text, tbl text, key jsonb, remote jsonb, local jsonb, xid text, lsn text) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
	RAISE EXCEPTION USING ERRCODE = '` + SQLStateConflictError + `',
		MESSAGE = pg_catalog.format('conflict %s on %s, key %s, in source transaction %s (commit %s), whose policy is error: remote row %s, local row %s',
			ctype, tbl, coalesce(key::text, '(none)'), xid, coalesce(lsn, 'unknown'), coalesce(remote::text, '(none)'), coalesce(local::text, '(none)')),
		HINT = pg_catalog.format('choose another policy for %s in conflict_resolution, change the local row, or skip the transaction: parapply skip --slot %s --lsn %s', ctype, slot, coalesce(lsn, '<commit LSN>'));
END $f$;
COMMENT ON TABLE parapply.conflicts IS 'parapply: conflicts replicated changes met on the target and how each was resolved, written in the transaction that applied the change';
COMMENT ON TABLE parapply.skip IS 'parapply: the source transactions (by commit LSN) each slot is to skip, added by parapply skip, marked skipped_at in the target transaction that passes each, and removed once the progress row passes it';
COMMENT ON TABLE parapply.applied IS 'parapply: groups of source transactions committed ahead of earlier ones (commit_order = dependency), written in the applying transaction and removed once parapply.progress passes them; do not edit';
COMMENT ON TABLE parapply.prepared IS 'parapply: source transactions prepared on the target (two_phase = on), written inside each prepared transaction; do not edit';
COMMENT ON TABLE parapply.retired_origins IS 'parapply: replication origins a slot dropped (its copy workers once the copy is done, workers above the worker count): rows they wrote still carry their numbers, which conflict detection counts as the slot''s own until another origin takes them';
COMMENT ON TABLE parapply.table_claims IS 'parapply: the target tables each slot applies to; a start whose publications take in a table another slot (with a progress row) claimed is refused unless shared_tables = on';
COMMENT ON TABLE parapply.slot_claims IS 'parapply: which parapply process (host, pid) holds each slot on this target, and the target session holding the slot''s lock';
COMMENT ON TABLE parapply.progress IS 'parapply: last source transaction applied per slot, written in the applying transaction; do not edit';
CREATE TABLE IF NOT EXISTS parapply.sync_state (
	slot_name   text NOT NULL,
	table_name  text NOT NULL,
	state       text NOT NULL CHECK (state IN ('copying', 'done')),
	sync_lsn    pg_lsn NOT NULL,
	rows        bigint,
	started_at  timestamptz,
	finished_at timestamptz,
	PRIMARY KEY (slot_name, table_name)
);
COMMENT ON TABLE parapply.sync_state IS 'parapply: initial copy state per slot and table; do not edit';
CREATE TABLE IF NOT EXISTS parapply.deferred_index (
	slot_name  text NOT NULL,
	table_name text NOT NULL,
	index_name text NOT NULL,
	recreate   text NOT NULL,
	ord        int NOT NULL,
	PRIMARY KEY (slot_name, table_name, index_name)
);
COMMENT ON TABLE parapply.deferred_index IS 'parapply: indexes dropped for the initial copy, rebuilt when it is done; do not edit';
CREATE TABLE IF NOT EXISTS parapply.status (
	slot_name        text PRIMARY KEY,
	state            text NOT NULL,
	pid              integer,
	host             text,
	version          text,
	application_name text,
	started_at       timestamptz,
	updated_at       timestamptz NOT NULL,
	received_lsn     pg_lsn,
	applied_lsn      pg_lsn,
	flushed_lsn      pg_lsn,
	source_wal_end   pg_lsn,
	lag_bytes        bigint,
	lag_seconds      float8,
	last_commit_time timestamptz,
	source_txns      bigint,
	target_txns      bigint,
	rows             bigint,
	missing_rows     bigint,
	txns_per_second  float8,
	rows_per_second  float8,
	queue_bytes      bigint,
	workers          jsonb,
	copy             jsonb,
	last_error       text,
	last_error_at    timestamptz
);
ALTER TABLE parapply.status ADD COLUMN IF NOT EXISTS health jsonb;
COMMENT ON TABLE parapply.status IS 'parapply: what each running (or last) parapply of a slot reports about itself, updated every second; read with parapply status';
CREATE TABLE IF NOT EXISTS parapply.sequence_sync (
	slot_name text PRIMARY KEY,
	synced_at timestamptz NOT NULL,
	sync      jsonb NOT NULL
);
COMMENT ON TABLE parapply.sequence_sync IS 'parapply: the last parapply sync-sequences run of each slot; parapply status shows it when it is later than the running parapply''s own sync';`
