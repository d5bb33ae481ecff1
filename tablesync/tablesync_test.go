package tablesync

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestPending: the tables a start copies are those not recorded as done:
// never begun, or left copying by an interrupted copy.
func TestPending(t *testing.T) {
	a, b, c := Table{Schema: "public", Name: "a"}, Table{Schema: "public", Name: "b"}, Table{Schema: "s", Name: "C"}
	tests := []struct {
		name  string
		state map[string]State
		want  []Table
	}{
		{"first start", nil, []Table{a, b, c}},
		{"all done", map[string]State{`"public"."a"`: {State: "done"}, `"public"."b"`: {State: "done"}, `"s"."C"`: {State: "done"}}, nil},
		{"one done, one interrupted, one new", map[string]State{`"public"."a"`: {State: "done"}, `"public"."b"`: {State: "copying"}}, []Table{b, c}},
		{"state of another table", map[string]State{`"public"."x"`: {State: "done"}, `"s"."c"`: {State: "done"}}, []Table{a, b, c}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Pending([]Table{a, b, c}, tt.state)
			if !slices.EqualFunc(got, tt.want, func(x, y Table) bool { return x.QualifiedName() == y.QualifiedName() }) {
				t.Errorf("Pending = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCopyColumns: which columns the copy of a table takes and in what
// format: the published ones (every column but the generated ones, by
// name, without a column list), in binary only when every type is the
// same built-in type on both sides, with binary send and receive
// functions; a column missing on either side, or generated on the target,
// refuses the copy naming the table and column.
func TestCopyColumns(t *testing.T) {
	plain := func(typ string) column { return column{typ: typ, binary: true} }
	gen := func(typ string) column { return column{typ: typ, generated: true, binary: true} }
	nobinary := column{typ: "aclitem"}
	src := map[string]column{
		"id": plain("integer"), "Name": plain("text"), "total": gen("numeric"),
		"mood": plain("user:mood"), "acl": nobinary, "moods": plain("user:mood[]"), "at": plain("timestamp with time zone"),
	}
	tests := []struct {
		name    string
		listed  []string
		dst     map[string]column
		want    string // quoted columns, comma-separated
		format  string
		wantErr string
	}{
		{"same built-in types", []string{"id", "Name"}, map[string]column{"id": plain("integer"), "Name": plain("text")}, `"id", "Name"`, "binary", ""},
		{"listed order kept", []string{"Name", "id"}, map[string]column{"id": plain("integer"), "Name": plain("text")}, `"Name", "id"`, "binary", ""},
		{"a type differs", []string{"id", "Name"}, map[string]column{"id": plain("bigint"), "Name": plain("text")}, `"id", "Name"`, "text", ""},
		{"a typmod differs", []string{"at"}, map[string]column{"at": plain("timestamp without time zone")}, `"at"`, "text", ""},
		{"a user type, the same on both", []string{"id", "mood"}, map[string]column{"id": plain("integer"), "mood": plain("user:mood")}, `"id", "mood"`, "text", ""},
		{"an array of a user type", []string{"moods"}, map[string]column{"moods": plain("user:mood[]")}, `"moods"`, "text", ""},
		{"a type without binary functions", []string{"id", "acl"}, map[string]column{"id": plain("integer"), "acl": nobinary}, `"id", "acl"`, "text", ""},
		{"a generated column published", []string{"id", "total"}, map[string]column{"id": plain("integer"), "total": plain("numeric")}, `"id", "total"`, "binary", ""},
		{"no list: every column but generated ones, by name", nil,
			map[string]column{"id": plain("integer"), "Name": plain("text"), "total": gen("numeric"), "mood": plain("user:mood"), "moods": plain("user:mood[]"), "at": plain("timestamp with time zone"), "extra": plain("text"), "acl": nobinary},
			`"Name", "acl", "at", "id", "mood", "moods"`, "text", ""},
		{"extra target columns are left alone", []string{"id"}, map[string]column{"id": plain("integer"), "note": plain("text")}, `"id"`, "binary", ""},
		{"missing on the source", []string{"id", "gone"}, map[string]column{"id": plain("integer"), "gone": plain("text")}, "", "", `published column "gone" of "public"."t" is not on the source (dropped since the start?); start again`},
		{"missing on the target", []string{"id", "Name"}, map[string]column{"id": plain("integer")}, "", "", `column "Name" of "public"."t" is missing on the target`},
		{"generated on the target", []string{"id", "total"}, map[string]column{"id": plain("integer"), "total": gen("numeric")}, "", "", `column "total" of published table "public"."t" is generated on the target`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cols, format, err := copyColumns(`"public"."t"`, tt.listed, src, tt.dst)
			if !errorAsWanted(t, "copyColumns", err, tt.wantErr) {
				return
			}
			if got := strings.Join(cols, ", "); got != tt.want || format != tt.format {
				t.Errorf("copyColumns = %s (%s), want %s (%s)", got, format, tt.want, tt.format)
			}
		})
	}
}

// TestSplit: a table is one COPY below two chunkPages; above, ranges of
// equal pages, about four per worker at most, that cover every page once,
// the last open-ended (pages added since relpages was read).
func TestSplit(t *testing.T) {
	tests := []struct {
		pages   int64
		workers int
		want    string // the ranges, lo-hi ("-" for none, hi "" for open)
	}{
		{0, 2, "-"},
		{1, 2, "-"},
		{2*chunkPages - 1, 2, "-"},
		{2 * chunkPages, 2, "0-2048 2048-"},
		{2*chunkPages + 1, 2, "0-2049 2049-"},
		{3 * chunkPages, 4, "0-2048 2048-4096 4096-"},
		{7 * chunkPages, 2, "0-2048 2048-4096 4096-6144 6144-8192 8192-10240 10240-12288 12288-"},
		{100 * chunkPages, 2, "0-25600 25600-51200 51200-76800 76800-102400 102400-128000 128000-153600 153600-179200 179200-"},
		{100 * chunkPages, 1, "0-51200 51200-102400 102400-153600 153600-"},
		{10*chunkPages + 5, 8, "0-2049 2049-4098 4098-6147 6147-8196 8196-10245 10245-12294 12294-14343 14343-16392 16392-18441 18441-"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d pages, %d workers", tt.pages, tt.workers), func(t *testing.T) {
			j := &tableJob{pages: tt.pages}
			cs := split(j, tt.workers)
			var got []string
			next := int64(0)
			for i, c := range cs {
				if c.t != j {
					t.Fatalf("chunk %d is not of the table", i)
				}
				if c.lo < 0 {
					got = append(got, "-")
					continue
				}
				if c.lo != next {
					t.Errorf("chunk %d starts at page %d, want %d (contiguous)", i, c.lo, next)
				}
				next = c.hi
				hi := ""
				if c.hi >= 0 {
					hi = fmt.Sprint(c.hi)
				} else if i != len(cs)-1 {
					t.Errorf("chunk %d is open-ended but not the last", i)
				}
				got = append(got, fmt.Sprintf("%d-%s", c.lo, hi))
			}
			if s := strings.Join(got, " "); s != tt.want {
				t.Errorf("split = %s, want %s", s, tt.want)
			}
			if len(cs) > max(1, 4*tt.workers) {
				t.Errorf("%d chunks for %d workers, want at most %d", len(cs), tt.workers, 4*tt.workers)
			}
		})
	}
}

// TestChunksOf: the copy's COPYs, biggest table first, each table's chunks
// together and counted on it.
func TestChunksOf(t *testing.T) {
	small := &tableJob{Table: Table{Schema: "s", Name: "small"}, pages: 10}
	big := &tableJob{Table: Table{Schema: "s", Name: "big"}, pages: 4 * chunkPages}
	empty := &tableJob{Table: Table{Schema: "s", Name: "empty"}}
	mid := &tableJob{Table: Table{Schema: "s", Name: "mid"}, pages: 2 * chunkPages}
	jobs := []*tableJob{small, big, empty, mid}
	cs := chunksOf(jobs, 1)
	var got []string
	for _, c := range cs {
		got = append(got, fmt.Sprintf("%s:%d", c.t.Name, c.lo))
	}
	want := "big:0 big:2048 big:4096 big:6144 mid:0 mid:2048 small:-1 empty:-1"
	if s := strings.Join(got, " "); s != want {
		t.Errorf("chunksOf = %s, want %s", s, want)
	}
	for _, c := range []struct {
		j *tableJob
		n int
	}{{big, 4}, {mid, 2}, {small, 1}, {empty, 1}} {
		if c.j.chunks != c.n || c.j.left.Load() != int64(c.n) {
			t.Errorf("%s: %d chunks, %d left; want %d", c.j.Name, c.j.chunks, c.j.left.Load(), c.n)
		}
	}
}

// TestChunkSQL: each chunk's COPY on the source reads the published
// columns of its pages (ONLY for a plain table, a partitioned root
// through its partitions), filtered by the row filter, in the table's
// format; the COPY on the target names the same columns (none for a table
// without columns).
func TestChunkSQL(t *testing.T) {
	tests := []struct {
		name           string
		job            *tableJob
		lo, hi         int64
		source, target string
	}{
		{"whole plain table", &tableJob{Table: Table{Schema: "public", Name: "t"}, format: "binary", only: true, sourceSel: `"a", "b"`, targetCols: `"a", "b"`}, -1, -1,
			`COPY (SELECT "a", "b" FROM ONLY "public"."t") TO STDOUT (FORMAT binary)`,
			`COPY "public"."t" ("a", "b") FROM STDIN (FORMAT binary)`},
		{"partitioned root, row filter", &tableJob{Table: Table{Schema: "public", Name: "p", RowFilter: "a > 1 OR b IS NULL"}, format: "text", sourceSel: `"a", "b"`, targetCols: `"a", "b"`}, -1, -1,
			`COPY (SELECT "a", "b" FROM "public"."p" WHERE (a > 1 OR b IS NULL)) TO STDOUT (FORMAT text)`,
			`COPY "public"."p" ("a", "b") FROM STDIN (FORMAT text)`},
		{"a middle range", &tableJob{Table: Table{Schema: "public", Name: "t"}, format: "binary", only: true, sourceSel: `"a"`, targetCols: `"a"`}, 2048, 4096,
			`COPY (SELECT "a" FROM ONLY "public"."t" WHERE ctid >= '(2048,0)'::tid AND ctid < '(4096,0)'::tid) TO STDOUT (FORMAT binary)`,
			`COPY "public"."t" ("a") FROM STDIN (FORMAT binary)`},
		{"the last range, with a row filter", &tableJob{Table: Table{Schema: "public", Name: "t", RowFilter: "a > 1"}, format: "text", only: true, sourceSel: `"a"`, targetCols: `"a"`}, 4096, -1,
			`COPY (SELECT "a" FROM ONLY "public"."t" WHERE (a > 1) AND ctid >= '(4096,0)'::tid) TO STDOUT (FORMAT text)`,
			`COPY "public"."t" ("a") FROM STDIN (FORMAT text)`},
		{"no columns", &tableJob{Table: Table{Schema: "public", Name: "none"}, format: "binary", only: true}, -1, -1,
			`COPY (SELECT  FROM ONLY "public"."none") TO STDOUT (FORMAT binary)`,
			`COPY "public"."none" FROM STDIN (FORMAT binary)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := chunk{t: tt.job, lo: tt.lo, hi: tt.hi}
			if got := c.sourceSQL(tt.job.format); got != tt.source {
				t.Errorf("sourceSQL = %s\nwant          %s", got, tt.source)
			}
			if got := c.targetSQL(tt.job.format); got != tt.target {
				t.Errorf("targetSQL = %s\nwant          %s", got, tt.target)
			}
		})
	}
}

// TestDropsIndexes: the copy drops a table's indexes only when asked, the
// table is empty, and no interrupted copy dropped them already.
func TestDropsIndexes(t *testing.T) {
	for _, tt := range []struct {
		saved, deferIndexes, kept bool
		want                      bool
	}{
		{false, true, false, true},
		{false, false, false, false},
		{false, true, true, false},
		{true, true, false, false},
		{true, false, false, false},
	} {
		if got := dropsIndexes(tt.saved, tt.deferIndexes, tt.kept); got != tt.want {
			t.Errorf("dropsIndexes(saved %v, defer %v, kept rows %v) = %v, want %v", tt.saved, tt.deferIndexes, tt.kept, got, tt.want)
		}
	}
}

// TestApplyPolicy: what existing_data does with each table about to be
// copied, by whether it holds rows and whether an interrupted copy left
// it: refused (every such table named), kept, or emptied (an interrupted
// copy's whatever the policy, and not as the user's rows).
func TestApplyPolicy(t *testing.T) {
	a, b, c := Table{Schema: "public", Name: "a"}, Table{Schema: "public", Name: "b"}, Table{Schema: "public", Name: "c"}
	qa, qb, qc := a.QualifiedName(), b.QualifiedName(), c.QualifiedName()
	copying := map[string]State{qb: {State: "copying"}}
	tests := []struct {
		name     string
		existing ExistingData
		state    map[string]State
		has      map[string]bool
		// want: the tables to empty (+ when as the policy's), the held
		// ones, the interrupted ones; or the error.
		empty, held, interrupted string
		wantErr                  string
	}{
		{"empty tables, error", ExistingError, nil, nil, "", "", "", ""},
		{"default is error", "", nil, map[string]bool{qa: true}, "", "", "", `target table "public"."a" already holds rows; empty it, or set existing_data = truncate (replace them) or keep (copy on top of them), or copy_data = off if it is already in sync`},
		{"error names every table with rows", ExistingError, nil, map[string]bool{qa: true, qc: true}, "", "", "", `target tables "public"."a", "public"."c" already hold rows; empty them, or set existing_data = truncate`},
		{"error, an interrupted copy's rows are not refused", ExistingError, copying, map[string]bool{qb: true}, qb, "", qb, ""},
		{"error, an interrupted copy's empty table is emptied too", ExistingError, copying, nil, qb, "", "", ""},
		{"error, a done table is not special", ExistingError, map[string]State{qa: {State: "done"}}, map[string]bool{qa: true}, "", "", "", `target table "public"."a" already holds rows`},
		{"truncate empties every table as the policy's", ExistingTruncate, nil, map[string]bool{qa: true}, "+" + qa + " +" + qb + " +" + qc, qa, "", ""},
		{"truncate, an interrupted copy's as its own", ExistingTruncate, copying, map[string]bool{qb: true}, "+" + qa + " " + qb + " +" + qc, "", qb, ""},
		{"keep holds tables with rows, empties nothing", ExistingKeep, nil, map[string]bool{qa: true, qc: true}, "", qa + " " + qc, "", ""},
		{"keep, an interrupted copy's is emptied", ExistingKeep, copying, map[string]bool{qa: true, qb: true}, qb, qa, qb, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, cands, err := applyPolicy(tt.existing, []Table{a, b, c}, tt.state, tt.has)
			if !errorAsWanted(t, "applyPolicy", err, tt.wantErr) {
				return
			}
			var empty, held []string
			for _, c := range cands {
				if c.policy {
					empty = append(empty, "+"+c.name)
				} else {
					empty = append(empty, c.name)
				}
			}
			for _, x := range []Table{a, b, c} {
				if ex.held[x.QualifiedName()] {
					held = append(held, x.QualifiedName())
				}
			}
			if got := strings.Join(empty, " "); got != tt.empty {
				t.Errorf("emptied %s, want %s", got, tt.empty)
			}
			if got := strings.Join(held, " "); got != tt.held {
				t.Errorf("held %s, want %s", got, tt.held)
			}
			if got := strings.Join(ex.interrupted, " "); got != tt.interrupted {
				t.Errorf("interrupted %s, want %s", got, tt.interrupted)
			}
		})
	}
}

// TestSplitEmptying: the tables to empty go in one TRUNCATE, except those
// a table outside it references by a foreign key (following the
// references: a table deleted from is outside too), which are deleted
// from when the rows are parapply's own and refuse the copy when they are
// the user's; ONLY for a table that is not partitioned.
func TestSplitEmptying(t *testing.T) {
	type cand struct {
		name        string
		policy      bool
		partitioned bool
		rels        []uint32
	}
	parent := cand{name: `"s"."parent"`, rels: []uint32{1}}
	child := cand{name: `"s"."child"`, rels: []uint32{2}}
	grandchild := cand{name: `"s"."grandchild"`, rels: []uint32{3}}
	root := cand{name: `"s"."root"`, partitioned: true, rels: []uint32{10, 11, 12}}
	policy := func(c cand) cand { c.policy = true; return c }
	fk := func(name string, from, to uint32) foreignKey {
		return foreignKey{name: name, from: fmt.Sprintf(`"s"."r%d"`, from), conrel: from, toRel: to}
	}
	tests := []struct {
		name          string
		cands         []cand
		fks           []foreignKey
		truncate, del string
		wantErr       string
	}{
		{"no foreign keys", []cand{parent, child}, nil, `ONLY "s"."parent", ONLY "s"."child"`, "", ""},
		{"parent and child together", []cand{parent, child}, []foreignKey{fk("child_fk", 2, 1)}, `ONLY "s"."parent", ONLY "s"."child"`, "", ""},
		{"a self reference", []cand{parent}, []foreignKey{fk("self_fk", 1, 1)}, `ONLY "s"."parent"`, "", ""},
		{"referenced from outside, our rows: deleted", []cand{parent}, []foreignKey{fk("out_fk", 99, 1)}, "", `ONLY "s"."parent"`, ""},
		{"referenced from outside, the user's rows: refused", []cand{policy(parent), policy(child)}, []foreignKey{fk("child_fk", 2, 1), fk("out_fk", 99, 1)}, "", "",
			`existing_data = truncate would empty target table "s"."parent", but foreign key out_fk of table "s"."r99", which the copy does not fill, references it: a TRUNCATE would have to empty "s"."r99" too, and nothing was truncated; empty the tables yourself (TRUNCATE "s"."parent", "s"."r99") or drop the foreign key, then start again`},
		{"deleted from is outside: the chain follows", []cand{parent, child, grandchild}, []foreignKey{fk("child_fk", 2, 1), fk("grand_fk", 3, 2), fk("out_fk", 99, 3)},
			"", `ONLY "s"."parent", ONLY "s"."child", ONLY "s"."grandchild"`, ""},
		{"the chain stops where nothing outside references", []cand{parent, child, grandchild}, []foreignKey{fk("child_fk", 2, 1), fk("grand_fk", 3, 2), fk("out_fk", 99, 2)},
			`ONLY "s"."grandchild"`, `ONLY "s"."parent", ONLY "s"."child"`, ""},
		{"the chain reaches the user's rows, referenced only by a table emptied too: deleted", []cand{policy(parent), child}, []foreignKey{fk("child_fk", 2, 1), fk("out_fk", 99, 2)},
			"", `ONLY "s"."parent", ONLY "s"."child"`, ""},
		{"the user's rows, parent and child: truncated together", []cand{policy(parent), policy(child)}, []foreignKey{fk("child_fk", 2, 1)}, `ONLY "s"."parent", ONLY "s"."child"`, "", ""},
		{"a partitioned table, referenced by its partition's table", []cand{root, child}, []foreignKey{fk("part_fk", 2, 11)}, `"s"."root", ONLY "s"."child"`, "", ""},
		{"a partitioned table referenced from outside", []cand{root}, []foreignKey{fk("out_fk", 98, 12)}, "", `"s"."root"`, ""},
		{"a partition referencing another of its tree", []cand{root}, []foreignKey{fk("tree_fk", 11, 12)}, `"s"."root"`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cands []emptyCandidate
			var partitioned []bool
			owner := map[uint32]int{}
			for i, c := range tt.cands {
				cands = append(cands, emptyCandidate{name: c.name, policy: c.policy})
				partitioned = append(partitioned, c.partitioned)
				for _, r := range c.rels {
					owner[r] = i
				}
			}
			truncate, del, err := splitEmptying(cands, partitioned, owner, tt.fks)
			if !errorAsWanted(t, "splitEmptying", err, tt.wantErr) {
				return
			}
			if got := strings.Join(truncate, ", "); got != tt.truncate {
				t.Errorf("truncate %s, want %s", got, tt.truncate)
			}
			if got := strings.Join(del, ", "); got != tt.del {
				t.Errorf("delete from %s, want %s", got, tt.del)
			}
		})
	}
}

// errorAsWanted fails the test unless err is as wanted (an error holding
// want, or none when want is ""), and tells whether the case goes on (no
// error was wanted).
func errorAsWanted(t *testing.T, what string, err error, want string) bool {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return true
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v, want an error with %q", what, err, want)
	}
	return false
}
