package sequences

import "testing"

// TestMissingGrant: the GRANT named for a sequence the target role may
// not read and set is the one it lacks, schema usage first (without it
// neither sequence privilege helps).
func TestMissingGrant(t *testing.T) {
	s := Sequence{Schema: "app", Name: "Orders_id_seq"}
	for _, c := range []struct {
		schema, read, update bool
		want                 string
	}{
		{true, true, true, ""},
		{true, false, true, `GRANT SELECT ON SEQUENCE "app"."Orders_id_seq" TO "apply"`},
		{true, true, false, `GRANT UPDATE ON SEQUENCE "app"."Orders_id_seq" TO "apply"`},
		{true, false, false, `GRANT SELECT, UPDATE ON SEQUENCE "app"."Orders_id_seq" TO "apply"`},
		{false, true, true, `GRANT USAGE ON SCHEMA "app" TO "apply"`},
	} {
		if got := missingGrant(s, "apply", c.schema, c.read, c.update); got != c.want {
			t.Errorf("schema usage %v, select %v, update %v: %q, want %q", c.schema, c.read, c.update, got, c.want)
		}
	}
}

// TestSummarize: each result is counted once, under what happened to it,
// so that the counts add up to Sequences.
func TestSummarize(t *testing.T) {
	used := Sequence{Used: true, Readable: true}
	rs := []Result{
		{Sequence: Sequence{Readable: false}},
		{Sequence: Sequence{Readable: true}},
		{Sequence: used, Missing: true},
		{Sequence: used, Grant: "GRANT SELECT ON SEQUENCE s TO r"},
		{Sequence: used, Moved: true},
		{Sequence: used, Moved: true, Called: true},
		{Sequence: used, Ahead: true},
		{Sequence: used, Called: true},
	}
	got := Summarize(rs)
	got.At = Summary{}.At
	want := Summary{Sequences: 8, Unread: 1, Unused: 1, Missing: 1, Refused: 1, Moved: 2, Ahead: 1, Unchanged: 1}
	if got != want {
		t.Errorf("Summarize: %+v, want %+v", got, want)
	}
	if n := got.Failed(); n != 3 {
		t.Errorf("Failed: %d, want 3 (missing, unreadable, refused)", n)
	}
}

// TestChoose: a publication that publishes sequences (PostgreSQL 19's FOR
// ALL SEQUENCES) decides which are synced under owned and all alike;
// without one the setting does, as before 19; none syncs none whatever
// the publications hold.
func TestChoose(t *testing.T) {
	for _, c := range []struct {
		mode         Mode
		pubSequences bool
		want         From
	}{
		{None, false, FromNothing},
		{None, true, FromNothing},
		{"", true, FromNothing},
		{Owned, false, FromOwners},
		{All, false, FromDatabase},
		{Owned, true, FromPublications},
		{All, true, FromPublications},
	} {
		if got := Choose(c.mode, c.pubSequences); got != c.want {
			t.Errorf("Choose(%q, publications publish sequences %v): %v, want %v", c.mode, c.pubSequences, got, c.want)
		}
	}
}

// TestServerMajor: the major version is read from server_version as
// servers report it, release candidates and packagers' notes included.
func TestServerMajor(t *testing.T) {
	for in, want := range map[string]int{"19rc1 (Debian 19~rc1-1)": 19, "19.0": 19, "18.6": 18, "15.4 (Ubuntu 15.4-1)": 15, "9.6.24": 9, "": 0, "devel": 0} {
		if got := serverMajor(in); got != want {
			t.Errorf("serverMajor(%q): %d, want %d", in, got, want)
		}
	}
}
