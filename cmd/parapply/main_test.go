package main

import (
	"io"
	"strings"
	"testing"
)

// TestEveryListedCommandDispatches: each command the usage lists is a
// command type main dispatches to, and a name it does not list is none.
func TestEveryListedCommandDispatches(t *testing.T) {
	var names []string
	for _, line := range strings.Split(usage, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "parapply" {
			names = append(names, f[1])
		}
	}
	if len(names) < 10 {
		t.Fatalf("the usage lists %d commands (%v): its lines no longer read as \"parapply NAME ...\"", len(names), names)
	}
	for _, name := range append(names, "--version") {
		if newCommand(name, io.Discard) == nil {
			t.Errorf("parapply %s is in the usage but no command type runs it", name)
		}
	}
	for _, name := range []string{"", "help", "runn", "Run"} {
		if cmd := newCommand(name, io.Discard); cmd != nil {
			t.Errorf("newCommand(%q) = %T, want none", name, cmd)
		}
	}
}
