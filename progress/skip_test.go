package progress

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/targetdb"
)

// oldSkipForms are the forms of parapply.skip that releases before skip
// requests became a set left on a target: one request per slot (primary key
// slot_name), with reason (the release before this change, as its create
// statements made it) and without (earlier).
var oldSkipForms = []struct{ name, ddl string }{
	{"with reason", `CREATE TABLE parapply.skip (
	slot_name    text PRIMARY KEY,
	commit_lsn   pg_lsn NOT NULL,
	requested_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE parapply.skip ADD COLUMN IF NOT EXISTS reason text;
COMMENT ON TABLE parapply.skip IS 'parapply: the source transaction (by commit LSN) each slot is to skip, set by parapply skip and removed once the progress row passes it';`},
	{"without reason", `CREATE TABLE parapply.skip (
	slot_name    text PRIMARY KEY,
	commit_lsn   pg_lsn NOT NULL,
	requested_at timestamptz NOT NULL DEFAULT now()
);`},
}

// TestSkipTableUpgrade: a target whose parapply.skip holds one request per
// slot, as the earlier releases made it, is brought to one row per request
// in place, keeping its rows, by the next start (Init; two at once here) or
// by parapply skip (SetSkip) run before it; after it a second request of a slot adds to the first, SkipDone
// marks one done, and ReadSkips returns the pending ones and removes those
// the progress row passed.
func TestSkipTableUpgrade(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "progress-skip", 3*time.Minute)
	admin, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	n := 0
	for _, form := range oldSkipForms {
		for _, by := range []string{"start", "parapply skip"} {
			n++
			db := fmt.Sprintf("upgrade%d", n)
			t.Run(form.name+", upgraded by "+by, func(t *testing.T) {
				if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
					t.Fatal(err)
				}
				conn := pgtest.Connect(ctx, t, srv.DSN(db))
				exec := func(sql string, args ...any) {
					t.Helper()
					if _, err := conn.Exec(ctx, sql, args...); err != nil {
						t.Fatalf("%s: %v", sql, err)
					}
				}
				// parapply's tables as a release makes them, but
				// parapply.skip in its old form.
				if err := targetdb.Migrate(ctx, conn); err != nil {
					t.Fatal(err)
				}
				exec(`DROP TABLE parapply.skip, parapply.schema_version`)
				exec(form.ddl)
				exec(`INSERT INTO parapply.progress (slot_name, source_id, commit_lsn, end_lsn) VALUES ('a', 'src', '0/100', '0/108'), ('b', 'src', '0/100', '0/108')`)
				exec(`INSERT INTO parapply.skip (slot_name, commit_lsn, requested_at) VALUES ('a', '0/200', '2026-01-02 03:04:05+00'), ('b', '0/50', now())`)
				withReason := strings.Contains(form.ddl, "reason")
				if withReason {
					exec(`UPDATE parapply.skip SET reason = 'boom' WHERE slot_name = 'a'`)
				}
				if by == "parapply skip" {
					// Before any start of this release: the request is
					// added beside the one there.
					if err := SetSkip(ctx, conn, "a", 0x300, ""); err != nil {
						t.Fatalf("SetSkip on the old form of parapply.skip: %v", err)
					}
				} else {
					var wg sync.WaitGroup
					errs := make([]error, 2)
					for k := range errs {
						c := pgtest.Connect(ctx, t, srv.DSN(db))
						wg.Add(1)
						go func() {
							defer wg.Done()
							_, _, errs[k] = start(ctx, c, "a", "src")
						}()
					}
					wg.Wait()
					for _, err := range errs {
						if err != nil {
							t.Fatalf("Init on the old form of parapply.skip: %v", err)
						}
					}
				}
				var key string
				if err := conn.QueryRow(ctx, `SELECT string_agg(a.attname, ',' ORDER BY k.n) FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, n), pg_attribute a
				WHERE i.indrelid = 'parapply.skip'::regclass AND i.indisprimary AND a.attrelid = i.indrelid AND a.attnum = k.attnum`).Scan(&key); err != nil {
					t.Fatal(err)
				}
				if key != "slot_name,commit_lsn" {
					t.Fatalf("parapply.skip's primary key is (%s) after the upgrade, want (slot_name,commit_lsn)", key)
				}
				// commit_lsn unpadded: PostgreSQL 19 prints 0/00000200.
				var rows string
				if err := conn.QueryRow(ctx, `SELECT string_agg(concat_ws('/', slot_name, regexp_replace(commit_lsn::text, '/0*([0-9A-F])', '/\1'), reason, skipped_at, requested_at = '2026-01-02 03:04:05+00'), ';' ORDER BY slot_name, commit_lsn)
					FROM parapply.skip`).Scan(&rows); err != nil {
					t.Fatal(err)
				}
				want := "a/0/200/t"
				if withReason {
					want = "a/0/200/boom/t"
				}
				if by == "parapply skip" {
					want += ";a/0/300/f"
				}
				if want += ";b/0/50/f"; rows != want {
					t.Fatalf("parapply.skip holds %s after the upgrade, want its rows as they were: %s", rows, want)
				}

				// A second request of slot a adds to the first; one asked
				// again stays one, with its reason.
				for _, lsn := range []parapply.LSN{0x300, 0x200} {
					if err := SetSkip(ctx, conn, "a", lsn, ""); err != nil {
						t.Fatal(err)
					}
				}
				if err := SetSkip(ctx, conn, "a", 0x100, ""); err == nil || !strings.Contains(err.Error(), "applied already") {
					t.Errorf("SetSkip of a transaction the progress row is at: %v, want applied already", err)
				}
				reason := ""
				if withReason {
					reason = "boom"
				}
				pending, passed, err := ReadSkips(ctx, conn, "a", 0x100)
				if want := []SkipRequest{{0x200, reason}, {0x300, ""}}; err != nil || !slices.Equal(pending, want) || len(passed) != 0 {
					t.Errorf("ReadSkips(a) = %v, passed %v, %v; want %v, none passed", pending, passed, err, want)
				}
				pending, passed, err = ReadSkips(ctx, conn, "b", 0x100)
				if err != nil || len(pending) != 0 || !slices.Equal(passed, []parapply.LSN{0x50}) {
					t.Errorf("ReadSkips(b) = %v, passed %v, %v; want none pending, 0/50 passed", pending, passed, err)
				}

				// Marked done in a transaction that commits: no longer
				// pending; in one that rolls back: still pending.
				done := SkipDone("a", []parapply.LSN{0x200})
				for _, end := range []string{"ROLLBACK", "COMMIT"} {
					exec("BEGIN")
					exec(done.SQL, done.Args...)
					exec(end)
					want := []SkipRequest{{0x300, ""}}
					if end == "ROLLBACK" {
						want = []SkipRequest{{0x200, reason}, {0x300, ""}}
					}
					if pending, _, err := ReadSkips(ctx, conn, "a", 0x100); err != nil || !slices.Equal(pending, want) {
						t.Errorf("after SkipDone and %s: ReadSkips(a) = %v, %v; want %v", end, pending, err, want)
					}
				}
				listed, err := ListSkips(ctx, conn, "a")
				if err != nil || len(listed) != 2 || listed[0].SkippedAt.IsZero() || !listed[1].SkippedAt.IsZero() || listed[0].Passed || listed[1].Passed {
					t.Errorf("ListSkips(a) = %+v, %v; want 0/200 skipped, 0/300 pending, neither passed", listed, err)
				}
				// Another start leaves the new form as it is.
				if _, _, err := start(ctx, conn, "a", "src"); err != nil {
					t.Fatalf("Init on the new form: %v", err)
				}
			})
		}
	}
}
