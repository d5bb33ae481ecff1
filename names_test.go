package parapply

import "testing"

// TestTableName: names as regclass prints them (checked against
// PostgreSQL 18's quote_ident).
func TestTableName(t *testing.T) {
	for _, c := range []struct{ schema, name, want string }{
		{"public", "items", "public.items"},
		{"public", "Items", `public."Items"`},
		{"app data", "x", `"app data".x`},
		{"public", "order", `public."order"`},
		{"public", "time", `public."time"`},
		{"public", "name", "public.name"}, // unreserved
		{"public", "a$b", `public."a$b"`},
		{"public", "_t1", "public._t1"},
		{"public", "1t", `public."1t"`},
		{"public", `say "hi"`, `public."say ""hi"""`},
		{"public", "é", `public."é"`},
	} {
		if got := TableName(c.schema, c.name); got != c.want {
			t.Errorf("TableName(%q, %q) = %s, want %s", c.schema, c.name, got, c.want)
		}
	}
}
