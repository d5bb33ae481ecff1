package pgoutput

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply"
)

var (
	t1 = time.Date(2024, 5, 17, 12, 34, 56, 123456000, time.UTC)
	t2 = time.Date(2024, 5, 17, 12, 35, 0, 1000, time.UTC)
	t0 = time.Date(1999, 12, 31, 23, 59, 59, 500000000, time.UTC) // before the PostgreSQL epoch
)

func text(s string) parapply.Value           { return parapply.Value{Kind: parapply.ValueText, Data: []byte(s)} }
func bin(b ...byte) parapply.Value           { return parapply.Value{Kind: parapply.ValueBinary, Data: b} }
func null() parapply.Value                   { return parapply.Value{Kind: parapply.ValueNull} }
func unchanged() parapply.Value              { return parapply.Value{Kind: parapply.ValueUnchanged} }
func tup(v ...parapply.Value) parapply.Tuple { return parapply.Tuple(v) }

type decodeCase struct {
	name     string
	inStream bool
	proto    int
	data     []byte
	want     Message
	// validPrefix is the length of a proper prefix of data that is itself a
	// valid message (stream abort without its optional fields), 0 if none.
	validPrefix int
}

// decodeCases lists valid encodings, written field by field in proto.c's
// order, with the value each must decode to.
func decodeCases() []decodeCase {
	var b builder
	return []decodeCase{
		{
			name: "begin",
			data: b.u8('B').lsn(0x16B3748).ts(t1).xid(771),
			want: &Begin{FinalLSN: 0x16B3748, CommitTime: t1, XID: 771},
		},
		{
			name: "begin before epoch",
			data: b.u8('B').lsn(1).ts(t0).xid(1),
			want: &Begin{FinalLSN: 1, CommitTime: t0, XID: 1},
		},
		{
			name: "commit",
			data: b.u8('C').u8(0).lsn(0x100000010).lsn(0x100000040).ts(t1),
			want: &Commit{CommitLSN: 0x100000010, EndLSN: 0x100000040, CommitTime: t1},
		},
		{
			name: "origin",
			data: b.u8('O').lsn(0xABCDEF).str("node_a"),
			want: &Origin{CommitLSN: 0xABCDEF, Name: "node_a"},
		},
		{
			name: "relation",
			data: b.u8('R').u32(16384).str("public").str("accounts").u8('d').u16(3).
				u8(1).str("id").u32(23).i32(-1).
				u8(0).str("name").u32(1043).i32(68).
				u8(0).str("").u32(25).i32(-1),
			want: &RelationMessage{Relation: parapply.Relation{
				ID: 16384, Namespace: "public", Name: "accounts", ReplicaIdentity: 'd',
				Columns: []parapply.Column{
					{Name: "id", TypeOID: 23, TypeMod: -1, Key: true},
					{Name: "name", TypeOID: 1043, TypeMod: 68},
					{Name: "", TypeOID: 25, TypeMod: -1},
				},
			}},
		},
		{
			name: "relation in pg_catalog without columns",
			data: b.u8('R').u32(1).str("").str("t").u8('f').u16(0),
			want: &RelationMessage{Relation: parapply.Relation{
				ID: 1, Namespace: "pg_catalog", Name: "t", ReplicaIdentity: 'f', Columns: []parapply.Column{},
			}},
		},
		{
			name:     "relation streamed",
			inStream: true, proto: 2,
			data: b.u8('R').xid(900).u32(7).str("s").str("t").u8('i').u16(1).u8(1).str("k").u32(20).i32(-1),
			want: &RelationMessage{XID: 900, Relation: parapply.Relation{
				ID: 7, Namespace: "s", Name: "t", ReplicaIdentity: 'i',
				Columns: []parapply.Column{{Name: "k", TypeOID: 20, TypeMod: -1, Key: true}},
			}},
		},
		{
			name: "type",
			data: b.u8('Y').u32(16500).str("public").str("mood"),
			want: &TypeMessage{OID: 16500, Namespace: "public", Name: "mood"},
		},
		{
			name:     "type streamed in pg_catalog",
			inStream: true, proto: 2,
			data: b.u8('Y').xid(5).u32(3802).str("").str("jsonb"),
			want: &TypeMessage{XID: 5, OID: 3802, Namespace: "pg_catalog", Name: "jsonb"},
		},
		{
			name: "insert all value kinds",
			data: b.u8('I').u32(16384).u8('N').tuple(tup(text("42"), bin(0, 1, 2), null(), unchanged(), text(""))),
			want: &Insert{RelationID: 16384, New: tup(text("42"), bin(0, 1, 2), null(), unchanged(), text(""))},
		},
		{
			name: "insert no columns",
			data: b.u8('I').u32(1).u8('N').u16(0),
			want: &Insert{RelationID: 1, New: tup()},
		},
		{
			name:     "insert streamed",
			inStream: true, proto: 2,
			data: b.u8('I').xid(901).u32(16384).u8('N').tuple(tup(text("1"))),
			want: &Insert{XID: 901, RelationID: 16384, New: tup(text("1"))},
		},
		{
			name: "update without old tuple",
			data: b.u8('U').u32(16384).u8('N').tuple(tup(text("42"), text("hello"))),
			want: &Update{RelationID: 16384, New: tup(text("42"), text("hello"))},
		},
		{
			name: "update with old key",
			data: b.u8('U').u32(16384).u8('K').tuple(tup(text("41"), null())).u8('N').tuple(tup(text("42"), unchanged())),
			want: &Update{RelationID: 16384, OldKind: 'K', Old: tup(text("41"), null()), New: tup(text("42"), unchanged())},
		},
		{
			name:     "update with old row streamed",
			inStream: true, proto: 2,
			data: b.u8('U').xid(902).u32(5).u8('O').tuple(tup(text("1"), bin(9))).u8('N').tuple(tup(text("1"), bin(10))),
			want: &Update{XID: 902, RelationID: 5, OldKind: 'O', Old: tup(text("1"), bin(9)), New: tup(text("1"), bin(10))},
		},
		{
			name: "update old narrower than new",
			data: b.u8('U').u32(5).u8('K').tuple(tup(text("1"))).u8('N').tuple(tup(text("1"), text("2"), null())),
			want: &Update{RelationID: 5, OldKind: 'K', Old: tup(text("1")), New: tup(text("1"), text("2"), null())},
		},
		{
			name: "delete with key",
			data: b.u8('D').u32(16384).u8('K').tuple(tup(text("42"), null())),
			want: &Delete{RelationID: 16384, OldKind: 'K', Old: tup(text("42"), null())},
		},
		{
			name: "delete with old row",
			data: b.u8('D').u32(16384).u8('O').tuple(tup(text("42"), text("x"))),
			want: &Delete{RelationID: 16384, OldKind: 'O', Old: tup(text("42"), text("x"))},
		},
		{
			name:     "delete streamed",
			inStream: true, proto: 2,
			data: b.u8('D').xid(903).u32(1).u8('K').tuple(tup(bin(1))),
			want: &Delete{XID: 903, RelationID: 1, OldKind: 'K', Old: tup(bin(1))},
		},
		{
			name: "truncate plain",
			data: b.u8('T').i32(1).u8(0).u32(16384),
			want: &Truncate{RelationIDs: []uint32{16384}},
		},
		{
			name: "truncate cascade restart identity",
			data: b.u8('T').i32(3).u8(3).u32(1).u32(2).u32(3),
			want: &Truncate{Cascade: true, RestartIdentity: true, RelationIDs: []uint32{1, 2, 3}},
		},
		{
			name:     "truncate streamed restart identity",
			inStream: true, proto: 2,
			data: b.u8('T').xid(904).i32(1).u8(2).u32(9),
			want: &Truncate{XID: 904, RestartIdentity: true, RelationIDs: []uint32{9}},
		},
		{
			name: "logical message non-transactional",
			data: b.u8('M').u8(0).lsn(0x500).str("audit").i32(5).raw([]byte("hello")...),
			want: &LogicalMessage{LSN: 0x500, Prefix: "audit", Content: []byte("hello")},
		},
		{
			name: "logical message transactional empty",
			data: b.u8('M').u8(1).lsn(0x501).str("p").i32(0),
			want: &LogicalMessage{Transactional: true, LSN: 0x501, Prefix: "p", Content: []byte{}},
		},
		{
			name:     "logical message streamed",
			inStream: true, proto: 2,
			data: b.u8('M').xid(905).u8(1).lsn(0x502).str("p").i32(2).raw(0, 0),
			want: &LogicalMessage{XID: 905, Transactional: true, LSN: 0x502, Prefix: "p", Content: []byte{0, 0}},
		},
		{
			name: "stream start first",
			data: b.u8('S').xid(906).u8(1), proto: 2,
			want: &StreamStart{XID: 906, First: true},
		},
		{
			name: "stream start later",
			data: b.u8('S').xid(906).u8(0), proto: 2,
			want: &StreamStart{XID: 906},
		},
		{
			name: "stream stop", inStream: true, proto: 2,
			data: b.u8('E'),
			want: &StreamStop{},
		},
		{
			name: "stream commit", proto: 2,
			data: b.u8('c').xid(906).u8(0).lsn(0x600).lsn(0x640).ts(t1),
			want: &StreamCommit{XID: 906, CommitLSN: 0x600, EndLSN: 0x640, CommitTime: t1},
		},
		{
			name: "stream abort v2", proto: 2,
			data: b.u8('A').xid(906).xid(907),
			want: &StreamAbort{XID: 906, SubXID: 907},
		},
		{
			name: "stream abort v4 without abort lsn", proto: 4,
			data: b.u8('A').xid(906).xid(906),
			want: &StreamAbort{XID: 906, SubXID: 906},
		},
		{
			name: "stream abort v4 with abort lsn", proto: 4,
			data:        b.u8('A').xid(906).xid(907).lsn(0x700).ts(t2),
			want:        &StreamAbort{XID: 906, SubXID: 907, AbortLSN: 0x700, AbortTime: t2, HasAbortLSN: true},
			validPrefix: 9,
		},
		{
			name: "begin prepare", proto: 3,
			data: b.u8('b').lsn(0x800).lsn(0x840).ts(t1).xid(908).str("gid-1"),
			want: &BeginPrepare{PrepareLSN: 0x800, EndLSN: 0x840, PrepareTime: t1, XID: 908, GID: "gid-1"},
		},
		{
			name: "prepare", proto: 3,
			data: b.u8('P').u8(0).lsn(0x800).lsn(0x840).ts(t1).xid(908).str("gid-1"),
			want: &Prepare{PrepareLSN: 0x800, EndLSN: 0x840, PrepareTime: t1, XID: 908, GID: "gid-1"},
		},
		{
			name: "commit prepared", proto: 3,
			data: b.u8('K').u8(0).lsn(0x900).lsn(0x940).ts(t2).xid(908).str("gid-1"),
			want: &CommitPrepared{CommitLSN: 0x900, EndLSN: 0x940, CommitTime: t2, XID: 908, GID: "gid-1"},
		},
		{
			name: "rollback prepared", proto: 3,
			data: b.u8('r').u8(0).lsn(0x840).lsn(0x9A0).ts(t1).ts(t2).xid(909).str("gid-2"),
			want: &RollbackPrepared{PrepareEndLSN: 0x840, RollbackEndLSN: 0x9A0, PrepareTime: t1, RollbackTime: t2, XID: 909, GID: "gid-2"},
		},
		{
			name: "stream prepare", proto: 3,
			data: b.u8('p').u8(0).lsn(0xA00).lsn(0xA40).ts(t1).xid(910).str(""),
			want: &StreamPrepare{PrepareLSN: 0xA00, EndLSN: 0xA40, PrepareTime: t1, XID: 910, GID: ""},
		},
	}
}

