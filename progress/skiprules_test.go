package progress

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgtest"
)

// skipOp is one step of a TestSkipRules case on its slot.
type skipOp struct {
	op     string       // skip, applied, advance, done, read, list
	lsn    parapply.LSN // the request's, a range's first, the position moved to or read at
	last   parapply.LSN // a range's last (applied)
	reason string       // skip
	want   string       // skip: error text ("" none); read, list: the result, formatted
}

// TestSkipRules: which source transactions a skip request may name and
// what becomes of it. SetSkip refuses a slot the target has no progress
// row of, and a transaction already applied (at or behind the progress
// row, or inside a group committed ahead of it, both ends included);
// requests are a set per slot (the same LSN twice is one request, keeping
// its reason unless a new one is given); ReadSkips returns the pending
// ones in commit order and removes (returning them as passed) those at or
// behind the position read at, skipped or not; SkipDone marks only the
// slot's named, pending requests; ListSkips says which are skipped and
// which the target has passed. Every case has a slot of its own in one
// database, and no case's steps change another's requests.
func TestSkipRules(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "progress-skiprules", 3*time.Minute)
	conn := pgtest.Connect(ctx, t, srv.DSN("postgres"))

	// Before parapply ever ran here: no parapply.progress.
	if err := SetSkip(ctx, conn, "s", 0x200, ""); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("SetSkip on a target without parapply's tables: %v, want ErrNoSlot", err)
	}
	if l, err := ListSkips(ctx, conn, "s"); err != nil || l != nil {
		t.Fatalf("ListSkips on a target without parapply's tables: %v, %v; want nothing", l, err)
	}

	const applied = "applied already"
	tests := []struct {
		name     string
		progress parapply.LSN // the slot's progress row (0: none)
		ops      []skipOp
	}{
		{"no progress row for the slot", 0, []skipOp{
			{op: "skip", lsn: 0x200, want: ErrNoSlot.Error()},
			{op: "list", want: ""},
		}},
		{"at or behind the progress row", 0x200, []skipOp{
			{op: "skip", lsn: 0x100, want: applied},
			{op: "skip", lsn: 0x200, want: applied},
			{op: "skip", lsn: 0x201},
			{op: "read", lsn: 0x200, want: "pending 0/201; passed "},
		}},
		{"inside a group committed ahead", 0x100, []skipOp{
			{op: "applied", lsn: 0x300, last: 0x400},
			{op: "skip", lsn: 0x300, want: applied},
			{op: "skip", lsn: 0x350, want: applied},
			{op: "skip", lsn: 0x400, want: applied},
			{op: "skip", lsn: 0x2FF},
			{op: "skip", lsn: 0x401},
			{op: "skip", lsn: 0x500},
			{op: "applied", lsn: 0x500, last: 0x500},
			{op: "list", want: "0/2FF, 0/401, 0/500 passed"},
		}},
		{"a set: one request per LSN, its reason kept unless replaced", 0x100, []skipOp{
			{op: "skip", lsn: 0x200, reason: "boom"},
			{op: "skip", lsn: 0x200},
			{op: "skip", lsn: 0x300},
			{op: "skip", lsn: 0x300, reason: "late"},
			{op: "skip", lsn: 0x250},
			{op: "read", lsn: 0x100, want: "pending 0/200 boom, 0/250, 0/300 late; passed "},
			{op: "list", want: "0/200 boom, 0/250, 0/300 late"},
		}},
		{"passed requests go at the next start", 0x100, []skipOp{
			{op: "skip", lsn: 0x200},
			{op: "skip", lsn: 0x300},
			{op: "skip", lsn: 0x400},
			{op: "advance", lsn: 0x300},
			{op: "list", want: "0/200 passed, 0/300 passed, 0/400"},
			{op: "skip", lsn: 0x300, want: applied},
			{op: "read", lsn: 0x300, want: "pending 0/400; passed 0/200, 0/300"},
			{op: "read", lsn: 0x300, want: "pending 0/400; passed "},
			{op: "list", want: "0/400"},
		}},
		{"skipped requests are no longer pending, and go once passed", 0x100, []skipOp{
			{op: "skip", lsn: 0x200, reason: "boom"},
			{op: "skip", lsn: 0x300},
			{op: "skip", lsn: 0x400},
			{op: "done", lsn: 0x300},
			{op: "done", lsn: 0x999},
			{op: "read", lsn: 0x100, want: "pending 0/200 boom, 0/400; passed "},
			{op: "list", want: "0/200 boom, 0/300 skipped, 0/400"},
			{op: "done", lsn: 0x300},
			{op: "advance", lsn: 0x300},
			{op: "list", want: "0/200 boom passed, 0/300 skipped passed, 0/400"},
			{op: "read", lsn: 0x300, want: "pending 0/400; passed 0/200, 0/300"},
		}},
	}
	lists := map[string]string{} // each case's requests as it left them
	for i, tt := range tests {
		slot := fmt.Sprintf("s%d", i)
		t.Run(tt.name, func(t *testing.T) {
			if tt.progress != 0 {
				if _, _, err := start(ctx, conn, slot, "src"); err != nil {
					t.Fatal(err)
				}
				if err := Advance(ctx, conn, slot, tt.progress, tt.progress+8, 1, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			for n, o := range tt.ops {
				got, err := skipStep(ctx, conn, slot, o)
				if err != nil {
					t.Fatalf("step %d (%s %v): %v", n, o.op, o.lsn, err)
				}
				if o.op == "skip" && o.want != "" && !strings.Contains(got, o.want) || o.want == "" && got != "" || o.op != "skip" && got != o.want {
					t.Errorf("step %d (%s %v): %q, want %q", n, o.op, o.lsn, got, o.want)
				}
			}
			got, err := skipStep(ctx, conn, slot, skipOp{op: "list"})
			if err != nil {
				t.Fatal(err)
			}
			lists[slot] = got
		})
	}
	for slot, want := range lists {
		if got, err := skipStep(ctx, conn, slot, skipOp{op: "list"}); err != nil || got != want {
			t.Errorf("slot %s after every case: %q, %v; want %q, as its case left it", slot, got, err, want)
		}
	}
}

// skipStep runs one step on slot and returns its result as the case
// states it: SetSkip's error text; ReadSkips' and ListSkips' results.
func skipStep(ctx context.Context, conn *pgx.Conn, slot string, o skipOp) (string, error) {
	var err error
	switch o.op {
	case "skip":
		if err := SetSkip(ctx, conn, slot, o.lsn, o.reason); err != nil {
			return err.Error(), nil
		}
		return "", nil
	case "applied":
		s := RecordApplied(slot, o.lsn, o.last, o.last+8)
		_, err = conn.Exec(ctx, s.SQL, s.Args...)
	case "advance":
		err = Advance(ctx, conn, slot, o.lsn, o.lsn+8, 1, time.Now())
	case "done":
		s := SkipDone(slot, []parapply.LSN{o.lsn})
		_, err = conn.Exec(ctx, s.SQL, s.Args...)
	case "read":
		pending, passed, err := ReadSkips(ctx, conn, slot, o.lsn)
		var p, d []string
		for _, r := range pending {
			p = append(p, strings.TrimSpace(r.LSN.String()+" "+r.Reason))
		}
		for _, l := range passed {
			d = append(d, l.String())
		}
		return "pending " + strings.Join(p, ", ") + "; passed " + strings.Join(d, ", "), err
	case "list":
		listed, err := ListSkips(ctx, conn, slot)
		var out []string
		for _, r := range listed {
			s := r.LSN.String()
			if r.Reason != "" {
				s += " " + r.Reason
			}
			if !r.SkippedAt.IsZero() {
				s += " skipped"
			}
			if r.Passed {
				s += " passed"
			}
			out = append(out, s)
		}
		return strings.Join(out, ", "), err
	default:
		return "", fmt.Errorf("no step %q", o.op)
	}
	return "", err
}
