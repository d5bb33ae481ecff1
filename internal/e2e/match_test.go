package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The target's tables keep their keys under a nondeterministic ICU
// collation (case-insensitive, so also blind to the NFC/NFD difference), and
// a trigger there rewrites every key it is given (insert or update) to lower case NFD: the
// publisher's 'Émile' (NFC) is 'émile' (NFD) on the target, equal under the
// column's collation only.
const ciTarget = `CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
	CREATE FUNCTION rewrite() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN NEW.k := lower(normalize(NEW.k, NFD)); RETURN NEW; END$$;`

func rewritten(table string) string {
	return "CREATE TRIGGER rewrite BEFORE INSERT OR UPDATE ON " + table + " FOR EACH ROW EXECUTE FUNCTION rewrite(); ALTER TABLE " + table + " ENABLE ALWAYS TRIGGER rewrite;"
}

// TestMatchUnderColumnCollation: updates and deletes find a row whose key
// the target holds in another form, equal under the target column's
// nondeterministic collation, as the built-in does: on a REPLICA IDENTITY
// FULL table and on a primary key table; duplicates under the collation
// (and byte for byte) on a FULL table, changed in one transaction, are
// changed one row each; a NULL in a column whose type has no equality
// operator (point) matches a NULL.
func TestMatchUnderColumnCollation(t *testing.T) {
	e := newEnv(t, "")
	e.runScenario(t, scenario{
		pub: `CREATE TABLE names_full (k text, v int, at point); ALTER TABLE names_full REPLICA IDENTITY FULL;
			CREATE TABLE names_pk (k text PRIMARY KEY, v int);
			CREATE TABLE dups (k text COLLATE "C", v int); ALTER TABLE dups REPLICA IDENTITY FULL;
			CREATE PUBLICATION pub_match FOR TABLE names_full, names_pk, dups`,
		sub: ciTarget + `CREATE TABLE names_full (k text COLLATE ci, v int, at point);
			CREATE TABLE names_pk (k text COLLATE ci PRIMARY KEY, v int);
			CREATE TABLE dups (k text COLLATE ci, v int);` +
			rewritten("names_full") + rewritten("names_pk") + rewritten("dups"),
		pubs: []string{"pub_match"},
		before: []string{
			`INSERT INTO names_full VALUES (E'\u00c9mile', 1, NULL), (E'Zo\u00eb', 2, NULL), ('plain', 3, NULL)`,
			`INSERT INTO names_pk VALUES (E'\u00c9mile', 1), (E'Zo\u00eb', 2), ('plain', 3)`,
			`INSERT INTO dups VALUES ('a', 1), ('A', 1), ('b', 1), ('b', 1), ('c', 1), ('c', 1)`,
		},
		after: []string{
			`UPDATE names_full SET v = v + 10 WHERE k = E'\u00c9mile'`,
			`DELETE FROM names_full WHERE k = E'Zo\u00eb'`,
			`UPDATE names_pk SET v = v + 10 WHERE k = E'\u00c9mile'`,
			`DELETE FROM names_pk WHERE k = E'Zo\u00eb'`,
			`UPDATE dups SET v = 2 WHERE k IN ('a', 'A', 'b')`,
			`DELETE FROM dups WHERE ctid = (SELECT min(ctid) FROM dups WHERE k = 'c')`,
		},
		tables: []string{"names_full", "names_pk", "dups"},
	})
}

// TestFullWithoutEquality: under REPLICA IDENTITY FULL, an update whose old
// row holds a value of a type without an equality operator (point, json)
// cannot be located: the built-in apply fails with "could not identify an
// equality operator for type point", and so does parapply, naming the
// column, where it used to compare text forms.
func TestFullWithoutEquality(t *testing.T) {
	for _, typ := range []string{"point", "json"} {
		t.Run(typ, func(t *testing.T) {
			val := map[string]string{"point": "'(1,2)'", "json": `'{"a": 1}'`}[typ]
			schema := "CREATE TABLE shapes (id int, s " + typ + "); ALTER TABLE shapes REPLICA IDENTITY FULL"
			e := newEnv(t, schema)
			e.exec(e.pub, "INSERT INTO shapes VALUES (1, "+val+")")
			e.exec(e.pub, "CREATE PUBLICATION pub_shapes FOR TABLE shapes")
			ctx := context.Background()
			builtin := e.builtinSubscription(t, "", "CREATE TABLE shapes (id int, s "+typ+")", []string{"pub_shapes"}, 0)
			cfg := e.config("shapes")
			cfg.Source.Publications = []string{"pub_shapes"}
			cfg.CopyData = true
			r := e.start(cfg)
			e.exec(e.pub, "UPDATE shapes SET id = 2")
			select {
			case err := <-r.done:
				r.done <- err
				want := "could not identify an equality operator for type " + typ
				if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `column "s"`) {
					t.Fatalf("parapply ended with %v, want an error containing %q naming column s", err, want)
				}
				t.Logf("parapply: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatal("parapply applied an update it cannot locate the row of, or did not stop within 2 minutes")
			}
			// The built-in fails the same way: its apply errors, and the
			// row keeps id 1.
			deadline := time.Now().Add(time.Minute)
			for {
				var errs int64
				if err := builtin.QueryRow(ctx, `SELECT coalesce(sum(apply_error_count), 0)::int8 FROM pg_stat_subscription_stats WHERE subname = $1`, builtinName("")).Scan(&errs); err != nil {
					t.Fatal(err)
				}
				var id int
				err := builtin.QueryRow(ctx, "SELECT id FROM shapes").Scan(&id)
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					t.Fatal(err)
				}
				if id == 2 {
					t.Fatal("the built-in subscription applied the update: parapply's refusal no longer matches it")
				}
				if errs > 0 && id == 1 {
					t.Logf("the built-in subscription: %d apply errors, the row not updated", errs)
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the built-in subscription neither failed nor applied within a minute (errors %d, id %d)", errs, id)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}
