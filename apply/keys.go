package apply

import (
	"fmt"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/schedule"
)

// RowKeys returns the scheduling keys of a change to relation rel, from its
// old and new images (nil when the change has none), and whether the change
// must be applied alone (a barrier). A row is named by its table and replica
// identity value, old and new; a value the new image takes in a unique index
// beyond the key is named by the index and the value. A freed value (the old
// image carries only the key) has no key: a later transaction that takes it
// either waits on the target for the one that freed it, or meets a unique
// violation and is tried again after every earlier transaction has
// committed. A table whose rows cannot be told apart by identity (REPLICA
// IDENTITY FULL or no key) or whose unique values cannot be read from a
// change is named as a whole; a table with a trigger that fires on the
// target is a barrier, since the trigger may read anything.
func (a *Applier) RowKeys(rel uint32, keys []schedule.Key, old, new parapply.Tuple) ([]schedule.Key, bool, error) {
	t, err := a.table(rel)
	if err != nil {
		return keys, false, err
	}
	if t.Triggers {
		return keys, true, nil
	}
	if t.Full || len(t.Key) == 0 || t.WholeTable {
		return append(keys, schedule.MakeKey(t.Name)), false, nil
	}
	for _, tup := range [2]parapply.Tuple{old, new} {
		if tup == nil {
			continue
		}
		if len(tup) != len(t.Rel.Columns) {
			return keys, false, fmt.Errorf("change of %s carries %d columns, its relation message %d (protocol error)", t.Name, len(tup), len(t.Rel.Columns))
		}
		a.keybuf = appendKey(a.keybuf, tup, t.Key)
		keys = append(keys, schedule.MakeKey(t.Name, a.keybuf))
	}
	if new == nil {
		return keys, false, nil
	}
	for _, u := range t.Uniques {
		if !takesValue(new, u) {
			continue
		}
		a.keybuf = appendKey(a.keybuf, new, u.Cols)
		keys = append(keys, schedule.MakeKey(u.Name, a.keybuf))
	}
	return keys, false, nil
}

// takesValue reports whether a new image holds a value of unique index u
// that another row could conflict with: every column known (an unchanged
// TOASTed value is the row's own already) and, unless NULLs are equal in
// the index, none NULL.
func takesValue(tup parapply.Tuple, u UniqueIndex) bool {
	for _, c := range u.Cols {
		switch tup[c].Kind {
		case parapply.ValueUnchanged:
			return false
		case parapply.ValueNull:
			if !u.NullsEqual {
				return false
			}
		}
	}
	return true
}
