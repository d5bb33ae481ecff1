package apply

import (
	"testing"

	"github.com/parapply/parapply"
)

// TestSameRelation: a relation message sent again unchanged is not
// reloaded; any difference the publisher can announce is.
func TestSameRelation(t *testing.T) {
	base := func() *parapply.Relation {
		return &parapply.Relation{ID: 7, Namespace: "public", Name: "t", ReplicaIdentity: 'd',
			Columns: []parapply.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "v", TypeOID: 25, TypeMod: -1}}}
	}
	tests := []struct {
		name   string
		change func(r *parapply.Relation)
		same   bool
	}{
		{"unchanged", func(*parapply.Relation) {}, true},
		{"renamed", func(r *parapply.Relation) { r.Name = "u" }, false},
		{"other schema", func(r *parapply.Relation) { r.Namespace = "s" }, false},
		{"replica identity", func(r *parapply.Relation) { r.ReplicaIdentity = 'f' }, false},
		{"column added", func(r *parapply.Relation) { r.Columns = append(r.Columns, parapply.Column{Name: "w", TypeOID: 23}) }, false},
		{"column dropped", func(r *parapply.Relation) { r.Columns = r.Columns[:1] }, false},
		{"type changed", func(r *parapply.Relation) { r.Columns[1].TypeOID = 1043 }, false},
		{"typmod changed", func(r *parapply.Relation) { r.Columns[1].TypeMod = 14 }, false},
		{"key changed", func(r *parapply.Relation) { r.Columns[1].Key = true }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := base()
			tt.change(b)
			if got := sameRelation(base(), b); got != tt.same {
				t.Errorf("sameRelation = %v, want %v", got, tt.same)
			}
		})
	}
}
