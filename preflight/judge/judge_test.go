package judge

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestJudgements: each judgement passes what serves the run (nil) and
// words what does not, as a run's refusal reads it (Error: what, then the
// fix), the same wherever it is met.
func TestJudgements(t *testing.T) {
	refusal := &pgconn.PgError{Severity: "ERROR", Code: "42501", Message: `permission denied to set parameter "session_replication_role"`}
	lww, _ := CommitTimestamps("update_origin_differs=last_update_wins", false)
	_, off := CommitTimestamps("", false)
	onRefusal, onWarning := CommitTimestamps("update_origin_differs=last_update_wins", true)
	for _, c := range []struct {
		name string
		got  *Finding
		want string // "" for nil
	}{
		{"publisher 18", PublisherVersion(180001, true), ""},
		{"publisher 13", PublisherVersion(130011, false), "parapply needs PostgreSQL 15 or newer on the publisher (it is tested on 15 to 19), which runs 13 (fix: upgrade the publisher)"},
		{"publisher 14", PublisherVersion(140010, false), "parapply needs PostgreSQL 15 or newer on the publisher (it is tested on 15 to 19), which runs 14 (fix: upgrade the publisher)"},
		{"origin none on 15", PublisherVersion(150004, true), "origin = none needs PostgreSQL 16 or newer on the publisher (pgoutput's origin option), which runs 15 (fix: set origin = any, or upgrade the publisher)"},
		{"origin none on 16", PublisherVersion(160000, true), ""},
		{"target 15", TargetVersion(150000), ""},
		{"target 14", TargetVersion(140000), "parapply needs PostgreSQL 15 or newer on the target (it is tested on 15 to 19), which runs 14 (fix: upgrade the target)"},
		{"target 12", TargetVersion(120000), "parapply needs PostgreSQL 15 or newer on the target (it is tested on 15 to 19), which runs 12 (fix: upgrade the target)"},
		{"wal_level logical", WALLevel("logical", ""), ""},
		{"wal_level replica", WALLevel("replica", ""), "wal_level is replica; logical decoding needs logical (fix: ALTER SYSTEM SET wal_level = logical; then restart the publisher)"},
		{"wal_level logical on 19", WALLevel("logical", "logical"), ""},
		{"wal_level replica on 19, a logical slot there", WALLevel("replica", "logical"), ""},
		{"wal_level replica on 19, no logical slot yet", WALLevel("replica", "replica"), ""},
		{"wal_level minimal on 19", WALLevel("minimal", "minimal"),
			"wal_level is minimal and effective_wal_level minimal; logical decoding needs wal_level = logical, or replica (under which it turns on with the first logical slot) (fix: ALTER SYSTEM SET wal_level = logical; then restart the publisher)"},
		{"replication", Replication("App"), `role App may not open a replication connection (fix: ALTER ROLE "App" REPLICATION;)`},
		{"publications there", Publications([]string{"a", "b"}, []string{"b", "a"}), ""},
		{"no publication", Publications(nil, []string{"a"}), "no publication given (fix: set publication to the publication(s) to subscribe to)"},
		{"misspelt publication", Publications([]string{"app_pub", "app_pubb"}, []string{"app_pub"}),
			"publication app_pubb does not exist; did you mean app_pub? (fix: set publication = app_pub (or, if app_pubb is meant: CREATE PUBLICATION app_pubb FOR TABLE ...; (or FOR ALL TABLES) on the publisher))"},
		{"slot fit", Slot("s", "logical", "pgoutput", "db", "db"), ""},
		{"physical slot", Slot("s", "physical", "", "", "db"), "slot s is a physical slot, not a logical slot of pgoutput (fix: use another slot name (slot = ...))"},
		{"other plugin", Slot("s", "logical", "test_decoding", "db", "db"), "slot s is a logical slot of plugin test_decoding, not of pgoutput (fix: use another slot name (slot = ...))"},
		{"other database", Slot("s", "logical", "pgoutput", "other", "db"), "slot s belongs to database other, not db (fix: use another slot name, or connect to database other)"},
		{"slot in use", SlotInUse("s", 42, "parapply"), "slot s is in use by walsender pid 42 (application_name parapply) (fix: stop what streams from it, or start with another --slot)"},
		{"slot in use, no name", SlotInUse("s", 42, ""), "slot s is in use by walsender pid 42 (fix: stop what streams from it, or start with another --slot)"},
		{"prepared transactions", PreparedTransactions(10), ""},
		{"no prepared transactions", PreparedTransactions(0), "two_phase = on applies prepared transactions as prepared transactions on the target, but its max_prepared_transactions is 0 (fix: ALTER SYSTEM SET max_prepared_transactions = 10; then restart the target (or turn two_phase off))"},
		{"replica role", ReplicaRole("applier", refusal), `role applier may not set session_replication_role: ERROR: permission denied to set parameter "session_replication_role" (SQLSTATE 42501) (fix: GRANT SET ON PARAMETER session_replication_role TO applier; (PostgreSQL 15 or later; before it, a superuser))`},
		{"policy without commit timestamps", lww, "conflict_resolution entry update_origin_differs=last_update_wins compares commit times, but track_commit_timestamp is off on the target (fix: ALTER SYSTEM SET track_commit_timestamp = on; then restart the target (or choose another policy))"},
		{"commit timestamps off", off, "track_commit_timestamp is off on the target: update_origin_differs and delete_origin_differs (a row last changed by another session or origin) are not detected (fix: ALTER SYSTEM SET track_commit_timestamp = on; then restart the target (not needed for a one-way migration, whose target no one else writes))"},
		{"commit timestamps on", onRefusal, ""},
		{"commit timestamps on, no warning", onWarning, ""},
	} {
		switch {
		case c.want == "" && c.got != nil:
			t.Errorf("%s: %q, want none", c.name, c.got.Error())
		case c.want != "" && c.got == nil:
			t.Errorf("%s: none, want %q", c.name, c.want)
		case c.want != "" && c.got.Error() != c.want:
			t.Errorf("%s:\n  %s\nwant\n  %s", c.name, c.got.Error(), c.want)
		}
	}
}

