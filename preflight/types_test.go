package preflight

import (
	"slices"
	"testing"
)

func col(t string, enum ...string) Column {
	base, mod := splitType(t)
	return Column{Name: "c", Type: t, Base: base, Mod: mod, Enum: enum}
}

func TestSplitType(t *testing.T) {
	tests := []struct {
		in   string
		base string
		mod  []int
	}{
		{"text", "text", nil},
		{"character varying(50)", "character varying", []int{50}},
		{"numeric(10,2)", "numeric", []int{10, 2}},
		{"timestamp(3) with time zone", "timestamp with time zone", []int{3}},
		{"character varying(20)[]", "character varying[]", []int{20}},
		{"bit varying(8)", "bit varying", []int{8}},
		{`"my(type)"`, `"my(type)"`, nil}, // not numbers: left whole
	}
	for _, tt := range tests {
		base, mod := splitType(tt.in)
		if base != tt.base || !slices.Equal(mod, tt.mod) {
			t.Errorf("splitType(%q) = %q, %v; want %q, %v", tt.in, base, mod, tt.base, tt.mod)
		}
	}
}

func TestCompare(t *testing.T) {
	const ok, warns, fails = 0, 1, 2
	tests := []struct {
		pub, tgt Column
		want     int
	}{
		{col("integer"), col("integer"), ok},
		{col("character varying(50)"), col("character varying(50)"), ok},
		{col("character varying(50)"), col("character varying(3)"), fails},
		{col("character varying(50)"), col("character varying(80)"), ok},
		{col("character varying(50)"), col("character varying"), ok},
		{col("character varying(50)"), col("text"), ok},
		{col("text"), col("character varying(10)"), warns},
		{col("character varying"), col("character varying(10)"), warns},
		{col("character(5)"), col("character varying(3)"), fails},
		{col("character(5)"), col("character varying(5)"), ok},
		{col("numeric(10,2)"), col("numeric(12,2)"), ok},
		{col("numeric(10,2)"), col("numeric(9,2)"), fails},
		{col("numeric(10,2)"), col("numeric(12,4)"), ok},
		{col("numeric(10,4)"), col("numeric(10,2)"), warns}, // 8 digits before the point hold 6; rounded
		{col("numeric(10,4)"), col("numeric(12,2)"), warns}, // rounded
		{col("numeric"), col("numeric(10,2)"), warns},
		{col("numeric(10,2)"), col("numeric"), ok},
		{col("bigint"), col("integer"), fails},
		{col("integer"), col("bigint"), ok},
		{col("smallint"), col("numeric"), ok},
		{col("integer"), col("numeric(5,0)"), warns},
		{col("timestamp(6) without time zone"), col("timestamp(3) without time zone"), warns},
		{col("timestamp without time zone"), col("timestamp(3) without time zone"), warns},
		{col("timestamp(3) without time zone"), col("timestamp without time zone"), ok},
		{col("mood", "sad", "ok", "happy"), col("mood", "sad", "ok", "happy", "elated"), ok},
		{col("mood", "sad", "ok", "happy"), col("mood", "sad", "ok"), fails},
		{col("mood", "sad"), col("text"), ok},
		{col("text"), col("integer"), warns},
		{col("jsonb"), col("json"), warns},
	}
	for _, tt := range tests {
		f := Compare(tt.pub, tt.tgt)
		got := ok
		switch {
		case f.Fails:
			got = fails
		case f.Warns:
			got = warns
		}
		if got != tt.want {
			t.Errorf("Compare(%s %v, %s %v) = %+v, want %d (0 ok, 1 warns, 2 fails)", tt.pub.Type, tt.pub.Enum, tt.tgt.Type, tt.tgt.Enum, f, tt.want)
		}
		if (f.Fails || f.Warns) && f.Why == "" {
			t.Errorf("Compare(%s, %s): no reason given", tt.pub.Type, tt.tgt.Type)
		}
	}
}

// TestReportStatus: a check's status is its weightiest problem's: a
// failure over a check that could not complete over a warning.
func TestReportStatus(t *testing.T) {
	f, w, u := fail("", "f", ""), warn("", "w", ""), Problem{What: "u", Unfinished: true}
	tests := []struct {
		problems []Problem
		want     Status
	}{
		{nil, OK},
		{[]Problem{w}, Warning},
		{[]Problem{w, f}, Failed},
		{[]Problem{f, w}, Failed},
		{[]Problem{u, w}, Skipped},
		{[]Problem{w, u}, Skipped},
		{[]Problem{u, f}, Failed},
		{[]Problem{f, u}, Failed},
	}
	for _, tt := range tests {
		var r Report
		r.add("target", "c", "", tt.problems...)
		if got := r.Results[0].Status; got != tt.want {
			t.Errorf("problems %+v: status %s, want %s", tt.problems, got, tt.want)
		}
	}
	var r Report
	r.add("publisher", "a", "")
	r.unreachable("target")
	if r.Passed() || len(r.Unreached) != 1 || r.Unreached[0] != "target" {
		t.Errorf("a report with an unreached side: passed %v, unreached %v", r.Passed(), r.Unreached)
	}
}
