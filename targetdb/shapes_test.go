package targetdb

// The parapply schema as earlier releases left it on a target, taken from
// the history of the statements that made it (progress/progress.go,
// progress/skip.go, tablesync/tablesync.go, status/status.go,
// status/sequences.go before this package): each release ran its CREATE
// ... IF NOT EXISTS statements at every start, so a target first run by
// release i and then by later ones holds the tables as release i made
// them plus what later releases created or added with ADD COLUMN IF NOT
// EXISTS. A step is what one release added; a shape is the steps a target
// went through. Each step also puts rows in the tables it made, with the
// columns they had then.
var oldSteps = map[string]struct{ ddl, rows string }{
	"progress": {`CREATE SCHEMA IF NOT EXISTS parapply;
CREATE TABLE IF NOT EXISTS parapply.progress (
	slot_name   text PRIMARY KEY,
	source_id   text NOT NULL,
	commit_lsn  pg_lsn NOT NULL,
	end_lsn     pg_lsn NOT NULL,
	source_xid  bigint,
	commit_time timestamptz,
	applied_at  timestamptz
);
COMMENT ON TABLE parapply.progress IS 'parapply: last source transaction applied per slot, written in the applying transaction; do not edit';`,
		`INSERT INTO parapply.progress VALUES ('a', 'src', '0/100', '0/108', 7, '2026-01-02 03:04:05+00', now()), ('b', 'src', '0/50', '0/58', NULL, NULL, NULL)`},
	"prepared": {`CREATE TABLE IF NOT EXISTS parapply.prepared (
	slot_name   text NOT NULL,
	gid         text NOT NULL,
	source_xid  bigint,
	prepare_lsn pg_lsn,
	end_lsn     pg_lsn,
	PRIMARY KEY (slot_name, gid)
);`, `INSERT INTO parapply.prepared VALUES ('a', 'pa_1', 9, '0/200', '0/208')`},
	"applied": {`CREATE TABLE IF NOT EXISTS parapply.applied (
	slot_name       text NOT NULL,
	commit_lsn      pg_lsn NOT NULL,
	last_commit_lsn pg_lsn NOT NULL,
	end_lsn         pg_lsn NOT NULL,
	PRIMARY KEY (slot_name, commit_lsn)
);`, `INSERT INTO parapply.applied VALUES ('a', '0/300', '0/310', '0/318')`},
	"sync_state": {`CREATE TABLE IF NOT EXISTS parapply.sync_state (
	slot_name   text NOT NULL,
	table_name  text NOT NULL,
	state       text NOT NULL CHECK (state IN ('copying', 'done')),
	sync_lsn    pg_lsn NOT NULL,
	rows        bigint,
	started_at  timestamptz,
	finished_at timestamptz,
	PRIMARY KEY (slot_name, table_name)
);
COMMENT ON TABLE parapply.sync_state IS 'parapply: initial copy state per slot and table; do not edit';`,
		`INSERT INTO parapply.sync_state VALUES ('a', 'public.t', 'done', '0/90', 12, now(), now())`},
	// parapply.skip held one request per slot.
	"skip by slot": {`CREATE TABLE IF NOT EXISTS parapply.skip (
	slot_name    text PRIMARY KEY,
	commit_lsn   pg_lsn NOT NULL,
	requested_at timestamptz NOT NULL DEFAULT now()
);`, `INSERT INTO parapply.skip VALUES ('a', '0/400', '2026-01-02 03:04:05+00'), ('b', '0/40', now())`},
	"status": {`CREATE TABLE IF NOT EXISTS parapply.status (
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
);`, `INSERT INTO parapply.status (slot_name, state, pid, updated_at, workers) VALUES ('a', 'running', 42, now(), '[{"id": 0}]')`},
	// The conflicts table before it had detail, and conflict_error before
	// it took the rows (release of the conflicts log).
	"conflicts": {oldConflicts + `
);
DO $do$ BEGIN
IF to_regprocedure('parapply.conflict_check(bigint,bigint)') IS NULL THEN
	CREATE FUNCTION parapply.conflict_check(changed bigint, expected bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
	BEGIN
		IF changed < expected THEN
			RAISE EXCEPTION USING ERRCODE = 'PC001',
				MESSAGE = pg_catalog.format('a replicated change met a conflict (%s of %s rows changed as expected)', changed, expected),
				HINT = 'parapply applies the transaction again, resolving the conflict';
		END IF;
		RETURN changed;
	END $f$;
END IF;
IF to_regprocedure('parapply.conflict_error(text,text,text,jsonb,text,text)') IS NULL THEN
	CREATE FUNCTION parapply.conflict_error(slot text, ctype text, tbl text, key jsonb, xid text, lsn text) RETURNS void LANGUAGE plpgsql AS $f$
	BEGIN
		RAISE EXCEPTION USING ERRCODE = 'PC002',
			MESSAGE = pg_catalog.format('conflict %s on %s, key %s, in source transaction %s (commit %s), whose policy is error', ctype, tbl, coalesce(key::text, '(none)'), xid, coalesce(lsn, 'unknown')),
			HINT = pg_catalog.format('choose another policy for %s in conflict_resolution, change the local row, or skip the transaction: parapply skip --slot %s --lsn %s', ctype, slot, coalesce(lsn, '<commit LSN>'));
	END $f$;
END IF;
END $do$;`, `INSERT INTO parapply.conflicts (slot_name, conflict_type, table_name, key, resolution, remote_applied) VALUES ('a', 'insert_exists', 'public.t', '{"id": 1}', 'apply_remote', true)`},
	// The next release: conflict_error took the rows (the old one stayed
	// beside it), skip had a reason, the copy deferred indexes.
	"conflict_error rows": {`DO $do$ BEGIN
IF to_regprocedure('parapply.conflict_error(text,text,text,jsonb,jsonb,jsonb,text,text)') IS NULL THEN
	CREATE FUNCTION parapply.conflict_error(slot text, ctype text, tbl text, key jsonb, remote jsonb, local jsonb, xid text, lsn text) RETURNS void LANGUAGE plpgsql AS $f$
	BEGIN
		RAISE EXCEPTION USING ERRCODE = 'PC002',
			MESSAGE = pg_catalog.format('conflict %s on %s, key %s, in source transaction %s (commit %s), whose policy is error: remote row %s, local row %s',
				ctype, tbl, coalesce(key::text, '(none)'), xid, coalesce(lsn, 'unknown'), coalesce(remote::text, '(none)'), coalesce(local::text, '(none)')),
			HINT = pg_catalog.format('choose another policy for %s in conflict_resolution, change the local row, or skip the transaction: parapply skip --slot %s --lsn %s', ctype, slot, coalesce(lsn, '<commit LSN>'));
	END $f$;
END IF;
END $do$;
ALTER TABLE parapply.skip ADD COLUMN IF NOT EXISTS reason text;
CREATE TABLE IF NOT EXISTS parapply.deferred_index (
	slot_name  text NOT NULL,
	table_name text NOT NULL,
	index_name text NOT NULL,
	recreate   text NOT NULL,
	ord        int NOT NULL,
	PRIMARY KEY (slot_name, table_name, index_name)
);
COMMENT ON TABLE parapply.skip IS 'parapply: the source transaction (by commit LSN) each slot is to skip, set by parapply skip and removed once the progress row passes it';`,
		`UPDATE parapply.skip SET reason = 'boom' WHERE slot_name = 'a'; INSERT INTO parapply.deferred_index VALUES ('a', 'public.t', 't_v', 'CREATE INDEX t_v ON public.t (v)', 0)`},
	// Origins in conflicts, the index on source_xid, health in status,
	// the sequence sync's record.
	"origins": {`DO $do$ BEGIN
IF to_regprocedure('parapply.conflict_other_origin(bigint)') IS NULL THEN
	CREATE FUNCTION parapply.conflict_other_origin(changed bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
	BEGIN
		RAISE EXCEPTION USING ERRCODE = 'PC001',
			MESSAGE = pg_catalog.format('a replicated change met a conflict (of %s rows changed, one or more were last changed by another origin or a local session)', changed),
			HINT = 'parapply applies the transaction again, resolving the conflict';
	END $f$;
END IF;
END $do$;
ALTER TABLE parapply.conflicts ADD COLUMN IF NOT EXISTS remote_origin text;
CREATE INDEX IF NOT EXISTS conflicts_source_xid ON parapply.conflicts (source_xid);
ALTER TABLE parapply.status ADD COLUMN IF NOT EXISTS health jsonb;
CREATE TABLE IF NOT EXISTS parapply.sequence_sync (
	slot_name text PRIMARY KEY,
	synced_at timestamptz NOT NULL,
	sync      jsonb NOT NULL
);`, `UPDATE parapply.conflicts SET remote_origin = 'pg_5'; INSERT INTO parapply.sequence_sync VALUES ('a', now(), '{"sequences": 2}')`},
	// Claims and retired origins (skip still held one request per slot).
	"claims": {`CREATE TABLE IF NOT EXISTS parapply.retired_origins (
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
);`, `INSERT INTO parapply.retired_origins VALUES ('a', 3, 'pg_parapply_a_3', now());
INSERT INTO parapply.table_claims VALUES ('public.t', 'a', false, now());
INSERT INTO parapply.slot_claims VALUES ('a', 'h', 1, 'parapply', 2, now())`},
	// A conflicts table made by a release that had detail in its CREATE
	// TABLE (with no ADD COLUMN: upgraded targets never got it).
	"conflicts with detail": {oldConflicts + ",\n\tdetail             text\n" + `);`, `INSERT INTO parapply.conflicts (slot_name, conflict_type, table_name, key, resolution, remote_applied, detail) VALUES ('b', 'update_missing', 'public.t', '{"id": 2}', 'skip', false, 'gone')`},
	// parapply.skip as one row per request, as the release before schema
	// versions made it.
	"skip by request": {`CREATE TABLE IF NOT EXISTS parapply.skip (
	slot_name    text NOT NULL,
	commit_lsn   pg_lsn NOT NULL,
	requested_at timestamptz NOT NULL DEFAULT now(),
	reason       text,
	skipped_at   timestamptz,
	PRIMARY KEY (slot_name, commit_lsn)
);`, `INSERT INTO parapply.skip VALUES ('a', '0/400', now(), 'boom', NULL), ('a', '0/500', now(), NULL, now())`},
}

