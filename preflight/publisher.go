package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/ddl"
	"github.com/parapply/parapply/internal/nearest"
	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/preflight/judge"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/subscriber"
)

// published is what the target's checks need of the publisher.
type published struct {
	reached bool
	role    string
	version int // server_version_num
	// slotExists: the run resumes from the slot (no copy of tables
	// already synced); tables: what the publications send, with the
	// publisher's columns; ops: what they publish (insert, update,
	// delete, truncate).
	slotExists bool
	tables     []pubTable
	ops        map[string]bool
	sequences  []sequences.Sequence
}

type pubTable struct {
	source.PublishedTable
	columns []Column
}

func (t pubTable) name() string { return quoteName(t.Schema, t.Name) }

const sidePub = "publisher"

func checkPublisher(ctx context.Context, cfg subscriber.Config, rep *Report) published {
	var p published
	conn, err := connect(ctx, "source", cfg.Source.DSN, cfg.Source.AppName)
	if err != nil {
		rep.add(sidePub, "connection", "", fail("", err.Error(), "check the source connection string (host, port, dbname, user, password) and the publisher's pg_hba.conf"))
		rep.unreachable(sidePub)
		return p
	}
	defer conn.Close(context.Background())
	p.reached = true
	var version, maxSlots, maxSenders, slots, senders int
	var walLevel, effectiveWAL string
	var super, replication, readStats bool
	err = conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int, pg_catalog.current_setting('wal_level'),
			coalesce(pg_catalog.current_setting('effective_wal_level', true), ''),
			pg_catalog.current_setting('max_replication_slots')::int, pg_catalog.current_setting('max_wal_senders')::int,
			(SELECT count(*) FROM pg_catalog.pg_replication_slots)::int,
			(SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'walsender')::int,
			current_user::text, r.rolsuper, r.rolreplication, pg_catalog.pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')
		FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`).Scan(&version, &walLevel, &effectiveWAL, &maxSlots, &maxSenders, &slots, &senders,
		&p.role, &super, &replication, &readStats)
	if err != nil {
		rep.add(sidePub, "connection", "", broken("", "reading the publisher's settings", err))
		return p
	}
	p.version = version
	rep.add(sidePub, "connection", fmt.Sprintf("PostgreSQL %d.%d as role %s", version/10000, version%10000, p.role),
		failing(judge.PublisherVersion(version, cfg.Source.Origin == source.OriginNone))...)
	if f := judge.WALLevel(walLevel, effectiveWAL); f != nil {
		rep.add(sidePub, "wal_level", "", failing(f)...)
	} else {
		rep.add(sidePub, "wal_level", judge.WALLevelDetail(walLevel, effectiveWAL))
	}
	switch {
	case super:
		rep.add(sidePub, "REPLICATION attribute", "superuser")
	case replication:
		rep.add(sidePub, "REPLICATION attribute", "role "+p.role+" has it")
	default:
		rep.add(sidePub, "REPLICATION attribute", "", failing(judge.Replication(p.role))...)
	}
	if super || readStats {
		rep.add(sidePub, "pg_read_all_stats (optional)", "parapply status shows the walsender's state")
	} else {
		rep.add(sidePub, "pg_read_all_stats (optional)", "", warn("", "parapply status cannot show the walsender's state and sync_state: role "+p.role+" may not read other sessions' statistics", "GRANT pg_read_all_stats TO "+ident(p.role)+";"))
	}
	if super || replication {
		rep.add(sidePub, "replication connection", "", replicationConnection(ctx, cfg)...)
	} else {
		rep.skip(sidePub, "replication connection", "the role lacks the REPLICATION attribute")
	}
	p.slotExists = checkSlot(ctx, conn, cfg.Source.Slot, subscriber.FirstStartSlotWait, maxSlots, slots, maxSenders, senders, rep)
	checkFailover(ctx, conn, cfg, version, rep)
	checkPublications(ctx, conn, cfg, &p, rep)
	checkDDL(ctx, conn, cfg, p.role, rep)
	return p
}

// checkDDL: with ddl = apply, the publisher's capture is there and follows
// the run's publications; with ddl = off, no capture sends what the run
// would pass over.
func checkDDL(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, role string, rep *Report) {
	const check = "DDL capture"
	st, err := ddl.Inspect(ctx, conn)
	if err != nil {
		rep.add(sidePub, check, "", broken("", "reading the publisher's event triggers", err))
		return
	}
	install := "parapply ddl install --source DSN --publication " + strings.Join(cfg.Source.Publications, ",")
	if cfg.DDL != subscriber.DDLApply {
		if st.Triggers {
			rep.add(sidePub, check, "", warn("", "the publisher sends its DDL (parapply ddl install was run) and ddl = off passes over it: the target's schema is to be changed by hand", "set ddl = apply, or parapply ddl uninstall --source DSN"))
			return
		}
		rep.add(sidePub, check, "none (ddl = off)")
		return
	}
	var probs []Problem
	switch {
	case !st.Triggers && !st.Function:
		probs = append(probs, warn("", "ddl = apply, and the publisher sends no DDL: no capture is installed", install))
	case !st.Triggers:
		probs = append(probs, warn("", "no event triggers: only DDL run through parapply.replicate_ddl(text) is sent", install+" (as a superuser)"))
	case st.Unreadable:
		probs = append(probs, warn("", "role "+role+" may not read which publications the capture follows (schema parapply): this check cannot tell whether it follows "+strings.Join(cfg.Source.Publications, ", ")+"; the capture itself works",
			strings.Join(ddl.Grants(ident(role)), " ")+" (as the capture's installer; or "+install+" --grant-to "+ident(role)+")"))
	default:
		for _, p := range cfg.Source.Publications {
			if !slices.Contains(st.Publications, p) {
				probs = append(probs, warn(p, "DDL on this publication's tables is not captured (the capture follows "+strings.Join(st.Publications, ", ")+")", install))
			}
		}
	}
	if st.EventTriggersOff && st.Triggers {
		probs = append(probs, warn("", "event_triggers is off: no DDL is captured", "ALTER SYSTEM SET event_triggers = on; SELECT pg_reload_conf();"))
	}
	if st.PublicMessages {
		probs = append(probs, warn("", "every role may call pg_logical_emit_message, and so send a statement parapply runs on the target", "where publisher roles are trusted less than the target role, revoke it from PUBLIC (docs/ddl.md shows how; the capture keeps working)"))
	}
	detail := "event triggers follow " + strings.Join(st.Publications, ", ")
	if !st.Triggers || st.Unreadable {
		detail = ""
	}
	rep.add(sidePub, check, detail, probs...)
}

// replicationConnection opens a replication connection as a run does:
// pg_hba.conf, max_wal_senders and the role's attribute all decide it.
func replicationConnection(ctx context.Context, cfg subscriber.Config) []Problem {
	pc, err := pgconn.ParseConfig(cfg.Source.DSN)
	if err != nil {
		return []Problem{fail("", pgerr.Parse("source", err).Error(), "")}
	}
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["application_name"] = cfg.Source.AppName + " check"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			return []Problem{broken("", "opening a replication connection", pgerr.Short(err))}
		}
		return []Problem{fail("", pgerr.Short(err).Error(), "allow it in the publisher's pg_hba.conf (a replication connection to a database matches the database's lines, as a plain one does) and keep a free max_wal_senders")}
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll(); err != nil {
		return []Problem{broken("", "IDENTIFY_SYSTEM", err)}
	}
	return nil
}

// checkSlot reports the slot: resumed from when it exists, room for it
// when it does not.
func checkSlot(ctx context.Context, conn *pgx.Conn, slot string, slotWait time.Duration, maxSlots, slots, maxSenders, senders int, rep *Report) (exists bool) {
	var slotType string
	var plugin, database, walStatus *string
	var active bool
	var pid *int
	err := conn.QueryRow(ctx, `SELECT slot_type, plugin::text, database::text, active, active_pid, wal_status
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, slot).Scan(&slotType, &plugin, &database, &active, &pid, &walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		rep.add(sidePub, "slot "+slot, "missing: created (pgoutput) at the first start", missingSlot(ctx, conn, slot, maxSlots, slots, maxSenders, senders)...)
		return false
	}
	if err != nil {
		rep.add(sidePub, "slot "+slot, "", broken("", "reading pg_replication_slots", err))
		return false
	}
	var current string
	_ = conn.QueryRow(ctx, "SELECT pg_catalog.current_database()::text").Scan(&current)
	var probs []Problem
	switch f := judge.Slot(slot, slotType, deref(plugin), deref(database), current); {
	case f != nil:
		probs = failing(f)
	case walStatus != nil && *walStatus == "lost":
		probs = append(probs, fail("", "slot "+slot+" was invalidated: the publisher removed WAL it needed (wal_status lost)", "retire it with parapply drop --slot "+slot+" --source ..., then start again with the initial copy"))
	case active && pid != nil:
		// A warning: the walsender may be going away (a subscriber that
		// just stopped), which a run waits for.
		var app string
		_ = conn.QueryRow(ctx, "SELECT coalesce(application_name, '') FROM pg_catalog.pg_stat_activity WHERE pid = $1", *pid).Scan(&app)
		probs = append(probs, warn("", slotHeld(slot, *pid, app, slotWait), judge.SlotInUse(slot, *pid, app).Fix))
	}
	rep.add(sidePub, "slot "+slot, "exists: the run resumes from it", probs...)
	return true
}

