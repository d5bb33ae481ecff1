package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/parapply/parapply"
	"github.com/parapply/parapply/progress"
)

// skipCommand records on the target that the next run of a slot is to skip
// the source transaction committed at --lsn, as ALTER SUBSCRIPTION ... SKIP
// does: the way past a transaction that cannot be applied (the error that
// stopped parapply names its commit LSN).
func skipCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("skip", flag.ContinueOnError)
	lsnFlag := fs.String("lsn", "", "commit LSN of the source transaction to skip (the one the error names, e.g. 0/1A2B3C4)")
	usageFor(fs, "parapply skip --target DSN --slot NAME --lsn LSN [--config FILE]")
	c, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	if c["target"] == "" || *lsnFlag == "" {
		return fmt.Errorf("skip needs --target, --slot (default %q) and --lsn, the commit LSN of the source transaction to skip", "parapply")
	}
	lsn, err := parapply.ParseLSN(*lsnFlag)
	if err != nil || lsn == 0 {
		return fmt.Errorf("invalid --lsn %q: give a commit LSN as PostgreSQL prints it, such as 0/1A2B3C4", *lsnFlag)
	}
	cc, err := pgx.ParseConfig(c["target"])
	if err != nil {
		return fmt.Errorf("target DSN: %w", err)
	}
	cc.RuntimeParams["application_name"] = c["application_name"] + " skip"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connecting to the target (host %s port %d database %s user %s): %w", cc.Host, cc.Port, cc.Database, cc.User, err)
	}
	defer conn.Close(context.Background())
	if err := progress.SetSkip(ctx, conn, c["slot"], lsn, ""); err != nil {
		return err
	}
	fmt.Fprintf(out, "slot %s: the source transaction committed at %s will be skipped, none of its changes applied, when parapply next starts (restart it if it runs); parapply.skip on the target holds the request until it is done\n", c["slot"], lsn)
	return nil
}
