package tablesync

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestBatches runs the scripts in testdata/: each "batches" command plans
// the index phase of a table from the saved statements of its input, one
// a line ("batches partitioned" for a partitioned table), and prints its
// batches in order, a step a line: "build" for a statement run beside the
// others of its batch (with "then" what its row is rewritten to), "alone"
// for one run by itself. The expected outputs were written from the rule
// in batches' comment, not from the code's answers.
func TestBatches(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "batches" {
				d.Fatalf(t, "no command %s", d.Cmd)
			}
			j := &tableJob{}
			var ds []deferred
			for i, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
				ds = append(ds, deferred{index: fmt.Sprintf("i%d", i), sql: line, ord: i})
			}
			var out []string
			for k, b := range batches(j, ds, d.HasArg("partitioned")) {
				out = append(out, fmt.Sprintf("batch %d:", k+1))
				for _, s := range b {
					switch {
					case s.j != j:
						d.Fatalf(t, "a step of another table")
					case len(b) == 1 && s.then == "":
						out = append(out, fmt.Sprintf("  alone %s: %s", s.index, s.sql))
					default:
						out = append(out, fmt.Sprintf("  build %s: %s", s.index, s.sql))
					}
					if s.then != "" {
						out = append(out, "    then "+s.then)
					}
				}
			}
			return strings.Join(out, "\n") + "\n"
		})
	})
}

// TestIndexLeft: the index phase's time left is the heap bytes its builds
// still read, at the rate measured (a first guess before any build),
// shared by the workers.
func TestIndexLeft(t *testing.T) {
	for _, c := range []struct {
		name          string
		pending, done int64
		spent         time.Duration
		workers       int
		want          time.Duration
	}{
		{"nothing left", 0, 1 << 30, time.Second, 2, 0},
		{"first guess", 400 << 20, 0, 0, 2, 2 * time.Second},
		{"measured", 300 << 20, 100 << 20, 2 * time.Second, 1, 6 * time.Second},
		{"measured, three workers", 300 << 20, 100 << 20, 2 * time.Second, 3, 2 * time.Second},
		{"no workers said", 100 << 20, 0, 0, 0, time.Second},
	} {
		if got := indexLeft(c.pending, c.done, c.spent, c.workers).Round(time.Millisecond); got != c.want {
			t.Errorf("%s: indexLeft = %s, want %s", c.name, got, c.want)
		}
	}
}
