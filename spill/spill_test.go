package spill

import (
	"fmt"
	"os"
	"slices"
	"testing"
)

func TestReplaySkipsCutRecords(t *testing.T) {
	for _, c := range []struct {
		name string
		ops  []string // "a:x" appends x; "cut:x" cuts from the offset of record x
		want []string
	}{
		{"no cuts", []string{"a:1", "a:2", "a:3"}, []string{"1", "2", "3"}},
		{"tail cut", []string{"a:1", "a:2", "a:3", "cut:2"}, []string{"1"}},
		{"cut then more", []string{"a:1", "a:2", "cut:2", "a:3", "a:4"}, []string{"1", "3", "4"}},
		{"nested cuts", []string{"a:1", "a:2", "a:3", "cut:3", "a:4", "cut:2", "a:5"}, []string{"1", "5"}},
		{"two separate cuts", []string{"a:1", "a:2", "cut:2", "a:3", "a:4", "cut:4", "a:5"}, []string{"1", "3", "5"}},
		{"cut everything", []string{"a:1", "a:2", "cut:1"}, nil},
		{"cut at end is nothing", []string{"a:1"}, []string{"1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := Create(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			offs := map[string]int64{}
			for _, op := range c.ops {
				var kind, v string
				_, _ = fmt.Sscanf(op, "%1s", &kind)
				if op[:2] == "a:" {
					v = op[2:]
					off, err := l.Append([]byte(v))
					if err != nil {
						t.Fatal(err)
					}
					offs[v] = off
				} else {
					l.Cut(offs[op[4:]])
				}
			}
			var got []string
			if err := l.Replay(func(rec []byte) error { got = append(got, string(rec)); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("replayed %v, want %v", got, c.want)
			}
		})
	}
}

func TestReadRangeAndClose(t *testing.T) {
	dir := t.TempDir()
	l, err := Create(dir)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 300<<10) // larger than the buffers
	for i := range big {
		big[i] = byte(i)
	}
	o1, _ := l.Append([]byte("first"))
	o2, _ := l.Append(big)
	o3, _ := l.Append(nil)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	var offs []int64
	var lens []int
	if err := l.Read(o2, l.Size(), func(off int64, rec []byte) error {
		offs, lens = append(offs, off), append(lens, len(rec))
		if off == o2 && !slices.Equal(rec, big) {
			t.Error("big record changed on the way")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(offs, []int64{o2, o3}) || !slices.Equal(lens, []int{len(big), 0}) || o1 != 0 {
		t.Errorf("offsets %v lengths %v", offs, lens)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("spill file left behind: %v", ents)
	}
}
