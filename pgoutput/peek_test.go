package pgoutput

import "testing"

func TestPeekStreamedChange(t *testing.T) {
	in := NewStreamDecoder(4)
	out := &Decoder{ProtoVersion: 4}
	xid := []byte{0, 0, 0x01, 0x02}
	for _, c := range []struct {
		name string
		d    *Decoder
		data []byte
		want bool
	}{
		{"insert in a stream", in, append([]byte{'I'}, append(xid, 0, 0, 0, 9, 'N')...), true},
		{"update in a stream", in, append([]byte{'U'}, xid...), true},
		{"delete in a stream", in, append([]byte{'D'}, xid...), true},
		{"truncate in a stream", in, append([]byte{'T'}, xid...), true},
		{"relation in a stream", in, append([]byte{'R'}, xid...), false},
		{"stream stop", in, []byte{'E'}, false},
		{"too short", in, []byte{'I', 0, 0}, false},
		{"insert outside a stream", out, append([]byte{'I'}, xid...), false},
	} {
		got, ok := c.d.PeekStreamedChange(c.data)
		if ok != c.want || ok && got != 0x0102 {
			t.Errorf("%s: got %d, %v; want 258, %v", c.name, got, ok, c.want)
		}
	}
}
