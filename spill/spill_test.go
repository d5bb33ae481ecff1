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

// TestReadChunks: records are handed out of chunks the file is read into,
// so those that straddle a chunk's end, and those larger than a chunk, come
// whole; every record kept stays as it was read, and a range that ends
// inside a record is refused, not cut short.
func TestReadChunks(t *testing.T) {
	l, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var want [][]byte
	var offs []int64
	for i := range 3000 {
		n := 97 + i%200 // lengths that do not divide a chunk
		if i%1000 == 999 {
			n = readChunk + 4321 // larger than a chunk
		}
		rec := make([]byte, n)
		for j := range rec {
			rec[j] = byte(i + j)
		}
		off, err := l.Append(rec)
		if err != nil {
			t.Fatal(err)
		}
		want, offs = append(want, rec), append(offs, off)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		from, to int
	}{{"all", 0, len(want)}, {"from the middle", 1234, 2500}, {"one past a large record", 999, 1001}} {
		to := l.Size()
		if tt.to < len(want) {
			to = offs[tt.to]
		}
		var got [][]byte
		var gotOffs []int64
		if err := l.Read(offs[tt.from], to, func(off int64, rec []byte) error {
			got, gotOffs = append(got, rec), append(gotOffs, off)
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !slices.Equal(gotOffs, offs[tt.from:tt.to]) {
			t.Fatalf("%s: offsets %v..., want %v...", tt.name, gotOffs[:min(3, len(gotOffs))], offs[tt.from:tt.from+3])
		}
		for i, rec := range got {
			_ = append(rec, 0xFF) // must not reach the next record
			if !slices.Equal(rec, want[tt.from+i]) {
				t.Fatalf("%s: record %d differs (%d bytes, want %d)", tt.name, tt.from+i, len(rec), len(want[tt.from+i]))
			}
		}
	}
	if err := l.Read(0, offs[1]+10, func(int64, []byte) error { return nil }); err == nil {
		t.Errorf("a range ending inside a record was read without error")
	}
}

// BenchmarkRead reads back a streamed insert's records (about 60 bytes
// each), as an inflight transaction's chunks do.
func BenchmarkRead(b *testing.B) {
	l, err := Create(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rec := make([]byte, 60)
	for range 20000 {
		if _, err := l.Append(rec); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(l.Size())
	for b.Loop() {
		if err := l.Read(0, l.Size(), func(int64, []byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
