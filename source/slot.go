package source

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgerr"
)

// MakeFailover makes the slot Connect found a failover slot if the config
// asks for one and it is not (made before failover was asked for, or by an
// older release), as ALTER SUBSCRIPTION ... SET (failover = true) does. The
// caller calls it once its own checks have passed, as it does CreateSlot:
// a refused start leaves the slot as it was.
func (s *Source) MakeFailover(ctx context.Context) error {
	if s.Missing || !s.cfg.Failover || s.ServerVersion < failoverVersion || s.FailoverSlot {
		return nil
	}
	if _, err := s.query(ctx, "ALTER_REPLICATION_SLOT "+parapply.QuoteIdent(s.cfg.Slot)+" (FAILOVER true)"); err != nil {
		return fmt.Errorf("making slot %s a failover slot on the source: %w (or set failover = off)", s.cfg.Slot, err)
	}
	s.FailoverSlot = true
	return nil
}

// failoverVersion is the first PostgreSQL with failover slots.
const failoverVersion = 170000

// CreateSlot creates the slot (pgoutput) if Connect found it missing, with
// an exported snapshot if the config asks for one; the connection must then
// stay idle until the copy is done.
func (s *Source) CreateSlot(ctx context.Context) error {
	if !s.Missing {
		return nil
	}
	res, err := s.createSlot(ctx)
	if err != nil {
		return fmt.Errorf("creating replication slot %s on the source: %w (check max_replication_slots and that the role has REPLICATION)", s.cfg.Slot, err)
	}
	s.Missing, s.Created, s.Snapshot = false, true, res.SnapshotName
	if s.ConsistentPoint, err = parapply.ParseLSN(res.ConsistentPoint); err != nil {
		return fmt.Errorf("slot %s: %w", s.cfg.Slot, err)
	}
	s.Confirmed = s.ConsistentPoint
	return nil
}

// createSlot sends CREATE_REPLICATION_SLOT: with the option list and
// FAILOVER where the slot is to be a failover slot (PostgreSQL 17 and
// later), else in the form every supported version takes.
func (s *Source) createSlot(ctx context.Context) (pglogrepl.CreateReplicationSlotResult, error) {
	if !s.cfg.Failover || s.ServerVersion < failoverVersion {
		action := "NOEXPORT_SNAPSHOT"
		if s.cfg.ExportSnapshot {
			action = "EXPORT_SNAPSHOT"
		}
		return pglogrepl.CreateReplicationSlot(ctx, s.conn, parapply.QuoteIdent(s.cfg.Slot), "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	}
	snapshot := "'nothing'"
	if s.cfg.ExportSnapshot {
		snapshot = "'export'"
	}
	rows, err := s.query(ctx, "CREATE_REPLICATION_SLOT "+parapply.QuoteIdent(s.cfg.Slot)+" LOGICAL pgoutput (SNAPSHOT "+snapshot+", FAILOVER true)")
	if err != nil {
		return pglogrepl.CreateReplicationSlotResult{}, err
	}
	if len(rows) != 1 || len(rows[0]) < 4 {
		return pglogrepl.CreateReplicationSlotResult{}, fmt.Errorf("CREATE_REPLICATION_SLOT returned %d rows", len(rows))
	}
	s.FailoverSlot = true
	r := rows[0]
	return pglogrepl.CreateReplicationSlotResult{SlotName: string(r[0]), ConsistentPoint: string(r[1]), SnapshotName: string(r[2]), OutputPlugin: string(r[3])}, nil
}

// DropSlot drops the slot cfg names over a replication connection of its
// own, waiting (as long as ctx allows) for a walsender that still holds it
// to let go: for a start that created the slot and was refused, so that no
// slot is left on the publisher holding WAL for nobody.
func DropSlot(ctx context.Context, cfg Config) error {
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return pgerr.Parse("source", err)
	}
	pc.RuntimeParams["replication"] = "database"
	if cfg.AppName != "" {
		pc.RuntimeParams["application_name"] = cfg.AppName
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("connecting to the source %s: %w", describe(pc), pgerr.Short(err))
	}
	defer conn.Close(context.Background())
	if err := pglogrepl.DropReplicationSlot(ctx, conn, parapply.QuoteIdent(cfg.Slot), pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
		return fmt.Errorf("dropping replication slot %s on the source: %w", cfg.Slot, err)
	}
	return nil
}

// SnapshotSlot is a temporary slot whose exported snapshot serves a copy
// of tables that join later; closing it drops the slot.
type SnapshotSlot struct {
	conn            *pgconn.PgConn
	Snapshot        string
	ConsistentPoint parapply.LSN
}

// NewSnapshotSlot creates a temporary logical slot with an exported
// snapshot on a connection of its own.
func NewSnapshotSlot(ctx context.Context, cfg Config) (*SnapshotSlot, error) {
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, pgerr.Parse("source", err)
	}
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["application_name"] = cfg.AppName + " copy"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the source %s: %w", describe(pc), pgerr.Short(err))
	}
	name := fmt.Sprintf("%s_sync_%d", cfg.Slot, time.Now().UnixNano()%1_000_000_000)
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, parapply.QuoteIdent(name), "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("creating temporary slot %s for the copy: %w", name, err)
	}
	l, err := parapply.ParseLSN(res.ConsistentPoint)
	if err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return &SnapshotSlot{conn: conn, Snapshot: res.SnapshotName, ConsistentPoint: l}, nil
}

// Close ends the connection, which drops the temporary slot.
func (s *SnapshotSlot) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.conn.Close(ctx)
}
