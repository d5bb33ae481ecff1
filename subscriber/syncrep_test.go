package subscriber

import "testing"

func TestNamedSynchronous(t *testing.T) {
	for _, c := range []struct {
		setting, app string
		want         bool
	}{
		{"", "parapply", false},
		{"parapply", "parapply", true},
		{"PARAPPLY", "parapply", true},
		{"*", "parapply", true},
		{"s1, parapply", "parapply", true},
		{"s1, s2", "parapply", false},
		{"FIRST 1 (s1, parapply)", "parapply", true},
		{"first 2 (s1,s2)", "parapply", false},
		{"ANY 1 (\"parapply\", s2)", "parapply", true},
		{"2 (parapply, s2)", "parapply", true},
		{`"para, apply"`, "para, apply", true},
		{`"para, apply"`, "para", false},
		{`"say ""hi"""`, `say "hi"`, true},
		{"parapply test", "parapply test", true},
		{"parapply", "", false},
	} {
		if got := namedSynchronous(c.setting, c.app); got != c.want {
			t.Errorf("namedSynchronous(%q, %q) = %v, want %v", c.setting, c.app, got, c.want)
		}
	}
}
