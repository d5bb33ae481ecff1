package progress

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/targetdb"
)

// TestOpen: a run's one reading of the slot's records (Open) answers what
// Init, ReadApplied and ReadSkips answered: on a first start a new progress
// row and nothing else; on a restart the position, the groups applied
// ahead of it (those it covers removed), the pending skip requests of the
// slot in commit order and those it has passed (removed); a row of another
// publisher refused.
func TestOpen(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "progress-open", 3*time.Minute)
	admin := pgtest.Connect(ctx, t, srv.DSN("postgres"))
	lsn := func(s string) parapply.LSN {
		l, err := parapply.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// Rows of slot s as an earlier run left them, and of slot other,
	// which Open of s must not see.
	const earlier = `UPDATE parapply.progress SET commit_lsn = '0/100', end_lsn = '0/108' WHERE slot_name = 's';
INSERT INTO parapply.progress (slot_name, source_id, commit_lsn, end_lsn) VALUES ('other', 'src', '0/10', '0/18');
INSERT INTO parapply.applied (slot_name, commit_lsn, last_commit_lsn, end_lsn) VALUES
	('s', '0/80', '0/90', '0/98'), ('s', '0/300', '0/310', '0/318'), ('s', '0/200', '0/210', '0/218'), ('other', '0/20', '0/30', '0/38');
INSERT INTO parapply.skip (slot_name, commit_lsn, reason, skipped_at) VALUES
	('s', '0/50', NULL, NULL), ('s', '0/500', NULL, NULL), ('s', '0/400', 'boom', NULL), ('s', '0/450', NULL, now()), ('other', '0/600', NULL, NULL)`
	cases := []struct {
		name     string
		setup    string // run after a first Open of s from publisher src
		sourceID string
		// slotMissing: the publisher has no slot s (Open's last argument).
		slotMissing bool
		want        Opened
		wantErr     error
		wantText    string // in the error, when there is one to read
		// Rows of s left in parapply.applied and parapply.skip after.
		wantApplied, wantSkip int
	}{
		{name: "first start", sourceID: "src", want: Opened{Created: true}},
		{name: "first start, slot to create", sourceID: "src", slotMissing: true, want: Opened{Created: true}},
		// A start refused after recording s and before it applied
		// anything left a row at 0/0: the next start creates the slot.
		{name: "slot to create after a refused start", setup: "SELECT 1", sourceID: "src", slotMissing: true, want: Opened{}},
		{name: "slot lost", setup: earlier, sourceID: "src", slotMissing: true,
			wantText: "slot s does not exist on the publisher, but the target records progress from an earlier slot of that name (last applied commit 0/100)", wantApplied: 3, wantSkip: 4},
		{name: "restart", setup: earlier, sourceID: "src",
			want: Opened{
				Position: Position{CommitLSN: lsn("0/100"), EndLSN: lsn("0/108")}, Resumed: true,
				Ahead:  []Range{{lsn("0/200"), lsn("0/210")}, {lsn("0/300"), lsn("0/310")}},
				Skips:  []SkipRequest{{LSN: lsn("0/400"), Reason: "boom"}, {LSN: lsn("0/500")}},
				Passed: []parapply.LSN{lsn("0/50")},
			},
			wantApplied: 2, wantSkip: 3},
		{name: "another publisher", setup: earlier, sourceID: "elsewhere", wantErr: ErrOtherSource, wantApplied: 3, wantSkip: 4},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := fmt.Sprintf("open%d", i)
			if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
				t.Fatal(err)
			}
			conn := pgtest.Connect(ctx, t, srv.DSN(db))
			// As the run's claim phase does first.
			if err := targetdb.Migrate(ctx, conn); err != nil {
				t.Fatal(err)
			}
			if c.setup != "" {
				if _, err := Open(ctx, conn, "s", "src", false); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, c.setup); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Open(ctx, conn, "s", c.sourceID, c.slotMissing)
			switch {
			case c.wantText != "":
				if err == nil || !strings.Contains(err.Error(), c.wantText) {
					t.Fatalf("Open: error %v, want one saying %q", err, c.wantText)
				}
			case !errors.Is(err, c.wantErr):
				t.Fatalf("Open: error %v, want %v", err, c.wantErr)
			}
			if err == nil {
				// Times are the server's; the rest is compared whole.
				got.Position.CommitTime, got.Position.AppliedAt = time.Time{}, time.Time{}
				if !reflect.DeepEqual(got, c.want) {
					t.Errorf("Open:\n got %+v\nwant %+v", got, c.want)
				}
			}
			if _, found, err := Read(ctx, conn, "s"); err != nil || !found {
				t.Errorf("after Open the progress row of s is there: found %v, error %v", found, err)
			}
			var applied, skip int
			if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM parapply.applied WHERE slot_name = 's'), (SELECT count(*) FROM parapply.skip WHERE slot_name = 's')`).Scan(&applied, &skip); err != nil {
				t.Fatal(err)
			}
			if applied != c.wantApplied || skip != c.wantSkip {
				t.Errorf("rows of s left: %d in parapply.applied, %d in parapply.skip; want %d and %d", applied, skip, c.wantApplied, c.wantSkip)
			}
		})
	}
}

// start is what a run's start does with the progress row: parapply's
// schema brought up to date (the setup phase), then Open.
func start(ctx context.Context, conn *pgx.Conn, slot, sourceID string) (Position, bool, error) {
	if err := targetdb.Migrate(ctx, conn); err != nil {
		return Position{}, false, err
	}
	o, err := Open(ctx, conn, slot, sourceID, false)
	return o.Position, o.Resumed, err
}