// missingSlot: the room a new slot needs (a free slot and a free
// walsender), and the slot of another name that was likely meant.
func missingSlot(ctx context.Context, conn *pgx.Conn, slot string, maxSlots, slots, maxSenders, senders int) []Problem {
	var probs []Problem
	if slots >= maxSlots {
		probs = append(probs, fail("", fmt.Sprintf("every replication slot is taken (max_replication_slots = %d)", maxSlots),
			fmt.Sprintf("drop a slot no one uses (SELECT pg_drop_replication_slot(name)), or ALTER SYSTEM SET max_replication_slots = %d; then restart the publisher", maxSlots+1)))
	}
	if senders >= maxSenders {
		probs = append(probs, fail("", fmt.Sprintf("every walsender is taken (max_wal_senders = %d)", maxSenders),
			fmt.Sprintf("ALTER SYSTEM SET max_wal_senders = %d; then restart the publisher", maxSenders+1)))
	}
	rows, _ := conn.Query(ctx, `SELECT slot_name::text FROM pg_catalog.pg_replication_slots
		WHERE plugin = 'pgoutput' AND database = pg_catalog.current_database() ORDER BY 1`)
	if others, err := pgx.CollectRows(rows, pgx.RowTo[string]); err == nil {
		if near := nearest.Name(slot, others); near != "" {
			probs = append(probs, warn("", "slot "+slot+" does not exist, but slot "+near+" does: did you mean it? A new slot starts over with an initial copy",
				"set slot = "+near+" to go on from it, or keep slot = "+slot+" to start anew"))
		}
	}
	return probs
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// slotHeld says what parapply run does with a slot another process
// streams from: it refuses to start, at once when the target records a
// live parapply holding the slot, else once the walsender has not let go
// within wait (one of a subscriber that just stopped does).
func slotHeld(slot string, pid int, app string, wait time.Duration) string {
	return fmt.Sprintf("%s: parapply run does not start while it is (it stops at once when the target records a live parapply holding it, else after waiting %s for the slot to be let go, as by a subscriber that just stopped)", judge.SlotInUse(slot, pid, app).What, wait)
}

// checkFailover says whether the slot survives the publisher's failover
// to a standby: a failover slot (PostgreSQL 17 and later) that a standby
// synchronizes, with synchronized_standby_slots keeping parapply from
// applying what that standby has not received.
func checkFailover(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, version int, rep *Report) {
	const check = "failover slot"
	var standbys int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_replication_slots WHERE slot_type = 'physical' AND active`).Scan(&standbys); err != nil {
		rep.add(sidePub, check, "", broken("", "reading pg_replication_slots", err))
		return
	}
	switch {
	case version < 170000 && standbys > 0:
		rep.add(sidePub, check, "", warn("", fmt.Sprintf("a standby streams from this publisher, but PostgreSQL %d has no failover slots: after a failover the slot is gone, and a new one misses the changes in between", version/10000),
			"see docs/operations.md (publisher failover) for the procedure and its risk"))
		return
	case version < 170000:
		rep.add(sidePub, check, fmt.Sprintf("PostgreSQL %d has none; no standby streams from a physical slot", version/10000))
		return
	case !cfg.Source.Failover:
		rep.add(sidePub, check, "failover = off")
		return
	}
	var sync string
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('synchronized_standby_slots')").Scan(&sync); err != nil {
		rep.add(sidePub, check, "", broken("", "reading synchronized_standby_slots", err))
		return
	}
	var probs []Problem
	if standbys == 0 {
		probs = append(probs, warn("", "no standby streams from a physical slot, so none keeps a copy of the slot",
			"on the standby: primary_slot_name = '<its physical slot>', hot_standby_feedback = on, sync_replication_slots = on, and dbname in primary_conninfo"))
	}
	if sync == "" {
		probs = append(probs, warn("", "synchronized_standby_slots is not set: parapply may apply changes the standby has not received, which its promotion would lose while the target keeps them",
			"ALTER SYSTEM SET synchronized_standby_slots = '<the standby's physical slot>'; SELECT pg_reload_conf();"))
	}
	detail := "the slot is a failover slot"
	if sync != "" {
		detail += "; synchronized_standby_slots = " + sync
	}
	rep.add(sidePub, check, detail, probs...)
}

// checkPublications reads the publications and what they send, then
// checks each published table on the publisher: the copy reads it, and
// without a replica identity the publisher refuses its updates and
// deletes.
func checkPublications(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, p *published, rep *Report) {
	if len(cfg.Source.Publications) == 0 {
		rep.add(sidePub, "publications", "", failing(judge.NoPublication())...)
		return
	}
	if probs, err := readPublications(ctx, conn, cfg.Source.Publications, p); err != nil || len(probs) > 0 {
		if err != nil {
			probs = []Problem{broken("", "reading pg_publication", err)}
		}
		rep.add(sidePub, "publications", "", probs...)
		return
	}
	tables, err := source.ListPublished(ctx, conn.PgConn(), cfg.Source.Publications)
	if err != nil {
		rep.add(sidePub, "publications", "", broken("", "listing the published tables", err))
		return
	}
	if len(tables) == 0 {
		rep.add(sidePub, "publications", strings.Join(cfg.Source.Publications, ", "), warn("", "the publications send no table", "ALTER PUBLICATION ... ADD TABLE ..."))
	} else {
		rep.add(sidePub, "publications", fmt.Sprintf("%s: %d tables", strings.Join(cfg.Source.Publications, ", "), len(tables)))
	}
	var read, identity []Problem
	for _, t := range tables {
		pt, r, id := checkPublishedTable(ctx, conn, cfg, p, t)
		read, identity = append(read, r...), append(identity, id...)
		if pt != nil {
			p.tables = append(p.tables, *pt)
		}
	}
	if len(tables) > 0 {
		what := "the initial copy reads them"
		if !cfg.CopyData {
			what = "copy_data is off: not read"
		}
		rep.add(sidePub, "published tables readable by the role", what, read...)
		rep.add(sidePub, "replica identity of published tables", "", identity...)
	}
	if cfg.Sequences != sequences.None {
		checkPublisherSequences(ctx, conn, cfg, p, rep)
	}
}

// readPublications reads what the publications publish (p.ops), and
// words each one the publisher lacks.
func readPublications(ctx context.Context, conn *pgx.Conn, pubs []string, p *published) ([]Problem, error) {
	rows, _ := conn.Query(ctx, `SELECT pubname::text, pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_catalog.pg_publication WHERE pubname = ANY($1)`, pubs)
	p.ops = map[string]bool{}
	found := map[string]bool{}
	var name string
	var ins, upd, del, trunc bool
	_, err := pgx.ForEachRow(rows, []any{&name, &ins, &upd, &del, &trunc}, func() error {
		found[name] = true
		p.ops["insert"] = p.ops["insert"] || ins
		p.ops["update"] = p.ops["update"] || upd
		p.ops["delete"] = p.ops["delete"] || del
		p.ops["truncate"] = p.ops["truncate"] || trunc
		return nil
	})
	if err != nil {
		return nil, err
	}
	var probs []Problem
	var existing []string
	for _, pub := range pubs {
		if found[pub] {
			continue
		}
		if existing == nil {
			rows, _ := conn.Query(ctx, `SELECT pubname::text FROM pg_catalog.pg_publication ORDER BY 1`)
			if existing, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				existing = []string{}
			}
		}
		what, fix := judge.MissingPublication(pub, existing)
		probs = append(probs, fail("", what, fix))
	}
	return probs, nil
}

// checkPublishedTable reads a published table on the publisher: whether
// the role may read it (read), whether its updates and deletes can be
// published (identity), and the columns sent (pt; nil when they could not
// be read).
func checkPublishedTable(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, p *published, t source.PublishedTable) (pt *pubTable, read, identity []Problem) {
	pt = &pubTable{PublishedTable: t}
	var oid uint32
	var readable bool
	var replident, owner string
	var hasKey bool
	var keyIndex *string
	err := conn.QueryRow(ctx, `SELECT c.oid, pg_catalog.has_schema_privilege(n.oid, 'USAGE') AND pg_catalog.has_table_privilege(c.oid, 'SELECT'),
			c.relreplident::text, EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)),
			pg_catalog.pg_get_userbyid(c.relowner)::text,
			(SELECT x.relname::text FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class x ON x.oid = i.indexrelid
			 WHERE i.indrelid = c.oid AND i.indisunique AND i.indimmediate AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
			   AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid
			       AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1]) AND NOT a.attnotnull)
			 ORDER BY x.relname LIMIT 1)
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
		t.Schema, t.Name).Scan(&oid, &readable, &replident, &hasKey, &owner, &keyIndex)
	if err != nil {
		return nil, []Problem{broken(pt.name(), "reading the table's catalog", err)}, nil
	}
	if !readable && cfg.CopyData {
		fix := "GRANT USAGE ON SCHEMA " + ident(t.Schema) + " TO " + ident(p.role) + "; GRANT SELECT ON " + pt.name() + " TO " + ident(p.role) + "; " +
			parapply.AlterDefaultPrivileges(owner, t.Schema, "SELECT", "TABLES", p.role)
		if p.slotExists {
			read = append(read, warn(pt.name(), "role "+p.role+" may not read it: a table not copied yet (one added to the publication) cannot be copied", fix))
		} else {
			read = append(read, fail(pt.name(), "role "+p.role+" may not read it: the initial copy reads it", fix))
		}
	}
	if (p.ops["update"] || p.ops["delete"]) && (replident == "n" || (replident == "d" && !hasKey)) {
		identity = append(identity, warn(pt.name(), "no replica identity: the publisher refuses UPDATE and DELETE of its rows", identityFix(pt.name(), keyIndex)))
	}
	cols, generated, _, err := readColumns(ctx, conn, oid)
	if err != nil {
		return nil, append(read, broken(pt.name(), "reading its columns", err)), identity
	}
	// The columns sent: those listed, or every one but the generated
	// (which the publisher sends only when listed).
	pt.columns = slices.DeleteFunc(cols, func(c Column) bool {
		if t.Columns != nil {
			return !slices.Contains(t.Columns, c.Name)
		}
		return generated[c.Name]
	})
	return pt, read, identity
}

