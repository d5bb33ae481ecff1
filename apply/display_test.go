package apply

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/internal/pgtest"
)

// TestBinaryText renders values the server sends in binary and compares
// each with the server's own text output of it (timestamps with time zone
// read in UTC), for every type binaryText knows; a type it does not know
// shows its bytes, marked as binary.
func TestBinaryText(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "apply-binary-text", 2*time.Minute)
	conn, err := pgconn.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET TimeZone = 'UTC'; SET extra_float_digits = 1; SET DateStyle = 'ISO, YMD'").ReadAll(); err != nil {
		t.Fatal(err)
	}
	values := []string{
		"'hello, wörld'::text", "''::text", "E'tab\\there'::varchar", "'ab'::char(4)", "'name'::name",
		`'{"a": [1, 2.5, null], "b": "x"}'::jsonb`, `'{"k" : 1}'::json`,
		"true", "false",
		"(-32768)::int2", "32767::int2", "(-2147483648)::int4", "2147483647::int4", "(-9223372036854775808)::int8", "9223372036854775807::int8", "4294967295::oid",
		"0.1::float8", "(-0)::float8", "'-0'::float8", "1.7976931348623157e308::float8", "5e-324::float8", "'NaN'::float8", "'Infinity'::float8", "'-Infinity'::float8",
		"1234567::float8", "123456789012345678::float8", "0.0001::float8", "0.00001::float8", "1e15::float8", "1e14::float8",
		"0.1::float4", "3.4028235e38::float4", "1e-45::float4", "123456::float4", "1234567::float4", "'NaN'::float4",
		"'\\x00ff10'::bytea", "''::bytea",
		"'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid",
		"'2026-11-27'::date", "'0001-01-01'::date", "'1999-12-31'::date", "'infinity'::date", "'-infinity'::date",
		"'2026-11-27 01:02:03.456789'::timestamp", "'1970-01-01 00:00:00'::timestamp", "'1999-12-31 23:59:59.5'::timestamp", "'infinity'::timestamp",
		"'2026-11-27 01:02:03.1+02'::timestamptz", "'1900-06-01 12:00:00+00'::timestamptz",
		"0::numeric", "1::numeric", "(-1)::numeric", "1.50::numeric", "0.001::numeric", "(-0.000100)::numeric", "123456789.123456789::numeric",
		"10000::numeric", "100000000::numeric", "1e30::numeric", "12.000::numeric(10,3)", "'NaN'::numeric",
		"'Infinity'::numeric", "'-Infinity'::numeric", "0.00::numeric", "99999999999999999999.99999999999999999999::numeric",
	}
	for _, v := range values {
		res := conn.ExecParams(ctx, "SELECT "+v+", "+v, nil, nil, nil, []int16{1, 0}).Read()
		if res.Err != nil {
			t.Fatalf("%s: %v", v, res.Err)
		}
		row := res.Rows[0]
		oid := res.FieldDescriptions[0].DataTypeOID
		got, ok := decodeBinary(oid, row[0])
		if !ok {
			t.Errorf("%s (type %d): not decoded", v, oid)
			continue
		}
		if want := string(row[1]); got != want {
			t.Errorf("%s: rendered %q, the server's text is %q", v, got, want)
		}
	}
	// A type it does not know: its bytes, marked.
	res := conn.ExecParams(ctx, "SELECT '192.168.0.1'::inet", nil, nil, nil, []int16{1}).Read()
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := binaryText(res.FieldDescriptions[0].DataTypeOID, res.Rows[0][0]); !strings.HasPrefix(got, "(binary, type 869) \\x") {
		t.Errorf("inet rendered %q, want its bytes marked as binary", got)
	}
}
