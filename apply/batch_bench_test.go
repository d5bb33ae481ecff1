package apply

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/parapply/parapply"
)

// updateRows makes n updates of simple (id, value), each of another row,
// in binary form, as a point-update stream brings them.
func updateRows(n int) []parapply.Tuple {
	rows := make([]parapply.Tuple, n)
	for i := range rows {
		id := binary.BigEndian.AppendUint32(nil, uint32(i))
		val := binary.BigEndian.AppendUint64(nil, uint64(i)*7)
		rows[i] = parapply.Tuple{{Kind: parapply.ValueBinary, Data: id}, {Kind: parapply.ValueBinary, Data: val}}
	}
	return rows
}

// BenchmarkBatcherUpdate is the batcher's share of applying an update
// whose key is unchanged (the common case): its key recorded for
// collapsing, its values pushed into the run, runs taken every thousand
// rows as a group's commit takes them.
func BenchmarkBatcherUpdate(b *testing.B) {
	tables := testTables(simpleTable())
	t := tables[1]
	bt := newBatcher(10000, new(atomic.Int64))
	rows := updateRows(1000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := bt.update(t, 0, nil, rows[i%len(rows)]); err != nil {
			b.Fatal(err)
		}
		if i%len(rows) == len(rows)-1 {
			bt.closeAll()
			bt.take()
		}
	}
}

// TestBatcherUpdateBytes: once a run of a statement has closed, the next
// run of it allocates little more per update than its key's copy in the
// run's key index: the index (emptied) and room for its parameters are
// ready, not grown row by row.
func TestBatcherUpdateBytes(t *testing.T) {
	tables := testTables(simpleTable())
	bt := newBatcher(10000, new(atomic.Int64))
	rows := updateRows(1000)
	fill := func() {
		for _, row := range rows {
			if _, err := bt.update(tables[1], 0, nil, row); err != nil {
				t.Fatal(err)
			}
		}
		bt.closeAll()
		bt.take()
	}
	fill() // the first run grows what the next ones reuse
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fill()
	runtime.ReadMemStats(&after)
	// A key here is 1+4+4 bytes, held as a 16-byte string; the run's
	// parameters are 2 × 24 bytes per row.
	if per := (after.TotalAlloc - before.TotalAlloc) / uint64(len(rows)); per > 16+48+8 {
		t.Errorf("%d bytes allocated per update, want at most %d", per, 16+48+8)
	}
}
