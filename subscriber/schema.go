package subscriber

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/tablesync"
)

// copySchema is setup's step of schema = copy, before anything reads or
// changes the published tables on the target and before the slot is
// created (a refused copy leaves no slot holding WAL): on a start where
// the target lacks published tables, it dumps their definitions from the
// publisher (schemacopy) and runs, on the target, what it lacks of them
// (makeTables). Where the target has every published table it does
// nothing. With ddl = apply it makes them at the first start alone: at a
// later one, DDL still in the stream is to make them. made tells that it
// made tables.
func (s *Subscriber) copySchema(ctx context.Context, conn *pgx.Conn, src *source.Source, published []source.PublishedTable) (made bool, err error) {
	if s.cfg.Schema != schemacopy.Copy || len(published) == 0 {
		return false, nil
	}
	present, err := onTarget(ctx, conn, published)
	if err != nil {
		return false, err
	}
	if len(present) == len(published) {
		if !s.runs.toldSchema.Swap(true) {
			s.log.Info("schema = copy: the target has every published table; nothing to copy", "tables", len(published))
		}
		return false, nil
	}
	if s.cfg.DDL == DDLApply && !src.Missing {
		return false, nil
	}
	missing := absent(published, present)
	if err := refuseSynced(ctx, conn, s.cfg.Source.Slot, missing); err != nil {
		return false, err
	}
	return true, s.makeTables(ctx, conn, src.ServerVersion/10000, missing)
}

// makeTables brings the definitions of tables over from the publisher and
// runs on the target what it lacks of them (schemas, types, functions,
// sequences, the tables), in one transaction with the list of what runs
// later: their indexes and constraints, built by the copy of their rows
// (parapply.deferred_index), and the rest, after it
// (parapply.deferred_ddl, see runDeferredDDL). major is the publisher's
// major version.
func (s *Subscriber) makeTables(ctx context.Context, conn *pgx.Conn, major int, tables []source.PublishedTable) error {
	plan, err := s.dumpSchema(ctx, conn, major, tables)
	if err != nil {
		return err
	}
	return s.runPlan(ctx, plan, tables)
}

// absent are the published tables not in present.
func absent(published, present []source.PublishedTable) []source.PublishedTable {
	has := map[schemacopy.Name]bool{}
	for _, pt := range present {
		has[schemacopy.Name{Schema: pt.Schema, Name: pt.Name}] = true
	}
	var out []source.PublishedTable
	for _, pt := range published {
		if !has[schemacopy.Name{Schema: pt.Schema, Name: pt.Name}] {
			out = append(out, pt)
		}
	}
	return out
}

// qualifiedNames lists the tables' quoted, qualified names.
func qualifiedNames(ts []source.PublishedTable) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = parapply.QuoteIdent(t.Schema) + "." + parapply.QuoteIdent(t.Name)
	}
	return strings.Join(names, ", ")
}

// refuseSynced refuses to make anew a missing table the target records as
// copied for the slot: the stream goes on from that copy, and the table
// made now would stay empty.
func refuseSynced(ctx context.Context, conn *pgx.Conn, slot string, missing []source.PublishedTable) error {
	state, err := tablesync.LoadState(ctx, conn, slot)
	if err != nil {
		return err
	}
	var synced []source.PublishedTable
	for _, pt := range missing {
		if _, ok := state[syncTables([]source.PublishedTable{pt})[0].QualifiedName()]; ok {
			synced = append(synced, pt)
		}
	}
	if len(synced) == 0 {
		return nil
	}
	return Permanent(fmt.Errorf("schema = copy: the target records %s as copied for slot %s (parapply.sync_state), but lacks the tables: made anew they would miss every row copied before; restore them, or start over (parapply drop --slot %s, then run again)",
		qualifiedNames(synced), slot, slot))
}