func TestDecode(t *testing.T) {
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			d := Decoder{ProtoVersion: c.proto, inStream: c.inStream}
			got, err := d.Decode(c.data)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Decode:\n got %#v\nwant %#v", got, c.want)
			}
			// The test encoder must agree with the hand-built bytes, so the
			// fuzz test's re-encoding check is meaningful.
			if enc := encodeMessage(c.want, c.inStream); !bytes.Equal(enc, c.data) {
				t.Fatalf("encodeMessage:\n got %x\nwant %x", enc, c.data)
			}
		})
	}
}

func TestDecodeTruncated(t *testing.T) {
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			for n := range len(c.data) {
				if n == c.validPrefix && n != 0 {
					continue
				}
				d := Decoder{ProtoVersion: c.proto, inStream: c.inStream}
				m, err := d.Decode(c.data[:n])
				if err == nil || m != nil {
					t.Fatalf("Decode(first %d of %d bytes) = %#v, %v; want an error", n, len(c.data), m, err)
				}
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Decode(first %d bytes): %v does not wrap ErrMalformed", n, err)
				}
				if d.inStream != c.inStream {
					t.Fatalf("Decode(first %d bytes) changed the stream state", n)
				}
			}
		})
	}
}

func TestDecodeTrailingBytes(t *testing.T) {
	for _, c := range decodeCases() {
		t.Run(c.name, func(t *testing.T) {
			d := Decoder{ProtoVersion: c.proto, inStream: c.inStream}
			data := append(bytes.Clone(c.data), 0)
			_, err := d.Decode(data)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), " trailing bytes after the message") {
				t.Fatalf("Decode with a trailing byte: %v", err)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	var b builder
	for _, c := range []struct {
		name     string
		inStream bool
		proto    int
		data     []byte
		want     string
	}{
		{"empty", false, 1, nil, "pgoutput: empty message"},
		{"unknown tag", false, 1, b.u8('Z').u32(1), "pgoutput: unknown message tag 'Z' (0x5a)"},
		{"text too long", false, 1,
			b.u8('I').u32(1).u8('N').u16(4).u8('n').u8('u').u8('b').i32(0).u8('t').i32(99999).raw([]byte("twelve bytes")...),
			"pgoutput: insert message: new tuple column 3: text length 99999 exceeds remaining 12 bytes"},
		{"negative binary length", false, 1,
			b.u8('I').u32(1).u8('N').u16(1).u8('b').i32(-1),
			"pgoutput: insert message: new tuple column 0: negative binary length -1"},
		{"unknown value kind", false, 1,
			b.u8('I').u32(1).u8('N').u16(1).u8('x'),
			"pgoutput: insert message: new tuple column 0: unknown value kind 'x' (0x78)"},
		{"huge column count", false, 1,
			b.u8('I').u32(1).u8('N').u16(0x7fff).u8('n'),
			"pgoutput: insert message: new tuple column count: count 32767 needs at least 32767 bytes, have 1"},
		{"negative column count", false, 1,
			b.u8('D').u32(1).u8('K').u16(0xffff),
			"pgoutput: delete message: old tuple column count: negative count -1"},
		{"insert wrong tuple kind", false, 1,
			b.u8('I').u32(1).u8('K').u16(0),
			"pgoutput: insert message: tuple kind 'K', want 'N'"},
		{"update wrong tuple kind", false, 1,
			b.u8('U').u32(1).u8('X').u16(0),
			"pgoutput: update message: tuple kind 'X', want 'K', 'O' or 'N'"},
		{"update missing new tuple", false, 1,
			b.u8('U').u32(1).u8('O').u16(0).u8('O').u16(0),
			"pgoutput: update message: new tuple kind 'O', want 'N'"},
		{"delete new tuple", false, 1,
			b.u8('D').u32(1).u8('N').u16(0),
			"pgoutput: delete message: tuple kind 'N', want 'K' or 'O'"},
		{"relation identity", false, 1,
			b.u8('R').u32(1).str("s").str("t").u8('x').u16(0),
			"pgoutput: relation message: unknown replica identity 'x' (0x78)"},
		{"relation column count", false, 1,
			b.u8('R').u32(1).str("s").str("t").u8('d').u16(2).u8(1).str("a").u32(23).i32(-1),
			"pgoutput: relation message: column count: count 2 needs at least 20 bytes, have 11"},
		{"relation column name", false, 1,
			b.u8('R').u32(1).str("s").str("t").u8('d').u16(2).u8(1).str("a").u32(23).i32(-1).u8(0).raw([]byte("abcdefghij")...),
			"pgoutput: relation message: column 1: name: string not NUL-terminated within 10 remaining bytes"},
		{"origin without NUL", false, 1,
			b.u8('O').lsn(1).raw([]byte("name")...),
			"pgoutput: origin message: name: string not NUL-terminated within 4 remaining bytes"},
		{"truncate negative count", false, 1,
			b.u8('T').i32(-1).u8(0),
			"pgoutput: truncate message: relation count: negative count -1"},
		{"truncate huge count", false, 1,
			b.u8('T').i32(0x7fffffff).u8(0).u32(1),
			"pgoutput: truncate message: relation count: count 2147483647 needs 8589934588 bytes, have 4"},
		{"message negative length", false, 1,
			b.u8('M').u8(0).lsn(1).str("p").i32(-5),
			"pgoutput: logical message message: content length: negative count -5"},
		{"message content too long", false, 1,
			b.u8('M').u8(0).lsn(1).str("p").i32(1<<30).raw(1, 2),
			"pgoutput: logical message message: content length: count 1073741824 needs at least 1073741824 bytes, have 2"},
		{"short fixed field", false, 1,
			b.u8('B').lsn(1).raw(1, 2, 3),
			"pgoutput: begin message: commit time: need 8 bytes, have 3"},
		{"stream abort v3 with abort lsn", false, 3,
			b.u8('A').xid(1).xid(2).lsn(3).ts(t1),
			"pgoutput: stream abort message: 16 trailing bytes after the message"},
		{"stream abort v4 with half the abort fields", false, 4,
			b.u8('A').xid(1).xid(2).lsn(3),
			"pgoutput: stream abort message: 8 trailing bytes after the message"},
		{"streamed insert without xid", true, 2,
			b.u8('I').u32(1).u8('N'),
			"pgoutput: insert message: relation id: need 4 bytes, have 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decoder{ProtoVersion: c.proto, inStream: c.inStream}
			m, err := d.Decode(c.data)
			if err == nil {
				t.Fatalf("Decode = %#v, want error %q", m, c.want)
			}
			if m != nil {
				t.Errorf("Decode returned a message with its error: %#v", m)
			}
			if err.Error() != c.want {
				t.Errorf("error:\n got %q\nwant %q", err, c.want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
		})
	}
}

// TestStreamState checks that data messages carry an XID exactly between
// StreamStart and StreamStop, and that a failed decode leaves the state.
func TestStreamState(t *testing.T) {
	var b builder
	d := Decoder{ProtoVersion: 2}
	mustDecode := func(data []byte) Message {
		t.Helper()
		m, err := d.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, err := d.Decode(b.u8('S').xid(10).u8(1).u8(0)); err == nil || d.InStream() {
		t.Fatalf("bad StreamStart: err %v, InStream %v", err, d.InStream())
	}
	mustDecode(b.u8('S').xid(10).u8(1))
	if !d.InStream() {
		t.Fatal("not in stream after StreamStart")
	}
	ins := mustDecode(b.u8('I').xid(10).u32(5).u8('N').tuple(tup(text("a")))).(*Insert)
	if ins.XID != 10 || ins.RelationID != 5 {
		t.Fatalf("streamed insert = %#v", ins)
	}
	if _, err := d.Decode(b.u8('E').u8(0)); err == nil || !d.InStream() {
		t.Fatalf("bad StreamStop: err %v, InStream %v", err, d.InStream())
	}
	mustDecode(b.u8('E'))
	if d.InStream() {
		t.Fatal("in stream after StreamStop")
	}
	ins = mustDecode(b.u8('I').u32(5).u8('N').tuple(tup(text("a")))).(*Insert)
	if ins.XID != 0 || ins.RelationID != 5 {
		t.Fatalf("insert = %#v", ins)
	}
}

func TestPGTime(t *testing.T) {
	for _, c := range []struct {
		us   int64
		want time.Time
	}{
		{0, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{1, time.Date(2000, 1, 1, 0, 0, 0, 1000, time.UTC)},
		{-1, time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{-1_500_000, time.Date(1999, 12, 31, 23, 59, 58, 500000000, time.UTC)},
	} {
		if got := pgTime(c.us); !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("pgTime(%d) = %v, want %v", c.us, got, c.want)
		}
	}
	// The extremes (PostgreSQL's infinity) must not overflow into nonsense.
	if got := pgTime(1<<63 - 1); got.Year() < 200000 {
		t.Errorf("pgTime(max) = %v", got)
	}
	if got := pgTime(-1 << 63); got.Year() > -200000 {
		t.Errorf("pgTime(min) = %v", got)
	}
}

// TestAliasing documents that values alias the input but cannot be appended
// into it.
func TestAliasing(t *testing.T) {
	var b builder
	data := b.u8('I').u32(1).u8('N').tuple(tup(text("ab"), text("cd")))
	var d Decoder
	m, err := d.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	ins := m.(*Insert)
	if &ins.New[0].Data[0] != &data[bytes.Index(data, []byte("ab"))] {
		t.Error("text value does not alias the input")
	}
	_ = append(ins.New[0].Data, 'X')
	if string(ins.New[1].Data) != "cd" {
		t.Error("appending to a value overwrote the next one")
	}
}

func TestDecodeAllocs(t *testing.T) {
	var b builder
	for _, c := range []struct {
		name string
		data []byte
		max  float64
	}{
		// The message struct and the tuple values come out of slabs: one
		// allocation per many messages, less than one per Decode on
		// average (AllocsPerRun rounds down).
		{"insert", b.u8('I').u32(1).u8('N').tuple(tup(text("42"), text("hello"))), 0},
		{"update", benchUpdate, 0},
		{"update with old", b.u8('U').u32(1).u8('O').tuple(tup(text("41"), text("x"))).u8('N').tuple(tup(text("42"), text("y"))), 0},
		{"delete", b.u8('D').u32(1).u8('K').tuple(tup(text("42"), null())), 0},
	} {
		var d Decoder
		got := testing.AllocsPerRun(100, func() {
			if _, err := d.Decode(c.data); err != nil {
				t.Fatal(err)
			}
		})
		if got > c.max {
			t.Errorf("%s: %v allocations per Decode, want <= %v", c.name, got, c.max)
		}
	}
}

// benchUpdate is a typical update of a two-column row whose key did not
// change, so no old tuple is sent.
var benchUpdate = builder{}.u8('U').u32(16384).u8('N').tuple(tup(text("12345"), text("some text value")))

func BenchmarkDecodeUpdate(b *testing.B) {
	var d Decoder
	b.ReportAllocs()
	b.SetBytes(int64(len(benchUpdate)))
	for b.Loop() {
		if _, err := d.Decode(benchUpdate); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeKeepsEach: messages and tuples come out of shared slabs, yet
// each decoded change stays its own: kept past many later ones (more than
// a slab holds), it still holds its values, and appending to its tuple
// leaves the next message's alone.
func TestDecodeKeepsEach(t *testing.T) {
	var d Decoder
	const n = 3*valueSlab + 7
	var kept []Message
	for i := range n {
		var b builder
		id := fmt.Sprint(i)
		var data []byte
		switch i % 3 {
		case 0:
			data = b.u8('I').u32(1).u8('N').tuple(tup(text(id), text("i")))
		case 1:
			data = b.u8('U').u32(1).u8('O').tuple(tup(text(id), text("old"))).u8('N').tuple(tup(text(id), text("new")))
		case 2:
			data = b.u8('D').u32(1).u8('K').tuple(tup(text(id), null()))
		}
		m, err := d.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, m)
	}
	for i, m := range kept {
		var got []parapply.Tuple
		switch m := m.(type) {
		case *Insert:
			got = []parapply.Tuple{m.New}
		case *Update:
			got = []parapply.Tuple{m.Old, m.New}
		case *Delete:
			got = []parapply.Tuple{m.Old}
		}
		for _, tp := range got {
			if len(tp) != 2 || string(tp[0].Data) != fmt.Sprint(i) {
				t.Fatalf("message %d (%T): tuple %v, want its own key %d first", i, m, tp, i)
			}
			_ = append(tp, parapply.Value{Kind: parapply.ValueText, Data: []byte("overwrite")})
		}
	}
	for i, m := range kept {
		if u, ok := m.(*Update); ok && (string(u.Old[1].Data) != "old" || string(u.New[1].Data) != "new" || string(u.New[0].Data) != fmt.Sprint(i)) {
			t.Fatalf("update %d changed by appends to other tuples: old %v new %v", i, u.Old, u.New)
		}
		if in, ok := m.(*Insert); ok && (len(in.New) != 2 || string(in.New[1].Data) != "i") {
			t.Fatalf("insert %d changed by appends to other tuples: %v", i, in.New)
		}
	}
}
