package target

// TombstonesSQL creates, if missing, the objects of detect_update_deleted:
// parapply.tombstones (the rows deleted on the target by other sessions
// than parapply's), parapply.tombstone_slots (the slots that keep it) and
// the trigger function parapply.tombstone(). They are not part of the
// versioned migrations: they exist only while a slot keeps them, and the
// last slot to turn detect_update_deleted off drops them (tombstones.Remove).
//
// The function runs as its owner (SECURITY DEFINER), so that any session
// allowed to delete from a published table can record the delete; the key
// is kept as jsonb of the typed key values (to_jsonb), which a lookup
// builds the same way from the remote key.
const TombstonesSQL = `CREATE SCHEMA IF NOT EXISTS parapply;
CREATE TABLE IF NOT EXISTS parapply.tombstones (
	relid      oid NOT NULL,
	key        jsonb NOT NULL,
	xid        xid8 NOT NULL,
	deleted_at timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp()
);
CREATE INDEX IF NOT EXISTS tombstones_key ON parapply.tombstones (relid, key);
CREATE INDEX IF NOT EXISTS tombstones_deleted_at ON parapply.tombstones (deleted_at);
CREATE TABLE IF NOT EXISTS parapply.tombstone_slots (slot_name text PRIMARY KEY);
COMMENT ON TABLE parapply.tombstone_slots IS 'parapply: the slots that keep parapply.tombstones (detect_update_deleted = on); the last to turn it off removes the triggers; do not edit';
COMMENT ON TABLE parapply.tombstones IS 'parapply: rows deleted on the target by other sessions than parapply''s (detect_update_deleted), by table and key, pruned once no replicated update can be concurrent with the delete; do not edit';
CREATE OR REPLACE FUNCTION parapply.tombstone() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
	IF coalesce(current_setting('` + OriginSetting + `', true), '') <> '' THEN
		RETURN NULL; -- parapply's own session
	END IF;
	INSERT INTO parapply.tombstones (relid, key, xid)
		SELECT TG_RELID, (SELECT jsonb_object_agg(k, r.j -> k) FROM unnest(TG_ARGV) AS k), pg_current_xact_id()
		FROM (SELECT to_jsonb(d) AS j FROM parapply_deleted AS d) AS r;
	RETURN NULL;
END $f$;`
