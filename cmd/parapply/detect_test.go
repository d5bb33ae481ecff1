package main

import (
	"strings"
	"testing"
)

// TestDetectConflictsSetting: detect_conflicts left at its default (auto)
// is told from one set on by the user, which alone is refused on a Citus
// coordinator.
func TestDetectConflictsSetting(t *testing.T) {
	for _, c := range []struct {
		args          []string
		detect, asked bool
		err           string
	}{
		{nil, true, false, ""},
		{[]string{"--detect-conflicts", "auto"}, true, false, ""},
		{[]string{"--detect-conflicts", "on"}, true, true, ""},
		{[]string{"--detect-conflicts", "off"}, false, true, ""},
		{[]string{"--detect-conflicts", "maybe"}, false, false, `detect_conflicts = "maybe" is not valid: choose auto, on or off`},
	} {
		clearEnv(t)
		cf, err := loadConfig(newFlagSet(), c.args)
		if err != nil {
			t.Fatal(err)
		}
		o, err := cf.options("detect_conflicts")
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.args, err, c.err)
			}
		case err != nil:
			t.Errorf("%q: %v", c.args, err)
		case o.DetectConflicts != c.detect || o.DetectConflictsAsked != c.asked:
			t.Errorf("%q: detect %v asked %v, want %v %v", c.args, o.DetectConflicts, o.DetectConflictsAsked, c.detect, c.asked)
		}
	}
}
