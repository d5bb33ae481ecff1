package main

import (
	"strings"
	"testing"

	"github.com/parapply/parapply/preflight"
)

// TestCountChecks: counts in words that agree with them.
func TestCountChecks(t *testing.T) {
	for _, c := range []struct {
		f, sk, wn int
		want      string
	}{
		{1, 0, 0, "1 check failed"},
		{2, 0, 0, "2 checks failed"},
		{1, 1, 1, "1 check failed, 1 could not run, 1 warned"},
		{2, 0, 3, "2 checks failed, 3 warned"},
		{0, 1, 0, "1 check could not run"},
		{0, 0, 2, "2 checks warned"},
		{0, 0, 0, "no check failed"},
	} {
		if got := countChecks(c.f, c.sk, c.wn); got != c.want {
			t.Errorf("countChecks(%d, %d, %d) = %q, want %q", c.f, c.sk, c.wn, got, c.want)
		}
	}
}

// TestPrintReport: a line per check with dots to its outcome, each
// problem and its fix under it, and a last line that counts them.
func TestPrintReport(t *testing.T) {
	rep := preflight.Report{Results: []preflight.Result{
		{Side: "publisher", Check: "wal_level", Status: preflight.OK, Detail: "logical"},
		{Side: "target", Check: "published tables", Status: preflight.Failed, Problems: []preflight.Problem{
			{Object: "public.audit_log", What: "role apply lacks SELECT on it", Fix: "GRANT SELECT ON public.audit_log TO apply;", Fails: true}}},
		{Side: "target", Check: "track_commit_timestamp", Status: preflight.Warning, Problems: []preflight.Problem{{What: "off"}}},
		{Side: "target", Check: "sequences", Status: preflight.Skipped, Detail: "the publisher could not be read"},
	}}
	var out strings.Builder
	printReport(&out, rep)
	want := `Checking the publisher
  wal_level ....................................... ok (logical)

Checking the target
  published tables ................................ FAILED
      public.audit_log: role apply lacks SELECT on it
        fix: GRANT SELECT ON public.audit_log TO apply;
  track_commit_timestamp .......................... WARNING
      off
  sequences ....................................... SKIPPED (the publisher could not be read)

1 check failed, 1 could not run, 1 warned: fix the failed ones (the fix is under each) and check again
`
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
	if rep.Passed() {
		t.Error("a report with a failed check passed")
	}
}
