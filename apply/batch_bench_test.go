package apply

import (
	"encoding/binary"
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
