package apply

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// Statements go out through pgconn's pipeline rather than pgx's batch: a
// run's parameters are already in PostgreSQL's binary format (rawArray),
// and pgx's batch copies each parameter into a buffer of its own (grown
// from a few hundred bytes for every statement) before copying it again
// into the Bind message. For rows with large values that first copy and its
// growth are a visible share of the process's CPU (docs/benchmarks.md). Here a rawArray
// goes into the Bind message as it is; other parameters are encoded by
// pgx.

// maxPrepared bounds the statements one session keeps prepared: past it
// they are all deallocated, and prepared again as they come.
var maxPrepared = 512 // a var: the tests lower it

// preparedStmt is a statement prepared on the applier's session, with what
// sending it needs.
type preparedStmt struct {
	sd *pgconn.StatementDescription
	// resultFormats of its fields, as pgx would ask for them.
	resultFormats []int16
}

// prepared returns sql prepared on the session (a round trip the first
// time).
func (s *sender) prepared(ctx context.Context, sql string) (*preparedStmt, error) {
	if p, ok := s.stmts[sql]; ok {
		return p, nil
	}
	if len(s.stmts) >= maxPrepared {
		if err := s.conn.DeallocateAll(ctx); err != nil {
			return nil, fmt.Errorf("deallocating prepared statements: %w", err)
		}
		clear(s.stmts)
	}
	sd, err := s.conn.Prepare(ctx, sql, sql)
	if err != nil {
		return nil, err
	}
	p := &preparedStmt{sd: sd}
	m := s.conn.TypeMap()
	for _, f := range sd.Fields {
		p.resultFormats = append(p.resultFormats, m.FormatCodeForOID(f.DataTypeOID))
	}
	if s.stmts == nil {
		s.stmts = map[string]*preparedStmt{}
	}
	s.stmts[sql] = p
	return p, nil
}

// bound is a statement with its parameters encoded, ready to be sent.
type bound struct {
	p       *preparedStmt
	values  [][]byte
	formats []int16
}

// binaryFormat asks for every parameter in binary.
var binaryFormat = []int16{pgtype.BinaryFormatCode}

// bind encodes o's parameters for p.
func (s *sender) bind(p *preparedStmt, o op) (bound, error) {
	if len(o.args) != len(p.sd.ParamOIDs) {
		return bound{}, fmt.Errorf("statement takes %d parameters, %d given", len(p.sd.ParamOIDs), len(o.args))
	}
	values := make([][]byte, len(o.args))
	raw, arrays := true, false
	for i, x := range o.args {
		switch v := x.(type) {
		case rawArray:
			values[i], arrays = v, true
		case nil:
		default:
			raw = false
		}
	}
	if arrays && !raw {
		// pgx would encode a rawArray as an array of bytes, not send it.
		return bound{}, fmt.Errorf("statement mixes encoded arrays with other parameters (internal error): %s", o.sql)
	}
	if raw {
		// A statement built from a run: its arrays, whatever their
		// element type, are in binary as they are.
		return bound{p: p, values: values, formats: binaryFormat}, nil
	}
	// Parameters of other kinds (the progress row, the conflict log):
	// few and small, encoded by pgx and copied out of its buffer.
	if err := s.eqb.Build(s.conn.TypeMap(), p.sd, o.args); err != nil {
		return bound{}, err
	}
	values = values[:0]
	for _, v := range s.eqb.ParamValues {
		if v != nil {
			v = slices.Clone(v)
		}
		values = append(values, v) //nolint:makezero // values was cut to [:0] above: its array is reused
	}
	return bound{p: p, values: values, formats: slices.Clone(s.eqb.ParamFormats)}, nil
}