// identityFix is the fix of a published table without a replica
// identity: the unique index on NOT NULL columns it has, if any (index),
// first; it identifies rows as a primary key would.
func identityFix(table string, index *string) string {
	if index != nil {
		return "ALTER TABLE " + table + " REPLICA IDENTITY USING INDEX " + ident(*index) + "; on the publisher (a unique index on NOT NULL columns), or add a primary key, or ALTER TABLE " + table + " REPLICA IDENTITY FULL;"
	}
	return "add a primary key (ALTER TABLE " + table + " ADD PRIMARY KEY (...);), or ALTER TABLE " + table + " REPLICA IDENTITY FULL; on the publisher"
}

// checkPublisherSequences: the sequences parapply carries must be
// readable on the publisher.
func checkPublisherSequences(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, p *published, rep *Report) {
	tables := make([]sequences.Table, len(p.tables))
	for i, t := range p.tables {
		tables[i] = sequences.Table{Schema: t.Schema, Name: t.Name}
	}
	seqs, from, err := sequences.Read(ctx, conn, cfg.Sequences, cfg.Source.Publications, tables)
	if err != nil {
		rep.add(sidePub, "sequences", "", warn("", err.Error(), ""))
		return
	}
	p.sequences = seqs
	var probs []Problem
	for _, s := range seqs {
		if !s.Readable {
			probs = append(probs, warn(s.QualifiedName(), "role "+p.role+" may not read it: it is not carried to the target", s.SourceGrant()))
		}
	}
	rep.add(sidePub, "sequences", fmt.Sprintf("%d sequences (sequences = %s: %s)", len(seqs), cfg.Sequences, from), probs...)
}

