package e2e

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/subscriber"
)

// triggerSchema is the subscriber's schema of TestTargetTriggers: the
// published tables, with triggers of every kind that matters to apply.
//   - skipped: BEFORE row triggers that fire for replicated changes
//     (ENABLE REPLICA for INSERT and UPDATE, ENABLE ALWAYS for DELETE) and
//     suppress some changes (RETURN NULL), noting each in audit;
//   - rewritten: an ENABLE ALWAYS BEFORE trigger that changes the row
//     written;
//   - plain: ordinary (ENABLE ORIGIN) triggers, which replicated changes
//     must not fire: they would suppress everything and write audit;
//   - audited: an ENABLE ALWAYS AFTER trigger writing audit;
//   - fullrow: REPLICA IDENTITY FULL, BEFORE UPDATE and DELETE triggers
//     as skipped's.
//
// audit is the subscriber's own, and must end the same under parapply
// and the built-in subscription: every trigger fired once per change.
const triggerSchema = `CREATE TABLE skipped (id int PRIMARY KEY, v int, note text);
	CREATE TABLE rewritten (id int PRIMARY KEY, v int, tag text);
	CREATE TABLE plain (id int PRIMARY KEY, v int);
	CREATE TABLE audited (id int PRIMARY KEY, v int);
	CREATE TABLE audit (tbl text, op text, id int, v int);
	CREATE TABLE fullrow (id int, v int, note text);
	ALTER TABLE fullrow REPLICA IDENTITY FULL;
	CREATE FUNCTION skip_some() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'INSERT' THEN
			IF NEW.v < 0 THEN
				INSERT INTO public.audit VALUES (TG_TABLE_NAME, 'skipped insert', NEW.id, NEW.v);
				RETURN NULL;
			END IF;
			RETURN NEW;
		ELSIF TG_OP = 'UPDATE' THEN
			IF OLD.note = 'frozen' OR NEW.v % 7 = 0 THEN
				INSERT INTO public.audit VALUES (TG_TABLE_NAME, 'skipped update', NEW.id, NEW.v);
				RETURN NULL;
			END IF;
			RETURN NEW;
		END IF;
		IF OLD.note = 'keep' THEN
			INSERT INTO public.audit VALUES (TG_TABLE_NAME, 'skipped delete', OLD.id, OLD.v);
			RETURN NULL;
		END IF;
		RETURN OLD;
	END $$;
	CREATE TRIGGER skip_ins BEFORE INSERT ON skipped FOR EACH ROW EXECUTE FUNCTION skip_some();
	CREATE TRIGGER skip_upd BEFORE UPDATE ON skipped FOR EACH ROW EXECUTE FUNCTION skip_some();
	CREATE TRIGGER skip_del BEFORE DELETE ON skipped FOR EACH ROW EXECUTE FUNCTION skip_some();
	ALTER TABLE skipped ENABLE REPLICA TRIGGER skip_ins, ENABLE REPLICA TRIGGER skip_upd, ENABLE ALWAYS TRIGGER skip_del;
	CREATE TRIGGER skip_upd BEFORE UPDATE ON fullrow FOR EACH ROW EXECUTE FUNCTION skip_some();
	CREATE TRIGGER skip_del BEFORE DELETE ON fullrow FOR EACH ROW EXECUTE FUNCTION skip_some();
	ALTER TABLE fullrow ENABLE REPLICA TRIGGER skip_upd, ENABLE REPLICA TRIGGER skip_del;
	CREATE FUNCTION rewrite() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		NEW.v := NEW.v * 10;
		NEW.tag := pg_catalog.upper(NEW.tag);
		RETURN NEW;
	END $$;
	CREATE TRIGGER rewrite BEFORE INSERT OR UPDATE ON rewritten FOR EACH ROW EXECUTE FUNCTION rewrite();
	ALTER TABLE rewritten ENABLE ALWAYS TRIGGER rewrite;
	CREATE FUNCTION suppress() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
	CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF TG_OP = 'DELETE' THEN
			INSERT INTO public.audit VALUES (TG_TABLE_NAME, pg_catalog.lower(TG_OP), OLD.id, OLD.v);
		ELSE
			INSERT INTO public.audit VALUES (TG_TABLE_NAME, pg_catalog.lower(TG_OP), NEW.id, NEW.v);
		END IF;
		RETURN NULL;
	END $$;
	CREATE TRIGGER not_here BEFORE INSERT OR UPDATE OR DELETE ON plain FOR EACH ROW EXECUTE FUNCTION suppress();
	CREATE TRIGGER not_here_either AFTER INSERT OR UPDATE OR DELETE ON plain FOR EACH ROW EXECUTE FUNCTION note();
	CREATE TRIGGER audit AFTER INSERT OR UPDATE OR DELETE ON audited FOR EACH ROW EXECUTE FUNCTION note();
	ALTER TABLE audited ENABLE ALWAYS TRIGGER audit`

