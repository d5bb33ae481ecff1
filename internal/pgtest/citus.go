package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// EnvCitusBin names a PostgreSQL bin directory whose installation has the
// Citus extension; by default Debian's postgresql-15.
const EnvCitusBin = "PARAPPLY_CITUS_BIN"

// CitusBinaries returns the bin directory of a PostgreSQL installation with
// Citus, or an error that says what is missing (tests skip with it).
func CitusBinaries() (string, error) {
	bin := os.Getenv(EnvCitusBin)
	if bin == "" {
		bin = "/usr/lib/postgresql/15/bin"
	}
	if _, err := os.Stat(filepath.Join(bin, "postgres")); err != nil {
		return "", fmt.Errorf("no PostgreSQL for Citus in %s (install postgresql-15 and Citus, or set %s): %w", bin, EnvCitusBin, err)
	}
	out, err := exec.Command(filepath.Join(bin, "pg_config"), "--pkglibdir").Output()
	if err != nil {
		return "", fmt.Errorf("pg_config in %s: %w", bin, err)
	}
	lib := filepath.Join(strings.TrimSpace(string(out)), "citus.so")
	if _, err := os.Stat(lib); err != nil {
		return "", fmt.Errorf("no Citus in the PostgreSQL of %s (%s missing)", bin, lib)
	}
	return bin, nil
}

// Cluster is a Citus coordinator and its workers, each a server on
// loopback with the extension created in database postgres and the workers
// added to the coordinator's metadata.
type Cluster struct {
	Coordinator *Server
	Workers     []*Server
}

// StartCitus starts a coordinator and n workers from CitusBinaries, with
// opts' settings on every node.
func StartCitus(ctx context.Context, n int, opts Options) (*Cluster, error) {
	bin, err := CitusBinaries()
	if err != nil {
		return nil, err
	}
	nodes := make([]*Server, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range nodes {
		o := opts
		o.BinDir = bin
		o.Name = "citus-coordinator"
		if i > 0 {
			o.Name = "citus-worker" + strconv.Itoa(i)
		}
		o.Settings = map[string]string{
			"shared_preload_libraries":           "citus",
			"citus.enable_statistics_collection": "off",
			// Citus commits a transaction that wrote on several nodes
			// with two-phase commit.
			"max_prepared_transactions": "100",
			// The nodes talk over loopback without TLS (and libpq would
			// look for client certificates in the caller's home).
			"citus.node_conninfo": "sslmode=disable",
		}
		for k, v := range opts.Settings {
			o.Settings[k] = v
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], errs[i] = Start(ctx, o)
			if errs[i] == nil {
				errs[i] = exec1(ctx, nodes[i], "CREATE EXTENSION citus")
			}
		}()
	}
	wg.Wait()
	c := &Cluster{Coordinator: nodes[0], Workers: nodes[1:]}
	if err := errors.Join(errs...); err != nil {
		c.Stop()
		return nil, err
	}
	err = exec1(ctx, c.Coordinator, fmt.Sprintf("SELECT citus_set_coordinator_host('127.0.0.1', %d)", c.Coordinator.Port))
	for _, w := range c.Workers {
		if err == nil {
			err = exec1(ctx, c.Coordinator, fmt.Sprintf("SELECT citus_add_node('127.0.0.1', %d)", w.Port))
		}
	}
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("setting up the Citus cluster: %w", err)
	}
	return c, nil
}

// exec1 runs one statement on s's database postgres.
func exec1(ctx context.Context, s *Server, sql string) error {
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s on %s: %w", sql, s.Name, err)
	}
	return nil
}

// Stop stops every node.
func (c *Cluster) Stop() error {
	var errs []error
	for _, s := range append([]*Server{c.Coordinator}, c.Workers...) {
		if s != nil {
			errs = append(errs, s.Stop())
		}
	}
	return errors.Join(errs...)
}
