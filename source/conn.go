package source

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/preflight/judge"
)

// Connect opens the replication connection and checks everything that would
// otherwise fail later: wal_level, the publications, the slot and whether
// another client holds it. It changes nothing on the publisher: the caller
// creates a missing slot (Missing) with CreateSlot, or makes an existing
// one a failover slot with MakeFailover, once its own checks have passed.
func Connect(ctx context.Context, cfg Config) (*Source, error) {
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, pgerr.Parse("source", err)
	}
	pc.RuntimeParams["replication"] = "database"
	// Like the built-in subscriber: values come in a form any server parses back.
	pc.RuntimeParams["datestyle"] = "ISO"
	pc.RuntimeParams["intervalstyle"] = "postgres"
	pc.RuntimeParams["extra_float_digits"] = "3"
	// And as it sets a secure search_path: a value naming an object (a
	// regclass, which travels in text) comes schema-qualified, so that
	// the target reads the same object whatever its search_path.
	pc.RuntimeParams["search_path"] = ""
	if cfg.AppName != "" {
		pc.RuntimeParams["application_name"] = cfg.AppName
	}
	if cfg.DecodingWorkMem != "" {
		pc.RuntimeParams["logical_decoding_work_mem"] = cfg.DecodingWorkMem
	}
	src := &Source{}
	pc.DialFunc = src.coalescingDialer(pc.DialFunc)
	pc.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		src.tap = &handover{r: r}
		return pgproto3.NewFrontend(src.tap, w)
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.InsufficientPrivilege {
			return nil, fmt.Errorf("connecting to the source %s: %w; %w", describe(pc), pgerr.Short(err), judge.Replication(pc.User))
		}
		return nil, fmt.Errorf("connecting to the source %s: %w", describe(pc), pgerr.Short(err))
	}
	s := src
	s.cfg, s.conn, s.Database = cfg, conn, pc.Database
	if err := s.check(ctx); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return s, nil
}

func describe(pc *pgconn.Config) string {
	return fmt.Sprintf("(host %s port %d database %s user %s)", pc.Host, pc.Port, pc.Database, pc.User)
}

func (s *Source) query(ctx context.Context, sql string) ([][][]byte, error) {
	res, err := s.conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	return res[len(res)-1].Rows, nil
}
