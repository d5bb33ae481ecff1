package main

import (
	"slices"
	"testing"
)

// TestRoleList: --grant-to is repeatable and takes comma-separated lists.
func TestRoleList(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"repl"}, []string{"repl"}},
		{[]string{"repl,audit"}, []string{"repl", "audit"}},
		{[]string{"repl", " audit , other "}, []string{"repl", "audit", "other"}},
		{[]string{"", ","}, nil},
	} {
		var l roleList
		for _, a := range tc.args {
			if err := l.Set(a); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(l, tc.want) {
			t.Errorf("--grant-to %q: %q, want %q", tc.args, l, tc.want)
		}
	}
}