// readColumns reads a table's columns as Compare takes them, which are
// generated, and which are NOT NULL without a default (an insert that
// leaves them out is refused).
func readColumns(ctx context.Context, conn *pgx.Conn, oid uint32) (cols []Column, generated, required map[string]bool, err error) {
	rows, _ := conn.Query(ctx, `SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), t.typcategory::text,
			CASE WHEN t.typtype = 'e' THEN ARRAY(SELECT e.enumlabel::text FROM pg_catalog.pg_enum e WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder) END,
			a.attgenerated <> '', a.attnotnull AND NOT a.atthasdef AND a.attidentity = ''
		FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, oid)
	generated, required = map[string]bool{}, map[string]bool{}
	var c Column
	var gen, req bool
	_, err = pgx.ForEachRow(rows, []any{&c.Name, &c.Type, &c.Category, &c.Enum, &gen, &req}, func() error {
		c.Base, c.Mod = splitType(c.Type)
		cols = append(cols, c)
		generated[c.Name], required[c.Name] = gen, req
		c = Column{}
		return nil
	})
	return cols, generated, required, err
}

// connect opens a plain connection for the checks.
func connect(ctx context.Context, side, dsn, app string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, pgerr.Parse(side, err)
	}
	cc.RuntimeParams["application_name"] = app + " check"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, pgerr.Short(err)
	}
	return conn, nil
}

// ident quotes an identifier for a fix's SQL as quote_ident does: only
// where it must, so that the fix reads as a DBA would write it.
func ident(s string) string { return parapply.Ident(s) }
