package apply

import (
	"reflect"
	"sync/atomic"
	"testing"
)

// TestAbsorb checks that Absorb adds every total of Stats, each to its own
// field: a field added to Stats is absorbed, or is not an atomic.Int64 and
// Absorb panics here.
func TestAbsorb(t *testing.T) {
	var s, o Stats
	sv, ov := reflect.ValueOf(&s).Elem(), reflect.ValueOf(&o).Elem()
	if sv.NumField() < 14 {
		t.Fatalf("Stats has %d fields, want at least the 14 it had", sv.NumField())
	}
	// Distinct values per field, so that a field added to another shows.
	for i := range sv.NumField() {
		sv.Field(i).Addr().Interface().(*atomic.Int64).Store(int64(1000 * (i + 1)))
		ov.Field(i).Addr().Interface().(*atomic.Int64).Store(int64(i + 1))
	}
	s.Absorb(&o)
	for i := range sv.NumField() {
		got := sv.Field(i).Addr().Interface().(*atomic.Int64).Load()
		if want := int64(1001 * (i + 1)); got != want {
			t.Errorf("%s = %d after Absorb, want %d", sv.Type().Field(i).Name, got, want)
		}
		if got, want := ov.Field(i).Addr().Interface().(*atomic.Int64).Load(), int64(i+1); got != want {
			t.Errorf("Absorb changed its argument's %s to %d, want %d", sv.Type().Field(i).Name, got, want)
		}
	}
}
