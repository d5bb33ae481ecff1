package conflict

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		err     string // part of the error, "" for none
		table   string
		typ     Type
		want    Policy
		needsTS string
	}{
		{in: "", table: "public.t", typ: InsertExists, want: Error},
		{in: "", table: "public.t", typ: UpdateMissing, want: Skip},
		{in: "", table: "public.t", typ: UpdateOriginDiffers, want: ApplyRemote},
		{in: "insert_exists=apply_remote", table: "public.t", typ: InsertExists, want: ApplyRemote},
		{in: "insert_exists=apply_remote, t:insert_exists=keep_local", table: "public.t", typ: InsertExists, want: KeepLocal},
		{in: "insert_exists=apply_remote, s.t:insert_exists=keep_local", table: "public.t", typ: InsertExists, want: ApplyRemote},
		{in: " update_origin_differs = last_update_wins ", table: "x.y", typ: UpdateOriginDiffers, want: LastUpdateWins, needsTS: "update_origin_differs=last_update_wins"},
		{in: "a.b:delete_origin_differs=first_update_wins", table: "a.b", typ: DeleteOriginDiffers, want: FirstUpdateWins, needsTS: "a.b:delete_origin_differs=first_update_wins"},
		{in: "delete_missing=error,delete_missing=skip", table: "a.b", typ: DeleteMissing, want: Skip},
		{in: "insert_exist=error", err: `unknown conflict type "insert_exist"`},
		{in: "insert_exists=overwrite", err: `unknown policy "overwrite"`},
		{in: "delete_missing=apply_remote", err: "apply_remote does not apply to delete_missing"},
		{in: "update_exists", err: "write type=policy"},
		{in: ":insert_exists=skip", err: "the table before ':' is empty"},
	}
	for _, tc := range tests {
		r, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q): error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := r.For(tc.table, tc.typ); got != tc.want {
			t.Errorf("Parse(%q).For(%s, %s) = %s, want %s", tc.in, tc.table, tc.typ, got, tc.want)
		}
		if got := r.NeedsCommitTimestamps(); got != tc.needsTS {
			t.Errorf("Parse(%q).NeedsCommitTimestamps() = %q, want %q", tc.in, got, tc.needsTS)
		}
		// The setting's own form reads back the same.
		r2, err := Parse(r.String())
		if err != nil || r2.String() != r.String() {
			t.Errorf("Parse(%q): String() %q does not read back (%v)", tc.in, r.String(), err)
		}
	}
	for _, ty := range Types {
		if _, ok := allowed[ty]; !ok {
			t.Errorf("type %s has no policies", ty)
		}
	}
}
