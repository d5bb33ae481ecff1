package subscriber

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
)

func TestChooseBinary(t *testing.T) {
	int4 := targetdb.Column{Type: "integer", TypeOID: pgtype.Int4OID, Receives: true}
	bigint := targetdb.Column{Type: "bigint", TypeOID: pgtype.Int8OID, Receives: true}
	arr := targetdb.Column{Type: "integer[]", TypeOID: pgtype.Int4ArrayOID}
	enum := targetdb.Column{Type: "mood", TypeOID: 16500, Enum: true}
	tab := func(cols map[string]targetdb.Column) *targetdb.Table { return &targetdb.Table{ByName: cols} }
	pub := func(types map[string]uint32, cols ...string) source.PublishedTable {
		return source.PublishedTable{Schema: "public", Name: "t", Types: types, Columns: cols}
	}
	tests := []struct {
		name      string
		on, latch bool
		published []source.PublishedTable
		tables    []*targetdb.Table
		want      bool
		why       string
	}{
		{"same built-in types", true, false, []source.PublishedTable{pub(map[string]uint32{"a": pgtype.Int4OID})}, []*targetdb.Table{tab(map[string]targetdb.Column{"a": int4})}, true, ""},
		{"off", false, false, []source.PublishedTable{pub(map[string]uint32{"a": pgtype.Int4OID})}, []*targetdb.Table{tab(map[string]targetdb.Column{"a": int4})}, false, "binary = off"},
		{"an earlier run met an unfit column", true, true, []source.PublishedTable{pub(map[string]uint32{"a": pgtype.Int4OID})}, []*targetdb.Table{tab(map[string]targetdb.Column{"a": int4})}, false, "earlier run"},
		{"another type on the target", true, false, []source.PublishedTable{pub(map[string]uint32{"a": pgtype.Int4OID})}, []*targetdb.Table{tab(map[string]targetdb.Column{"a": bigint})}, false, `column "a" of "public"."t" is of type bigint`},
		{"an array", true, false, []source.PublishedTable{pub(map[string]uint32{"a": pgtype.Int4ArrayOID})}, []*targetdb.Table{tab(map[string]targetdb.Column{"a": arr})}, false, "integer[]"},
		{"a user type into an enum", true, false, []source.PublishedTable{pub(map[string]uint32{"m": 17000})}, []*targetdb.Table{tab(map[string]targetdb.Column{"m": enum})}, true, ""},
		{"an unfit column not published", true, false, []source.PublishedTable{pub(map[string]uint32{"a": pgtype.Int4OID, "b": pgtype.Int4ArrayOID}, "a")}, []*targetdb.Table{tab(map[string]targetdb.Column{"a": int4, "b": arr})}, true, ""},
		{"a publisher column the target lacks", true, false, []source.PublishedTable{pub(map[string]uint32{"a": pgtype.Int4OID, "gone": pgtype.Int4ArrayOID})}, []*targetdb.Table{tab(map[string]targetdb.Column{"a": int4})}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Subscriber{cfg: Config{Binary: tt.on}}
			s.runs.textOnly.Store(tt.latch)
			got, why := s.chooseBinary(tt.published, tt.tables)
			if got != tt.want || !strings.Contains(why, tt.why) || (tt.want && why != "") {
				t.Errorf("chooseBinary = %v, %q; want %v, a reason with %q", got, why, tt.want, tt.why)
			}
		})
	}
}
