package apply

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
// PostgreSQL's text COPY format (see encodeCopyText).
func CopySQL(t *Table, cols []int) string {
	s := "COPY " + t.Name + " ("
	for i, c := range cols {
		if i > 0 {
			s += ", "
		}
		s += colName(t, c)
	}
	return s + ") FROM STDIN"
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
