package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
)

// Where parapply applies (--target).
const (
	targetPostgres = "postgres"
	// targetCitus is a Citus coordinator and two workers (pgtest.StartCitus),
	// every table distributed by the first column of its primary key, 32
	// shards. PostgreSQL's subscription cannot fill one (it writes into
	// the coordinator's own empty shell tables, which Citus queries do not
	// read), so the built-in engine still applies to a plain server of the
	// same run: its figure is a scale, not a like-for-like.
	targetCitus = "citus"
)

func checkTarget(o options) error {
	switch o.target {
	case targetPostgres:
		return nil
	case targetCitus:
		if _, err := pgtest.CitusBinaries(); err != nil {
			return err
		}
		if len(o.layouts) != 1 || o.layouts[0] != layoutShared {
			return fmt.Errorf("--target citus runs in the shared layout only")
		}
		return nil
	}
	return fmt.Errorf("unknown --target %q (have postgres, citus)", o.target)
}

// citusPair starts a publisher and a Citus cluster whose coordinator is
// the pair's subscriber; stop stops both.
func citusPair(ctx context.Context, pub, sub pgtest.Options) (pair *pgtest.Pair, nodes []*pgtest.Server, stop func(), err error) {
	cl, err := pgtest.StartCitus(ctx, 2, sub)
	if err != nil {
		return nil, nil, nil, err
	}
	pub.Name = "publisher"
	p, err := pgtest.Start(ctx, pub)
	if err != nil {
		cl.Stop()
		return nil, nil, nil, err
	}
	logf("Citus coordinator and 2 workers started (PostgreSQL %d)", cl.Coordinator.Version)
	return &pgtest.Pair{Publisher: p, Subscriber: cl.Coordinator}, cl.Workers, func() { p.Stop(); cl.Stop() }, nil
}

// distribute makes every table of the coordinator that holds rows
// distributed by the first column of its primary key (a table without one
// a reference table), with 32 shards.
func distribute(ctx context.Context, sub *pgx.Conn, tables []string) error {
	if _, err := sub.Exec(ctx, "SET citus.shard_count = 32"); err != nil {
		return err
	}
	for _, t := range tables {
		var col *string
		err := sub.QueryRow(ctx, `SELECT a.attname::text FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			WHERE i.indrelid = $1::regclass AND i.indisprimary`, t).Scan(&col)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		q := fmt.Sprintf("SELECT create_reference_table('%s')", t)
		if col != nil {
			q = fmt.Sprintf("SELECT create_distributed_table('%s', '%s')", t, *col)
		}
		if _, err := sub.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	logf("distributed %s on the coordinator", strings.Join(tables, ", "))
	return nil
}

// nodeCPU is the CPU seconds of a Citus worker node: its postmaster's
// children alive now and those it has reaped (cutime, cstime), so that the
// connections the coordinator opened and closed count too.
func nodeCPU(postmaster int) float64 {
	total := 0.0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f := procStat(pid)
		if len(f) < 15 {
			continue
		}
		switch {
		case pid == postmaster:
			for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
				v, _ := strconv.ParseFloat(f[i], 64)
				total += v
			}
		case f[1] == strconv.Itoa(postmaster): // ppid
			for _, i := range []int{11, 12} {
				v, _ := strconv.ParseFloat(f[i], 64)
				total += v
			}
		}
	}
	return total / 100
}

// procStat returns the fields of /proc/pid/stat after the command name.
func procStat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}
