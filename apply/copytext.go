package apply

import "encoding/binary"

// Insert runs of many rows are sent with COPY ... FROM STDIN rather than
// INSERT ... SELECT FROM unnest(...): COPY inserts a page's worth of rows
// at a time (one heap call and one WAL record per page, not per row), which
// on the target costs much less than the same rows inserted through the
// executor (docs/benchmarks.md). Values keep the publisher's text form, read by the target
// column types' input functions, exactly as the casts in InsertSQL read
// them.

// copyMinRows is the smallest insert run sent with COPY: below it the extra
// round trip (a COPY cannot ride in a pipelined batch) costs more than the
// page-at-a-time insert saves.
const copyMinRows = 256

// CopySQL is the COPY statement that inserts rows of the columns cols, in
// PostgreSQL's text COPY format (see encodeCopyText), or in its binary one
// when the table's values arrive in binary (see encodeCopyBinary).
func CopySQL(t *Table, cols []int) string {
	s := "COPY " + t.Name + " ("
	for i, c := range cols {
		if i > 0 {
			s += ", "
		}
		s += colName(t, c)
	}
	if t.binaryValues {
		return s + ") FROM STDIN WITH (FORMAT binary)"
	}
	return s + ") FROM STDIN"
}

// encodeCopy writes rows in the format CopySQL names for t.
func (t *Table) encodeCopy(params [][][]byte, rows, size int) []byte {
	if t.binaryValues {
		return encodeCopyBinary(params, rows, size)
	}
	return encodeCopyText(params, rows, size)
}

// copyBinaryHeader starts PostgreSQL's binary COPY format: the signature,
// no flags, no header extension.
var copyBinaryHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// encodeCopyBinary writes rows (params holds one slice per column, each
// value in its type's binary form, nil for NULL) in the binary COPY format:
// per row the column count, then per column the length (-1 for NULL) and
// the bytes; the trailer -1 ends the data.
func encodeCopyBinary(params [][][]byte, rows, size int) []byte {
	b := make([]byte, 0, len(copyBinaryHeader)+size+rows*(2+4*len(params))+2)
	b = append(b, copyBinaryHeader...)
	for i := 0; i < rows; i++ {
		b = binary.BigEndian.AppendUint16(b, uint16(len(params)))
		for _, p := range params {
			v := p[i]
			if v == nil {
				b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
				continue
			}
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return binary.BigEndian.AppendUint16(b, 0xFFFF)
}

// encodeCopyText writes rows (params holds one slice per column, nil for
// NULL) in the text COPY format: columns separated by tabs, rows ended by
// newlines, NULL as \N, and backslash, tab, newline and carriage return
// escaped.
func encodeCopyText(params [][][]byte, rows, size int) []byte {
	b := make([]byte, 0, size+size/16+rows*len(params)+64)
	for i := 0; i < rows; i++ {
		for j, p := range params {
			if j > 0 {
				b = append(b, '\t')
			}
			v := p[i]
			if v == nil {
				b = append(b, '\\', 'N')
				continue
			}
			start := 0
			for k, c := range v {
				var esc byte
				switch c {
				case '\\':
					esc = '\\'
				case '\t':
					esc = 't'
				case '\n':
					esc = 'n'
				case '\r':
					esc = 'r'
				default:
					continue
				}
				b = append(b, v[start:k]...)
				b = append(b, '\\', esc)
				start = k + 1
			}
			b = append(b, v[start:]...)
		}
		b = append(b, '\n')
	}
	return b
}
