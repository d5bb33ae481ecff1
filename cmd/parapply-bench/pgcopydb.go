package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// pgcopydb is the tool DBAs reach for to make a first copy: it restores
// the source's pre-data schema, copies the tables in parallel, then builds
// indexes and constraints in parallel. The bench runs its clone once into
// an empty target and times it from start to exit (initial-sync workloads
// only).

// pgcopydbDefaultJobs is pgcopydb's table and index jobs unless the
// engine's name sets them: the two cores the benchmark is measured on.
const pgcopydbDefaultJobs = 2

// pgcopydbJobs reads an engine name pgcopydb[:table_jobs=N][:index_jobs=M],
// so that one run can compare pgcopydb at several levels of parallelism.
func pgcopydbJobs(e string) (tableJobs, indexJobs int, err error) {
	tableJobs, indexJobs = pgcopydbDefaultJobs, pgcopydbDefaultJobs
	if e == "pgcopydb" {
		return tableJobs, indexJobs, nil
	}
	rest, ok := strings.CutPrefix(e, "pgcopydb:")
	if !ok {
		return 0, 0, fmt.Errorf("engine %q is not pgcopydb", e)
	}
	for _, kv := range strings.Split(rest, ":") {
		name, value, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > 64 {
			return 0, 0, fmt.Errorf("engine %q: %q is not table_jobs=N or index_jobs=N (N from 1 to 64)", e, kv)
		}
		switch name {
		case "table_jobs":
			tableJobs = n
		case "index_jobs":
			indexJobs = n
		default:
			return 0, 0, fmt.Errorf("engine %q: unknown pgcopydb setting %q (table_jobs, index_jobs)", e, name)
		}
	}
	return tableJobs, indexJobs, nil
}

// isPgcopydb tells pgcopydb's engines (with or without settings) from
// the others.
func isPgcopydb(e string) bool { return e == "pgcopydb" || strings.HasPrefix(e, "pgcopydb:") }

// bringsOwnSchema tells the engines that make the target's tables
// themselves (pgcopydb, parapply with schema = copy): for the
// initial-sync workloads their subscriber starts with an empty database.
func bringsOwnSchema(e string) bool {
	if isPgcopydb(e) {
		return true
	}
	if !isParapply(e) {
		return false
	}
	_, flags, err := parapplySettings(e)
	if err != nil {
		return false
	}
	for i := 0; i+1 < len(flags); i += 2 {
		if flags[i] == "--schema" && flags[i+1] == "copy" {
			return true
		}
	}
	return false
}

// pgClientDefault is where .ci/run unpacks PostgreSQL 18's client
// programs (pg_dump, pg_restore, psql) with their own loader.
func pgClientDefault() string {
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	dir := filepath.Join(cache, "parapply", "pg_dump-18")
	if _, err := os.Stat(filepath.Join(dir, "root")); err != nil {
		return ""
	}
	return dir
}

// pgClient is the folder of client programs pgcopydb runs: wrappers of
// the --pg-client installation, with a pg_config that names the folder
// (pgcopydb finds psql, pg_dump and pg_restore through PG_CONFIG).
type pgClient struct {
	dir   string // the wrappers; "" lets pgcopydb search PATH
	major int    // psql's major version
}

// preparePgClient checks that pgcopydb is installed and makes the folder
// of client programs from --pg-client (a bin folder, or an unpacked
// package tree with its own loader, as .ci/run makes).
func preparePgClient(from string) (pgClient, error) {
	if _, err := exec.LookPath("pgcopydb"); err != nil {
		return pgClient{}, errors.New("pgcopydb is not installed (not found in PATH): install it with apt-get install pgcopydb")
	}
	var c pgClient
	if from != "" {
		dir, err := os.MkdirTemp("", "parapply-bench-pgclient-")
		if err != nil {
			return c, err
		}
		if err := writeClientWrappers(from, dir); err != nil {
			os.RemoveAll(dir)
			return c, err
		}
		c.dir = dir
	}
	psql := "psql"
	if c.dir != "" {
		psql = filepath.Join(c.dir, "psql")
	}
	out, err := exec.Command(psql, "--version").CombinedOutput()
	if err != nil {
		return c, fmt.Errorf("pgcopydb's client programs: %s --version: %w: %s (name a PostgreSQL client installation with --pg-client DIR)", psql, err, strings.TrimSpace(string(out)))
	}
	m := regexp.MustCompile(`\(PostgreSQL\) (\d+)`).FindSubmatch(out)
	if m == nil {
		return c, fmt.Errorf("pgcopydb's client programs: cannot read the version of %s: %q", psql, out)
	}
	c.major, _ = strconv.Atoi(string(m[1]))
	logf("pgcopydb runs the client programs of PostgreSQL %d (%s)", c.major, strings.TrimSpace(string(out)))
	return c, nil
}

// writeClientWrappers writes into dir one script per program of the
// installation from, each running it (through the tree's own loader for
// an unpacked package tree), and a pg_config whose --bindir is dir.
func writeClientWrappers(from, dir string) error {
	bin, prefix, err := clientPrograms(from)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(bin)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		body := fmt.Sprintf("#!/bin/sh\nexec %s%s \"$@\"\n", prefix, shellQuote(filepath.Join(bin, name)))
		if name == "pg_config" {
			body = fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = --bindir ]; then echo %s; exit 0; fi\n", shellQuote(dir)) + body[len("#!/bin/sh\n"):]
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			return err
		}
	}
	for _, need := range []string{"pg_config", "psql", "pg_dump", "pg_restore"} {
		if _, err := os.Stat(filepath.Join(dir, need)); err != nil {
			return fmt.Errorf("--pg-client %s has no %s (pgcopydb needs pg_config, psql, pg_dump and pg_restore)", from, need)
		}
	}
	return nil
}

