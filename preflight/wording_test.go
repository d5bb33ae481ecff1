package preflight

import (
	"testing"
	"time"
)

// TestMissingTable: a published table missing on the target names the
// target's table it was likely meant to be, and the statement that gives
// it the publisher's name.
func TestMissingTable(t *testing.T) {
	create := "create it there with the publisher's columns (pg_dump --schema-only --table=public.items on the publisher gives its definition)"
	for _, c := range []struct {
		name      string
		near      [2]string
		what, fix string
	}{
		{"none", [2]string{}, "does not exist on the target", create},
		{"misspelt", [2]string{"public", "itemz"},
			"does not exist on the target, but public.itemz does: did you mean it? parapply applies to the table of the publisher's name",
			"if public.itemz is it: ALTER TABLE public.itemz RENAME TO items; else " + create},
		{"another schema", [2]string{"app", "items"},
			"does not exist on the target, but app.items does: did you mean it? parapply applies to the table of the publisher's schema and name",
			"if app.items is it: ALTER TABLE app.items SET SCHEMA public; else " + create},
	} {
		what, fix := missingTable("public", "items", c.near)
		if what != c.what || fix != c.fix {
			t.Errorf("%s:\n  %q\n  %q\nwant\n  %q\n  %q", c.name, what, fix, c.what, c.fix)
		}
	}
}

// TestSlotHeld: the slot-held line says what parapply run does.
func TestSlotHeld(t *testing.T) {
	for _, c := range []struct {
		app, want string
	}{
		{"parapply", "slot s is in use by walsender pid 42 (application_name parapply): parapply run does not start while it is (it stops at once when the target records a live parapply holding it, else after waiting 10s for the slot to be let go, as by a subscriber that just stopped)"},
		{"", "slot s is in use by walsender pid 42: parapply run does not start while it is (it stops at once when the target records a live parapply holding it, else after waiting 10s for the slot to be let go, as by a subscriber that just stopped)"},
	} {
		if got := slotHeld("s", 42, c.app, 10*time.Second); got != c.want {
			t.Errorf("slotHeld(app %q) =\n  %s\nwant\n  %s", c.app, got, c.want)
		}
	}
}

// TestColumnsDetail: the column check's detail agrees with its outcome.
func TestColumnsDetail(t *testing.T) {
	for _, c := range []struct {
		name  string
		probs []Problem
		want  string
	}{
		{"none", nil, "can every publisher value be stored: yes"},
		{"narrower", []Problem{warn("t", "rounded", ""), fail("t", "narrower", "ALTER TABLE ...")}, "can every publisher value be stored: no"},
		{"cast", []Problem{warn("t", "cast", "")}, "can every publisher value be stored: not all as they are"},
	} {
		if got := columnsDetail(c.probs); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		rep := &Report{}
		rep.add(sideTarget, "published columns and types", columnsDetail(c.probs), c.probs...)
		if st := rep.Results[0].Status; (st == Failed) != (c.want == "can every publisher value be stored: no") {
			t.Errorf("%s: status %s with detail %q", c.name, st, c.want)
		}
	}
}