// dumpSchema finds pg_dump, reads on the publisher what to leave out of
// the dump of tables and which table each index, constraint and sequence
// belongs to, dumps both sections, and asks the target which of their
// objects it has already: the plan makes the rest.
func (s *Subscriber) dumpSchema(ctx context.Context, conn *pgx.Conn, major int, tables []source.PublishedTable) (schemacopy.Plan, error) {
	bin, err := schemacopy.Find(ctx, s.cfg.PGDump, major)
	if err != nil {
		return schemacopy.Plan{}, Permanent(err)
	}
	dbname, env, err := schemacopy.Connection(s.cfg.Source.DSN)
	if err != nil {
		return schemacopy.Plan{}, Permanent(err)
	}
	pub, err := pgx.Connect(ctx, s.cfg.Source.DSN)
	if err != nil {
		return schemacopy.Plan{}, onPublisher(err)
	}
	defer pub.Close(context.Background())
	made := names(tables)
	read, err := schemacopy.ReadPublisher(ctx, pub, made)
	if err != nil {
		return schemacopy.Plan{}, onPublisher(err)
	}
	var scripts [2]schemacopy.Script
	for i, section := range []string{schemacopy.PreData, schemacopy.PostData} {
		out, err := schemacopy.Dump(ctx, bin, schemacopy.Args(dbname, section, read.Schemas, read.Exclude, nil), env)
		if err != nil {
			return schemacopy.Plan{}, Permanent(fmt.Errorf("schema = copy: dumping the published tables' definitions: %w", err))
		}
		scripts[i] = schemacopy.Split(out)
	}
	have, err := schemacopy.TargetHas(ctx, conn, schemacopy.Objects(scripts[0], scripts[1]))
	if err != nil {
		return schemacopy.Plan{}, err
	}
	s.log.Info("schema = copy: dumped the definitions of the published tables the target lacks", "pg_dump", bin, "tables", qualifiedNames(tables),
		"schemas", strings.Join(read.Schemas, ", "), "excluded", len(read.Exclude))
	return schemacopy.Choose(scripts[0], scripts[1], have, read, made, s.cfg.CopyData), nil
}

// names are the published tables' names.
func names(published []source.PublishedTable) []schemacopy.Name {
	out := make([]schemacopy.Name, len(published))
	for i, pt := range published {
		out[i] = schemacopy.Name{Schema: pt.Schema, Name: pt.Name}
	}
	return out
}

// runPlan runs the plan's pre-data on the target, on a session of its own
// (pg_dump's preamble sets what it needs for the session), in one
// transaction with the rows of what runs later; tables are those it
// makes.
func (s *Subscriber) runPlan(ctx context.Context, plan schemacopy.Plan, tables []source.PublishedTable) error {
	cc, err := pgx.ParseConfig(s.cfg.Target.DSN)
	if err != nil {
		return err
	}
	cc.RuntimeParams["application_name"] = s.targetName() + " schema"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(ctx, `SELECT lower(name) FROM pg_catalog.pg_settings`)
	known, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("schema = copy: reading the target's parameters: %w", err)
	}
	names := make(map[string]bool, len(known))
	for _, n := range known {
		names[n] = true
	}
	for _, q := range schemacopy.SessionSettings(plan.Preamble, names) {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("schema = copy: pg_dump's session settings on the target (%s): %w", q, err)
		}
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := schemacopy.RunNow(ctx, tx, plan.Now); err != nil {
			return err
		}
		return schemacopy.SaveDeferred(ctx, tx, s.cfg.Source.Slot, plan)
	})
	if err != nil {
		return schemaError(err)
	}
	s.log.Info("schema = copy: made the published tables on the target", "tables", qualifiedNames(tables), "statements", len(plan.Now),
		"indexes_after_copy", len(plan.Indexes), "statements_after_copy", len(plan.After))
	return nil
}

// schemaError words a failed schema copy: a type or function the target
// lacks comes from an extension, which a schema copy does not bring; a
// privilege, with its grant.
func schemaError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case pgerrcode.UndefinedObject, pgerrcode.UndefinedFunction:
			return Permanent(fmt.Errorf("%s: if it comes from an extension, run CREATE EXTENSION on the target first (schema = copy brings no extensions), then start again", pgerr.Text(err)))
		case pgerrcode.InsufficientPrivilege:
			return Permanent(fmt.Errorf("%s: schema = copy creates the published tables as the target role, which needs CREATE on their schemas (GRANT CREATE ON SCHEMA ... TO ...), or on the database for a schema it makes (GRANT CREATE ON DATABASE ... TO ...)", pgerr.Text(err)))
		}
		return Permanent(errors.New(pgerr.Text(err)))
	}
	return err
}

// runDeferredDDL runs, once the copy is done and before the stream
// starts, what a schema copy left for then (parapply.deferred_ddl): each
// statement in the transaction that deletes its row, so that a restart
// runs only what is left.
func (s *Subscriber) runDeferredDDL(ctx context.Context, conn *pgx.Conn) error {
	n, err := schemacopy.RunDeferred(ctx, conn, s.cfg.Source.Slot)
	if err != nil {
		return schemaError(err)
	}
	if n > 0 {
		s.log.Info("schema = copy: ran what waited for the copy (foreign keys, triggers, rules, policies)", "statements", n)
	}
	return nil
}
