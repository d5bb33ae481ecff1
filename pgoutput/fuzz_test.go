package pgoutput

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzDecode checks that Decode never panics, returns exactly one of a
// message or an ErrMalformed error in and out of a stream, changes the stream
// state only on success, and that whatever it accepts re-encodes to bytes
// that decode to the same message.
func FuzzDecode(f *testing.F) {
	for _, c := range decodeCases() {
		f.Add(c.data, uint8(c.proto))
	}
	f.Fuzz(func(t *testing.T, data []byte, proto uint8) {
		for _, inStream := range []bool{false, true} {
			d := Decoder{ProtoVersion: int(proto % 6), inStream: inStream}
			m, err := d.Decode(data)
			if err != nil {
				if m != nil {
					t.Fatalf("Decode returned %#v with error %v", m, err)
				}
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("error %v does not wrap ErrMalformed", err)
				}
				if d.inStream != inStream {
					t.Fatalf("failed Decode changed the stream state")
				}
				continue
			}
			if m == nil {
				t.Fatal("Decode returned neither a message nor an error")
			}
			switch m.(type) {
			case *StreamStart:
				if !d.inStream {
					t.Fatal("StreamStart did not enter the stream")
				}
			case *StreamStop:
				if d.inStream {
					t.Fatal("StreamStop did not leave the stream")
				}
			default:
				if d.inStream != inStream {
					t.Fatalf("%T changed the stream state", m)
				}
			}
			enc := encodeMessage(m, inStream)
			d2 := Decoder{ProtoVersion: int(proto % 6), inStream: inStream}
			m2, err := d2.Decode(enc)
			if err != nil {
				t.Fatalf("re-encoded %#v does not decode: %v", m, err)
			}
			if !reflect.DeepEqual(m, m2) {
				t.Fatalf("re-encoding changed the message:\n first %#v\nsecond %#v", m, m2)
			}
		}
	})
}
