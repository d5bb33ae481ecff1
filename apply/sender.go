package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
)

// sender is the part of an Applier that talks to the target session: it
// sends the statements of a round trip (pipelined, see pipeline.go; a COPY
// on its own), keeps the statements prepared on the session and the
// buffers their parameters are encoded into, and holds the round trip in
// flight and the error of one that failed. A round trip started by
// sendQueuedAsync runs in a goroutine of its own: the sender's fields are
// then written by that goroutine only, until wait.
type sender struct {
	conn *pgx.Conn
	// stats is the applier's Stats: statements, rows executed, rows missing.
	stats *Stats
	// stmts are the statements prepared on the session (see pipeline.go);
	// eqb encodes the parameters that are not rawArrays; wire is the
	// round trip's write buffer (see reserve).
	stmts map[string]*preparedStmt
	eqb   pgx.ExtendedQueryBuilder
	wire  []byte
	// inflight is the round trip started by sendQueuedAsync; failed, a
	// failed round trip's error, until rollback.
	inflight *inflight
	failed   error
	// short are the statements of the round trip that changed fewer rows
	// than they were sent for, to be settled after it (Applier.settle).
	short []shortfall
}

// send sends ops: one pipelined round trip, or one more for each COPY
// among them (a COPY cannot ride in a pipeline); desc names the source
// transactions for errors. After a failure nothing further is sent.
func (s *sender) send(ctx context.Context, ops []op, desc txns) error {
	for len(ops) > 0 {
		if o := ops[0]; o.copy != nil {
			tag, err := s.conn.PgConn().CopyFrom(ctx, bytes.NewReader(o.copy), o.sql)
			if err != nil {
				return s.explain(ctx, o, err, desc)
			}
			s.done(o, tag)
			ops = ops[1:]
			continue
		}
		n := slices.IndexFunc(ops, func(o op) bool { return o.copy != nil })
		if n < 0 {
			n = len(ops)
		}
		if err := s.pipeline(ctx, ops[:n], desc); err != nil {
			return err
		}
		ops = ops[n:]
	}
	return nil
}

// done counts a statement built from a run, and the rows it was expected to
// change but did not find.
func (s *sender) done(o op, tag pgconn.CommandTag) {
	if o.table != nil {
		s.stats.Statements.Add(1)
		s.stats.Executed.Add(tag.RowsAffected())
	}
	if o.applied != nil {
		o.applied.Store(true)
	}
	if o.rows >= 0 {
		if n := tag.RowsAffected(); n < int64(o.rows) {
			s.short = append(s.short, shortfall{o.table, o.kind, int64(o.rows) - n})
		}
	}
}

// inflight is a round trip started by sendQueuedAsync, whose goroutine
// closes done once err is set; ahead is the round trip it follows, if it
// was started before that one had finished (see sendQueuedAsync).
type inflight struct {
	done  chan struct{}
	err   error
	ahead *inflight
}

// follow returns the round trip in flight for the next one to follow
// instead of waiting for it, once no other is ahead of it (so that one
// round trip at most waits behind the one running); nil if none is in
// flight or it has finished, for takeOps to take its outcome.
func (s *sender) follow() *inflight {
	f := s.inflight
	if f == nil {
		return nil
	}
	if f.ahead != nil {
		<-f.ahead.done
		f.ahead = nil
	}
	select {
	case <-f.done:
		return nil
	default:
		return f
	}
}

// wait waits for the round trip in flight and returns its error. An error
// stays until the group is rolled back: a statement that failed must never
// be followed by a COMMIT that the target would turn into a rollback.
func (s *sender) wait() error {
	if f := s.inflight; f != nil {
		<-f.done
		s.inflight = nil
		if f.err != nil {
			s.failed = f.err
		}
	}
	return s.failed
}

// forget waits for the round trip in flight and forgets the error of a
// failed one: the group is being rolled back.
func (s *sender) forget() {
	_ = s.wait()
	s.failed = nil
}

// busy reports whether a round trip is still in flight, and the error of
// one that has finished (taking it, as wait does).
func (s *sender) busy() (bool, error) {
	f := s.inflight
	if f == nil {
		return false, s.failed
	}
	select {
	case <-f.done:
		return false, s.wait()
	default:
		return true, nil
	}
}

// explain turns a failed statement into an error naming the source
// transaction, the table and, for a value the target cannot take, the column.
func (s *sender) explain(ctx context.Context, o op, err error, desc txns) error {
	citusUniqueViolation(err)
	var pe *pgconn.PgError
	col := ""
	if o.table != nil && errors.As(err, &pe) && (pe.Code[:2] == pgerrcode.DataException[:2] || pe.Code == pgerrcode.NotNullViolation || pe.Code == pgerrcode.CheckViolation) && !s.conn.IsClosed() {
		// Roll back, then cast each parameter on its own to find the column.
		_, _ = s.conn.Exec(ctx, "ROLLBACK")
		for i, c := range o.cols {
			if pe.ColumnName != "" || i >= len(o.args) || c < 0 {
				break
			}
			q := "SELECT u.v::" + o.table.Types[c] + " FROM unnest($1::" + o.table.paramType(c) + "[]) AS u(v)"
			if cerr := execArrays(ctx, s.conn, q, o.args[i:i+1]); cerr != nil {
				col = fmt.Sprintf(" column %s (%s on the target):", parapply.QuoteIdent(o.table.Rel.Columns[c].Name), o.table.Types[c])
				break
			}
		}
		if pe.ColumnName != "" {
			col = fmt.Sprintf(" column %s:", parapply.QuoteIdent(pe.ColumnName))
		}
		if o.copy != nil && pe.Where != "" {
			col = " " + pe.Where + ":" // names the column and its value
		}
		return desc.wrap(fmt.Errorf("applying %s of %s:%s %w%s; the target's column types must accept the publisher's values (nothing of this transaction was applied)", o.what, desc, col, err, detail(err)))
	}
	return desc.wrap(fmt.Errorf("applying %s of %s: %w%s", o.what, desc, err, detail(err)))
}

// detail returns the server's DETAIL of a failed statement, which names the
// key involved in a constraint violation ("Key (id)=(7) already exists.").
func detail(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Detail != "" {
		return " (" + strings.TrimSuffix(pe.Detail, ".") + ")"
	}
	return ""
}