// pipeline sends ops, none of them a COPY, as one pipelined round trip.
func (s *sender) pipeline(ctx context.Context, ops []op, desc txns) error {
	bs := make([]bound, len(ops))
	for i, o := range ops {
		p, err := s.prepared(ctx, o.sql)
		if err == nil {
			bs[i], err = s.bind(p, o)
		}
		if err != nil {
			return s.opFailed(ctx, o, err, desc)
		}
	}
	pl := s.conn.PgConn().StartPipeline(ctx)
	s.reserve(bs)
	for _, b := range bs {
		pl.SendQueryStatement(b.p.sd, b.values, b.formats, b.p.resultFormats)
	}
	if err := pl.Sync(); err != nil {
		pl.Close()
		return fmt.Errorf("sending the statements of %s: %w", desc, err)
	}
	for _, o := range ops {
		res, err := pl.GetResults()
		if err == nil {
			err = s.result(o, res)
		}
		if err != nil {
			pl.Close()
			return s.opFailed(ctx, o, err, desc)
		}
	}
	if res, err := pl.GetResults(); err != nil {
		pl.Close()
		return err
	} else if _, ok := res.(*pgconn.PipelineSync); !ok {
		pl.Close()
		return fmt.Errorf("after the statements of %s: expected the end of the round trip, got %T (protocol error)", desc, res)
	}
	return pl.Close()
}

// The round trip's messages are written into one buffer the sender
// keeps (wire), sized for all of them before the first: pgproto3's
// frontend appends every message to its write buffer, which it drops
// after each flush of more than 1 kB, so a round trip of a few hundred
// kB grew a new one by doubling from 1 kB, copying and clearing as it
// went (a large share of the process's allocations on one-row updates of
// 1 kB rows). wire keeps the size of the largest round trip, a little over
// Config.PipelineBytes at most (8 MB by default), for the session's life.

// reserve hands the frontend a write buffer with room for bs.
func (s *sender) reserve(bs []bound) {
	n := 64 // Sync, and slack
	for _, b := range bs {
		n += 64 + len(b.p.sd.Name) + 2*(len(b.formats)+len(b.p.resultFormats))
		for _, v := range b.values {
			n += 4 + len(v)
		}
	}
	if n <= 1024 {
		return // within what the frontend keeps
	}
	s.conn.PgConn().Frontend().Send(reservation{s: s, n: n})
}

// reservation is no message: encoding it swaps the frontend's write
// buffer for the sender's wire buffer, with n bytes free, holding what
// was written so far (Encode may return a buffer other than dst, as
// append does). The frontend writes into wire until its next flush (and
// keeps it past that if it holds 1 kB or less); wire is only scratch
// here, and a reservation copies what the frontend holds first, so the
// two sharing it is harmless.
type reservation struct {
	s *sender
	n int
}

// Encode hands the frontend a buffer with r.n bytes free (see reservation).
func (r reservation) Encode(dst []byte) ([]byte, error) {
	if cap(dst)-len(dst) >= r.n {
		return dst, nil
	}
	w := r.s.wire[:0]
	if need := len(dst) + r.n; cap(w) < need {
		// A new buffer, not a grown one: growing would copy the old
		// buffer's stale bytes along.
		w = make([]byte, 0, need+need/4)
	}
	w = append(w, dst...)
	r.s.wire = w[:0]
	return w, nil
}

// Decode refuses: a reservation is never received.
func (reservation) Decode([]byte) error { return fmt.Errorf("reservation is not a message") }

// Frontend marks a reservation as something the frontend sends.
func (reservation) Frontend() {}

// result takes o's result: its row scanned, or its command tag counted.
func (s *sender) result(o op, res any) error {
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return fmt.Errorf("expected a statement's result, got %T (protocol error)", res)
	}
	if o.scan == nil {
		tag, err := rr.Close()
		if err != nil {
			return err
		}
		s.done(o, tag)
		return nil
	}
	rows := pgx.RowsFromResultReader(s.conn.TypeMap(), rr)
	if !rows.Next() {
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	err := rows.Scan(o.scan...)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return err
	}
	if o.applied != nil {
		o.applied.Store(true)
	}
	if o.after != nil {
		o.after()
	}
	return nil
}

// opFailed explains why o failed: with the table and column for statements
// built from a run.
func (s *sender) opFailed(ctx context.Context, o op, err error, desc txns) error {
	citusUniqueViolation(err)
	if o.scan != nil && o.table == nil {
		return fmt.Errorf("%s after %s: %w", o.what, desc, err)
	}
	return s.explain(ctx, o, err, desc)
}