// clientPrograms finds the bin folder of a client installation, and the
// loader command that must run its programs ("" for a plain bin folder).
func clientPrograms(from string) (bin, prefix string, err error) {
	if _, err := os.Stat(filepath.Join(from, "psql")); err == nil {
		return from, "", nil
	}
	root := filepath.Join(from, "root")
	bins, _ := filepath.Glob(filepath.Join(root, "usr/lib/postgresql/*/bin"))
	loaders, _ := filepath.Glob(filepath.Join(root, "usr/lib/*/ld-linux*.so.*"))
	if len(bins) != 1 || len(loaders) == 0 {
		return "", "", fmt.Errorf("--pg-client %s is neither a bin folder holding psql nor an unpacked package tree (root/usr/lib/postgresql/N/bin and its loader)", from)
	}
	arch := filepath.Base(filepath.Dir(loaders[0]))
	libs := filepath.Join(root, "usr/lib", arch) + ":" + filepath.Join(root, "lib", arch)
	return bins[0], shellQuote(loaders[0]) + " --library-path " + shellQuote(libs) + " ", nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// pgURI writes a key=value connection string as the URI pgcopydb takes.
func pgURI(dsn string) (string, error) {
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	u := url.URL{Scheme: "postgres", User: url.User(c.User), Host: c.Host + ":" + strconv.Itoa(int(c.Port)), Path: "/" + c.Database, RawQuery: "sslmode=disable"}
	if c.Password != "" {
		u.User = url.UserPassword(c.User, c.Password)
	}
	return u.String(), nil
}

// pgcopydbEngine runs one pgcopydb clone, in a fresh work folder.
type pgcopydbEngine struct {
	args []string
	env  []string
	work string // the --dir of the run
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	// cpu (seconds) and rssMB: the process tree's, once it exited.
	cpu, rssMB float64
}

// newPgcopydb makes the engine of a pgcopydb clone from the publisher
// to the subscriber, refusing client programs older than the servers.
func newPgcopydb(ctx context.Context, r *runEnv, name string) (*pgcopydbEngine, error) {
	tableJobs, indexJobs, _ := pgcopydbJobs(name) // checked with the options
	var num int
	if err := r.pub.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		return nil, err
	}
	if c := r.o.pgClient; c.major < num/10000 {
		return nil, fmt.Errorf("pgcopydb needs pg_dump, pg_restore and psql of the servers' version (%d) or newer, and has %d's: name a PostgreSQL %d client with --pg-client DIR", num/10000, c.major, num/10000)
	}
	src, err := pgURI(r.pubDSN)
	if err != nil {
		return nil, err
	}
	dst, err := pgURI(r.subDSN)
	if err != nil {
		return nil, err
	}
	e := &pgcopydbEngine{env: os.Environ()}
	if e.work, err = os.MkdirTemp("", "parapply-bench-pgcopydb-"); err != nil {
		return nil, err
	}
	e.args = []string{"clone", "--source", src, "--target", dst, "--table-jobs", strconv.Itoa(tableJobs), "--index-jobs", strconv.Itoa(indexJobs), "--dir", e.work}
	if d := r.o.pgClient.dir; d != "" {
		e.env = append(e.env, "PG_CONFIG="+filepath.Join(d, "pg_config"), "PATH="+d+":"+os.Getenv("PATH"))
	}
	return e, nil
}

func (e *pgcopydbEngine) start(ctx context.Context) error {
	logf("pgcopydb %s", strings.Join(e.args, " "))
	e.cmd = exec.Command("pgcopydb", e.args...)
	e.cmd.Env = e.env
	e.cmd.Stdout, e.cmd.Stderr = &e.out, &e.out
	// Its own process group: a stop ends its children (pg_dump,
	// pg_restore, its copy and index workers) too.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	e.done = make(chan struct{})
	if err := e.cmd.Start(); err != nil {
		return fmt.Errorf("starting pgcopydb: %w", err)
	}
	go func() { _ = e.cmd.Wait(); close(e.done) }() // the exit is read from ProcessState
	return nil
}

// wait waits for the clone to exit, and fails with the end of its log
// unless it succeeded.
func (e *pgcopydbEngine) wait(ctx context.Context) error {
	select {
	case <-e.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	st := e.cmd.ProcessState
	// The process tree's: pgcopydb waits for every child it forks or
	// runs, and a waited child's time and peak RSS count in its parent's.
	e.cpu = (st.UserTime() + st.SystemTime()).Seconds()
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		e.rssMB = float64(ru.Maxrss) / 1024
	}
	if !st.Success() {
		return fmt.Errorf("pgcopydb clone failed (%s): %s", st, lastLines(e.out.String(), 15))
	}
	if os.Getenv("PARAPPLY_BENCH_SHOW_LOG") != "" {
		fmt.Fprint(os.Stderr, e.out.String())
	}
	return nil
}

// lastLines is the end of a log, for an error.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (e *pgcopydbEngine) stop() float64 {
	if e.cmd != nil && e.cmd.Process != nil {
		select {
		case <-e.done:
		default:
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-e.done:
			case <-time.After(30 * time.Second):
				_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
				<-e.done
			}
		}
	}
	return e.rssMB
}

func (e *pgcopydbEngine) appName() string { return "pgcopydb" }

func (e *pgcopydbEngine) close() {
	e.stop()
	_ = os.RemoveAll(e.work)
}