// oldShapes are the targets earlier releases left, by the steps each went
// through, oldest release first.
var oldShapes = []struct {
	name  string
	steps []string
}{
	{"first release: progress only", []string{"progress"}},
	{"two-phase and the copy", []string{"progress", "prepared", "applied", "sync_state"}},
	{"skip by slot, status without health", []string{"progress", "prepared", "applied", "sync_state", "skip by slot", "status"}},
	{"conflicts without detail, conflict_error of six arguments", []string{"progress", "prepared", "applied", "sync_state", "skip by slot", "status", "conflicts"}},
	{"upgraded through conflict_error with rows", []string{"progress", "prepared", "applied", "sync_state", "skip by slot", "status", "conflicts", "conflict_error rows"}},
	{"upgraded through origins", []string{"progress", "prepared", "applied", "sync_state", "skip by slot", "status", "conflicts", "conflict_error rows", "origins"}},
	{"upgraded through claims, skip by slot", []string{"progress", "prepared", "applied", "sync_state", "skip by slot", "status", "conflicts", "conflict_error rows", "origins", "claims"}},
	{"first run by the release with conflict detail", []string{"progress", "prepared", "applied", "sync_state", "skip by slot", "conflicts with detail", "conflict_error rows"}},
	{"first run by the release before schema versions", []string{"progress", "prepared", "applied", "sync_state", "skip by request", "status", "conflicts with detail", "conflict_error rows", "origins", "claims"}},
}

// oldConflicts is parapply.conflicts before it had detail and
// remote_origin, without its closing parenthesis.
const oldConflicts = `CREATE TABLE IF NOT EXISTS parapply.conflicts (
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
	remote_applied     boolean NOT NULL`
