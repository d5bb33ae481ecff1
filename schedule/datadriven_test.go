package schedule

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScripts runs the scripts in testdata/: each adds units with keys to
// a new Scheduler, starts and completes them, and prints what may start
// after each step, so that a script reads as the schedule it states. The
// expected outputs were written from the rule in the package comment, not
// from the code's answers. Commands:
//
//	add [barrier] [keys=(k1, k2)]  add the next unit; prints what it waits for
//	start                          Ready: start every unit that may start
//	next                           Next: start the lowest unit that may start
//	done <id>...                   Done, in the order given
//	joinable <first> <last>        Joinable(first, last)
//	extend <first> <last>          Extend(first, last)
//	may-commit <id>...             which of the units MayCommit
//	state                          in flight, keys remembered, oldest
//	put <id>...                    report units to an InOrder, in the order given
//
// Every command but put also prints the units that may start, without
// starting them. A key is named table/value (MakeKey(table, value)) or
// table alone (MakeKey(table): the whole table).
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		s := New()
		in := NewInOrder[ID]()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var out []string
			switch d.Cmd {
			case "add":
				var keys []Key
				barrier := false
				for _, a := range d.CmdArgs {
					switch a.Key {
					case "barrier":
						barrier = true
					case "keys":
						for _, k := range a.Vals {
							keys = append(keys, scriptKey(k))
						}
					default:
						d.Fatalf(t, "add: no argument %s", a.Key)
					}
				}
				id, deps := s.Add(keys, barrier)
				out = append(out, fmt.Sprintf("unit %d waits for %s", id, ids(slices.Sorted(slices.Values(deps)))))
			case "start":
				out = append(out, "started "+ids(s.Ready()))
			case "next":
				if id, ok := s.Next(); ok {
					out = append(out, fmt.Sprintf("started %d", id))
				} else {
					out = append(out, "started nothing")
				}
			case "done":
				for _, id := range scriptIDs(t, d) {
					if err := s.Done(id); err != nil {
						out = append(out, err.Error())
					}
				}
			case "joinable", "extend":
				args := scriptIDs(t, d)
				if len(args) != 2 {
					d.Fatalf(t, "%s: want first and last", d.Cmd)
				}
				if d.Cmd == "joinable" {
					next, chained, ok := s.Joinable(args[0], args[1])
					switch {
					case !ok:
						out = append(out, "joinable: no")
					case chained:
						out = append(out, fmt.Sprintf("joinable: %d, waiting for the batch", next))
					default:
						out = append(out, fmt.Sprintf("joinable: %d, ready", next))
					}
				} else if next, ok := s.Extend(args[0], args[1]); ok {
					out = append(out, fmt.Sprintf("took %d", next))
				} else {
					out = append(out, "took nothing")
				}
			case "may-commit":
				var may []ID
				for _, id := range scriptIDs(t, d) {
					if s.MayCommit(id) {
						may = append(may, id)
					}
				}
				out = append(out, "may commit "+ids(may))
			case "state":
				out = append(out, fmt.Sprintf("in flight %d, keys %d, oldest %d", s.InFlight(), s.Keys(), s.Oldest()))
			case "put":
				for _, id := range scriptIDs(t, d) {
					out = append(out, fmt.Sprintf("put %d: released %s, held back %d", id, ids(in.Put(id, id, nil)), in.Waiting()))
				}
				return strings.Join(out, "\n") + "\n"
			default:
				d.Fatalf(t, "no command %s", d.Cmd)
			}
			out = append(out, "may start "+ids(s.ready))
			return strings.Join(out, "\n") + "\n"
		})
	})
}

// scriptKey makes the key a script names table/value, or table alone.
func scriptKey(name string) Key {
	table, value, ok := strings.Cut(name, "/")
	if !ok {
		return MakeKey(table)
	}
	return MakeKey(table, []byte(value))
}

// scriptIDs reads a command's arguments as unit IDs.
func scriptIDs(t *testing.T, d *datadriven.TestData) []ID {
	var out []ID
	for _, a := range d.CmdArgs {
		n, err := strconv.ParseUint(a.Key, 10, 64)
		if err != nil || len(a.Vals) > 0 {
			d.Fatalf(t, "%s: %s is not a unit", d.Cmd, a)
		}
		out = append(out, ID(n))
	}
	return out
}

// ids prints units as a script reads them: "1 2 3", or "nothing".
func ids(l []ID) string {
	if len(l) == 0 {
		return "nothing"
	}
	s := make([]string, len(l))
	for i, id := range l {
		s[i] = strconv.FormatUint(uint64(id), 10)
	}
	return strings.Join(s, " ")
}