// TestTargetTriggers checks that parapply fires the target's triggers as
// the built-in apply worker does (session_replication_role = replica:
// ENABLE REPLICA and ENABLE ALWAYS triggers, not ordinary ones), with
// their row-level effects, and that a change a BEFORE trigger suppressed
// is neither a conflict nor a missing row: the same rows and the same
// audit under parapply and the built-in subscription, no conflict logged,
// no row counted missing. Runs of many rows (COPY, set-based statements)
// and single rows, with conflict detection on and off.
func TestTargetTriggers(t *testing.T) {
	for _, detect := range []bool{true, false} {
		name := "detect_conflicts=off"
		if detect {
			name = "detect_conflicts=on"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, "")
			e.runScenario(t, scenario{
				pub: `CREATE TABLE skipped (id int PRIMARY KEY, v int, note text);
					CREATE TABLE rewritten (id int PRIMARY KEY, v int, tag text);
					CREATE TABLE plain (id int PRIMARY KEY, v int);
					CREATE TABLE audited (id int PRIMARY KEY, v int);
					CREATE TABLE fullrow (id int, v int, note text);
					ALTER TABLE fullrow REPLICA IDENTITY FULL;
					CREATE PUBLICATION tp FOR TABLE skipped, rewritten, plain, audited, fullrow`,
				sub:  triggerSchema,
				pubs: []string{"tp"},
				before: []string{
					// Copied: the initial copy fires the triggers too.
					`INSERT INTO skipped SELECT g, CASE WHEN g % 13 = 0 THEN -g ELSE g END, CASE g % 10 WHEN 0 THEN 'frozen' WHEN 1 THEN 'keep' ELSE '' END FROM generate_series(1, 50) g`,
					`INSERT INTO rewritten SELECT g, g, 'r' || g FROM generate_series(1, 20) g`,
				},
				after: []string{
					// Many rows (COPY), then a few (INSERT), some suppressed.
					`INSERT INTO skipped SELECT g, CASE WHEN g % 9 = 0 THEN -g ELSE g END, CASE g % 10 WHEN 0 THEN 'frozen' WHEN 1 THEN 'keep' ELSE '' END FROM generate_series(51, 700) g`,
					`INSERT INTO skipped VALUES (701, -1, ''), (702, 2, '')`,
					// Rows whose insert was suppressed (v < 0) are left
					// alone: changing them is a conflict under either.
					`UPDATE skipped SET v = v + 1 WHERE v >= 0 AND id <= 400`,
					`UPDATE skipped SET v = v + 1 WHERE id = 20`,
					`UPDATE skipped SET v = v + 2 WHERE id = 22`,
					`DELETE FROM skipped WHERE v >= 0 AND id % 3 = 0`,
					`DELETE FROM skipped WHERE id = 41`,
					`INSERT INTO rewritten SELECT g, g, 'r' || g FROM generate_series(21, 400) g`,
					`UPDATE rewritten SET v = v + 1, tag = tag || 'x' WHERE id % 2 = 0`,
					`DELETE FROM rewritten WHERE id % 5 = 0`,
					`INSERT INTO plain SELECT g, g FROM generate_series(1, 300) g`,
					`UPDATE plain SET v = -v WHERE id % 2 = 0`,
					`DELETE FROM plain WHERE id % 7 = 0`,
					`INSERT INTO audited SELECT g, g FROM generate_series(1, 300) g`,
					`UPDATE audited SET v = v * 2 WHERE id % 3 = 0`,
					// Each row changed once at most: a row whose change was
					// suppressed no longer holds the publisher's old values.
					`INSERT INTO fullrow SELECT g, g, CASE g % 10 WHEN 0 THEN 'frozen' WHEN 1 THEN 'keep' ELSE '' END FROM generate_series(1, 300) g`,
					`UPDATE fullrow SET v = v + 1 WHERE id % 2 = 0`,
					`DELETE FROM fullrow WHERE id % 2 = 1`,
					`DELETE FROM audited WHERE id % 4 = 0`,
					// One transaction over several tables, single rows.
					`UPDATE skipped SET v = v + 5 WHERE id IN (2, 4, 30); UPDATE audited SET v = 0 WHERE id = 1; DELETE FROM skipped WHERE id IN (11, 12); INSERT INTO skipped VALUES (703, -3, '')`,
					// A conflict among suppressed changes: row 54's insert
					// was suppressed, so its update is update_missing (the
					// one conflict and missing row of the test); with
					// detection on, the transaction is applied again with
					// resolving statements, and the next ones for a while
					// with the fast ones.
					`UPDATE skipped SET v = v + 3 WHERE v >= 0 AND id BETWEEN 100 AND 200; UPDATE skipped SET note = 'gone' WHERE id = 54;
						UPDATE skipped SET v = v + 3 WHERE v >= 0 AND id BETWEEN 201 AND 260; DELETE FROM skipped WHERE v >= 0 AND id BETWEEN 600 AND 650;
						INSERT INTO skipped VALUES (704, -4, ''), (705, 5, '')`,
					`UPDATE skipped SET v = v + 1 WHERE v >= 0 AND id BETWEEN 300 AND 350`,
					`DELETE FROM skipped WHERE v >= 0 AND id BETWEEN 500 AND 550`,
				},
				tables: []string{"public.skipped", "public.rewritten", "public.plain", "public.audited", "public.fullrow", "public.audit"},
				config: func(c *subscriber.Config) { c.DetectConflicts = detect },
				stopped: func(r *running) {
					// Row 54's update only, logged with detection on.
					want := int64(0)
					if detect {
						want = 1
					}
					if st := r.s.Status(); st.Missing != 1 || st.Conflicts != want {
						t.Fatalf("%d rows counted missing and %d conflicts, want 1 and %d: a change a trigger suppressed is neither", st.Missing, st.Conflicts, want)
					}
					ctx := context.Background()
					var logged []string
					rows, err := e.sub.Query(ctx, `SELECT conflict_type || ' ' || key::text FROM parapply.conflicts ORDER BY id`)
					if err != nil {
						t.Fatal(err)
					}
					if logged, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
						t.Fatal(err)
					}
					if int64(len(logged)) != want || want == 1 && logged[0] != `update_missing {"id": "54"}` {
						t.Fatalf("parapply.conflicts holds %q, want %d row(s): update_missing of id 54", logged, want)
					}
					// The triggers did something: rows suppressed of
					// each kind, and audited's changes noted.
					var kinds, notes int
					if err := e.sub.QueryRow(ctx, `SELECT count(DISTINCT op) FILTER (WHERE op LIKE 'skipped %'), count(*) FILTER (WHERE tbl = 'audited') FROM audit`).Scan(&kinds, &notes); err != nil {
						t.Fatal(err)
					}
					if kinds != 3 || notes == 0 {
						t.Fatalf("audit holds %d kinds of suppressed change (want 3) and %d notes of audited (want some)", kinds, notes)
					}
					// Ordinary triggers did not fire: plain is the
					// publisher's.
					e.verify("public.plain", "public.audited")
				},
			})
		})
	}
}
