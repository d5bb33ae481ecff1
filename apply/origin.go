package apply

import (
	"context"

	"github.com/parapply/parapply/target"
)

// SetupOrigin makes every later commit of the session one of the
// replication origin name (created on the target if missing), and every
// group's commit carries its last source transaction's end LSN and commit
// time as the origin's (pg_replication_origin_xact_setup).
func (a *Applier) SetupOrigin(ctx context.Context, name string) error {
	if err := a.wait(); err != nil {
		return err
	}
	err := target.SetupOrigin(ctx, a.conn, name)
	if err == nil {
		a.origin = name
	}
	return err
}
