package subscriber

import (
	"github.com/parapply/parapply"
	"github.com/parapply/parapply/pgoutput"
)

// unitMaxChanges bounds, with workers, the changes of the consecutive
// source transactions the reader puts in one unit (a larger transaction is
// a unit by itself): small enough that units over different rows exist to
// run side by side, large enough that the scheduler's cost per unit stays
// small beside the changes'.
const unitMaxChanges = 32

// take adds a change to the unit being built, with its scheduling keys.
func (l *loop) take(m pgoutput.Message) error {
	u := l.cur
	var err error
	barrier := false
	switch m := m.(type) {
	case *pgoutput.Insert:
		u.keys, barrier, err = l.app.RowKeys(m.RelationID, u.keys, nil, m.New)
		u.bytes += tupleBytes(m.New)
	case *pgoutput.Update:
		var old parapply.Tuple
		if m.OldKind != 0 {
			old = m.Old
		}
		u.keys, barrier, err = l.app.RowKeys(m.RelationID, u.keys, old, m.New)
		u.bytes += tupleBytes(m.Old) + tupleBytes(m.New)
	case *pgoutput.Delete:
		u.keys, barrier, err = l.app.RowKeys(m.RelationID, u.keys, m.Old, nil)
		u.bytes += tupleBytes(m.Old)
	case *pgoutput.Truncate:
		barrier = true
	}
	u.barrier = u.barrier || barrier
	u.msgs = append(u.msgs, m)
	u.changes++
	return err
}

func tupleBytes(t parapply.Tuple) int {
	n := 0
	for _, v := range t {
		n += len(v.Data) + 24
	}
	return n
}
