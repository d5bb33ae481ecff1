package subscriber

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
)

// A run goes through four phases, each a function of its own file taking
// what the one before returned: connect (here: both servers reached and
// the target checked against the publication), claim (claim.go: the slot
// taken on the target), setup (setup.go: the target's origins, schema and
// table claims, the tombstones, the progress record, the tables' sync with
// the slot's creation, and the sequences: one package at a time, each
// once) and stream (stream.go: the loop that applies the stream until the run
// ends).

// connected is what the connect phase returns: the publisher's stream,
// the reader's own target session, and the tables published.
type connected struct {
	src       *source.Source
	app       *apply.Applier
	published []source.PublishedTable
}

// close closes what connect opened, the target session first.
func (c *connected) close() {
	c.app.Close(context.Background())
	c.src.Close()
}

// nameFault names the faults met on the reader's own target session, for
// Run to tell a fault from a refusal: deferred by run, it sees the error
// the run ends with, after the stream phase has closed what it opened.
func (c *connected) nameFault(err *error) {
	switch {
	case *err == nil || faultCause(*err) != "":
	case c.app.Closed():
		*err = lostConnection(*err)
	case isLockTimeout(*err):
		*err = errLockStall{fmt.Errorf("a change waited on a lock longer than lock_timeout: %w", *err)}
	}
}

// connect reaches the publisher (its slot and publications read) and the
// target, and checks the target can take the publication: every table
// there with its columns, and prepared transactions allowed if two_phase
// is on. What it returns, the caller closes (connected.close).
func (s *Subscriber) connect(ctx context.Context) (*connected, error) {
	scfg := s.cfg.Source
	scfg.ExportSnapshot = s.cfg.CopyData
	src, err := source.Connect(ctx, scfg)
	if err != nil {
		return nil, onPublisher(err)
	}
	s.runs.src.Store(src)
	app, err := s.openTarget(ctx, s.cfg.Target, false)
	if err != nil {
		src.Close()
		return nil, err
	}
	c := &connected{src: src, app: app, published: src.Published}
	if err := s.checkTarget(ctx, c); err != nil {
		c.nameFault(&err)
		c.close()
		return nil, err
	}
	return c, nil
}

// checkTarget refuses a target that cannot take the publication.
func (s *Subscriber) checkTarget(ctx context.Context, c *connected) error {
	rels := make([]*parapply.Relation, len(c.published))
	for i, pt := range c.published {
		rels[i] = &parapply.Relation{Namespace: pt.Schema, Name: pt.Name}
		for _, col := range pt.Columns {
			rels[i].Columns = append(rels[i].Columns, parapply.Column{Name: col})
		}
	}
	tables, err := targetdb.CheckTables(ctx, c.app.Conn(), rels)
	if err != nil && s.cfg.DDL == DDLApply && !c.src.Missing && errors.Is(err, targetdb.ErrSchema) {
		// The publisher's schema may be ahead by DDL still in the stream,
		// which brings the target level at its place; if it does not, the
		// first change the target cannot take stops the run.
		s.log.Warn("the target's schema is behind the publication's; with ddl = apply the DDL still to come in the stream is to bring it level (values travel in text this run)", "difference", err)
		tables, err = nil, nil
	}
	if err != nil && s.cfg.Schema == schemacopy.Copy && errors.Is(err, targetdb.ErrNoTable) {
		// The setup makes the tables (copySchema), then checks again and
		// chooses binary or text on the tables made.
		return s.checkTwoPhase(ctx, c)
	}
	if err != nil {
		return err
	}
	binary, why := s.chooseBinary(c.published, tables)
	s.runs.binary.Store(binary)
	c.src.SetBinary(binary)
	c.app.UseBinaryValues(binary)
	if !s.runs.binaryTold || why != s.runs.binaryWhy {
		s.runs.binaryTold, s.runs.binaryWhy = true, why
		if binary {
			s.log.Info("values travel in binary: every published column has the same built-in type on both sides, or an enum on the target")
		} else {
			s.log.Info("values travel in text, cast on the target", "reason", why)
		}
	}
	return s.checkTwoPhase(ctx, c)
}

// checkTwoPhase refuses, with two_phase on, a target that cannot prepare
// transactions.
func (s *Subscriber) checkTwoPhase(ctx context.Context, c *connected) error {
	if s.cfg.Source.TwoPhase {
		return targetdb.CheckTwoPhase(ctx, c.app.Conn())
	}
	return nil
}

// chooseBinary decides whether the run asks for values in binary: with the
// binary setting on, unless an earlier run of this process met a column
// that could not take them, when every column of the published tables that
// the target has too can take them as they come (targetdb.Column.BinaryFit).
// pgoutput's binary option is the whole stream's, so one column that cannot
// puts every table in text. why names what decided, "" for binary.
func (s *Subscriber) chooseBinary(published []source.PublishedTable, tables []*targetdb.Table) (bool, string) {
	switch {
	case !s.cfg.Binary:
		return false, "binary = off"
	case tables == nil && len(published) > 0:
		return false, "the target's schema is behind the publication's (ddl = apply)"
	case s.runs.textOnly.Load():
		return false, "a column met by an earlier run cannot take binary values"
	}
	for i, pt := range published {
		names := slices.Sorted(maps.Keys(pt.Types))
		for _, name := range names {
			c, ok := tables[i].ByName[name]
			if ok && (pt.Columns == nil || slices.Contains(pt.Columns, name)) && !c.BinaryFit(pt.Types[name]) {
				return false, fmt.Sprintf("column %s of %s.%s is of type %s on the target, and not of the same built-in type on the publisher (OID %d)",
					parapply.QuoteIdent(name), parapply.QuoteIdent(pt.Schema), parapply.QuoteIdent(pt.Name), c.Type, pt.Types[name])
			}
		}
	}
	return true, ""
}