// TestReplicaRoleCause: the refusal a finding stems from stays reachable,
// so that a run tells the server's refusal from a lost connection.
func TestReplicaRoleCause(t *testing.T) {
	refusal := &pgconn.PgError{Code: "42501", Message: "permission denied"}
	var pe *pgconn.PgError
	if err := error(ReplicaRole("r", refusal)); !errors.As(err, &pe) || pe != refusal {
		t.Errorf("errors.As(ReplicaRole(...)) = %v, want the server's refusal", pe)
	}
	if err := error(WALLevel("minimal", "")); errors.As(err, &pe) {
		t.Errorf("a judgement of a value read has a server error: %v", pe)
	}
}

// TestMissingPublication: a misspelt publication is named with the one
// meant first; otherwise the CREATE PUBLICATION, with what there is.
func TestMissingPublication(t *testing.T) {
	for _, c := range []struct {
		pub       string
		existing  []string
		what, fix string
	}{
		{"app_pubb", []string{"app_pub", "other"},
			"publication app_pubb does not exist; did you mean app_pub?",
			"set publication = app_pub (or, if app_pubb is meant: CREATE PUBLICATION app_pubb FOR TABLE ...; (or FOR ALL TABLES) on the publisher)"},
		{"sales", []string{"app_pub"},
			"publication sales does not exist (the publisher has app_pub)",
			"CREATE PUBLICATION sales FOR TABLE ...; (or FOR ALL TABLES) on the publisher"},
		{"Sales", nil,
			`publication "Sales" does not exist (the publisher has none)`,
			`CREATE PUBLICATION "Sales" FOR TABLE ...; (or FOR ALL TABLES) on the publisher`},
		{"x", []string{"a", "b", "c", "d", "e", "f"},
			"publication x does not exist",
			"CREATE PUBLICATION x FOR TABLE ...; (or FOR ALL TABLES) on the publisher"},
	} {
		what, fix := MissingPublication(c.pub, c.existing)
		if what != c.what || fix != c.fix {
			t.Errorf("MissingPublication(%q, %q) =\n  %q\n  %q\nwant\n  %q\n  %q", c.pub, c.existing, what, fix, c.what, c.fix)
		}
	}
}

// TestWALLevelDetail: check shows wal_level alone where it is all there
// is, and on 19 under wal_level = replica says whether logical decoding
// is on already or turns on with parapply's slot.
func TestWALLevelDetail(t *testing.T) {
	for _, c := range []struct{ level, effective, want string }{
		{"logical", "", "logical"},
		{"logical", "logical", "logical"},
		{"replica", "logical", "wal_level replica, effective_wal_level logical: a logical slot has turned logical decoding on"},
		{"replica", "replica", "wal_level replica, effective_wal_level replica: logical decoding turns on when parapply creates its slot"},
	} {
		if got := WALLevelDetail(c.level, c.effective); got != c.want {
			t.Errorf("WALLevelDetail(%q, %q) = %q, want %q", c.level, c.effective, got, c.want)
		}
	}
}
