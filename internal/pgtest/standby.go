package pgtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// StartStandby makes a physical standby of primary and starts it, as
// pg_basebackup and a standby.signal would (the embedded binaries have no
// pg_basebackup): a physical slot on the primary named slot, reserving
// WAL; a copy of the primary's data directory taken between
// pg_backup_start and pg_backup_stop, with the backup label; and the
// settings of a standby that synchronizes failover slots
// (primary_conninfo naming a database, primary_slot_name,
// hot_standby_feedback, and from PostgreSQL 17 sync_replication_slots) in
// its postgresql.auto.conf, where opts' values for them win. The standby
// is a hot standby: it takes connections while it replays.
func StartStandby(ctx context.Context, primary *Server, slot string, opts Options) (*Server, error) {
	if primary.Version < 15 {
		return nil, fmt.Errorf("StartStandby needs PostgreSQL 15 or later (pg_backup_start); the primary is %d", primary.Version)
	}
	conn, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_create_physical_replication_slot($1, true)", slot); err != nil {
		return nil, fmt.Errorf("creating the standby's slot on the primary: %w", err)
	}
	if opts.Name == "" {
		opts.Name = "standby"
	}
	s, err := newServer(opts)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_backup_start('parapply test standby', true)"); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("pg_backup_start on the primary: %w", err)
	}
	copyErr := copyDataDir(primary.DataDir, s.DataDir, s.cred)
	var label, spcmap string
	if err := conn.QueryRow(ctx, "SELECT labelfile, spcmapfile FROM pg_catalog.pg_backup_stop(true)").Scan(&label, &spcmap); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("pg_backup_stop on the primary: %w", err)
	}
	if copyErr != nil {
		s.cleanup()
		return nil, fmt.Errorf("copying the primary's data directory: %w", copyErr)
	}
	files := map[string]string{"backup_label": label, "standby.signal": ""}
	if spcmap != "" {
		files["tablespace_map"] = spcmap
	}
	for name, body := range files {
		if err := writeOwned(filepath.Join(s.DataDir, name), []byte(body), 0o600, s.cred); err != nil {
			s.cleanup()
			return nil, err
		}
	}
	// The standby's own settings go where pg_basebackup -R puts them,
	// postgresql.auto.conf (opts' win), so that ALTER SYSTEM can change
	// them (sync_replication_slots: a test turns it on once the slot to
	// synchronize exists, or the worker may be in a long back-off).
	standby := map[string]string{
		"primary_conninfo":     fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres application_name=%s", primary.Port, opts.Name),
		"primary_slot_name":    slot,
		"hot_standby_feedback": "on",
	}
	if primary.Version >= 17 {
		standby["sync_replication_slots"] = "on"
	}
	rest := map[string]string{}
	for k, v := range opts.Settings {
		if _, ok := standby[k]; ok {
			standby[k] = v
		} else {
			rest[k] = v
		}
	}
	opts.Settings = rest
	auto := filepath.Join(s.DataDir, "postgresql.auto.conf")
	body, err := os.ReadFile(auto)
	if err != nil {
		s.cleanup()
		return nil, err
	}
	for k, v := range standby {
		body = append(body, fmt.Sprintf("%s = '%s'\n", k, strings.ReplaceAll(v, "'", "''"))...)
	}
	if err := writeOwned(auto, body, 0o600, s.cred); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, s.start(ctx, opts)
}

// skipInBackup are the data directory's entries a base backup leaves out
// (as pg_basebackup does): the running server's files, and the contents
// of directories the server rebuilds or the standby fetches (pg_wal, by
// streaming from its slot).
var skipInBackup = map[string]bool{
	"postmaster.pid": true, "postmaster.opts": true, "backup_label": true, "tablespace_map": true,
	"standby.signal": true, "recovery.signal": true,
}

var emptyInBackup = map[string]bool{
	"pg_wal": true, "pg_replslot": true, "pg_stat_tmp": true, "pg_dynshmem": true, "pg_notify": true,
	"pg_serial": true, "pg_snapshots": true, "pg_subtrans": true,
}

// copyDataDir copies a running server's data directory, files that vanish
// meanwhile left out (the backup's WAL replay makes the copy consistent).
func copyDataDir(from, to string, cred *syscall.Credential) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		top := strings.Split(rel, string(filepath.Separator))[0]
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			if err := mkdirOwned(dst, cred); err != nil {
				return err
			}
			if rel != "." && emptyInBackup[top] {
				if rel == "pg_wal" {
					return mkdirOwned(filepath.Join(dst, "archive_status"), cred)
				}
				return filepath.SkipDir
			}
			return nil
		}
		if skipInBackup[rel] || d.Name() == "pg_internal.init" || !d.Type().IsRegular() {
			return nil
		}
		return copyFile(path, dst, cred)
	})
}

func copyFile(from, to string, cred *syscall.Credential) error {
	in, err := os.Open(from)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return chownTo(to, cred)
}

func mkdirOwned(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return chownTo(dir, cred)
}

func writeOwned(path string, body []byte, mode os.FileMode, cred *syscall.Credential) error {
	if err := os.WriteFile(path, body, mode); err != nil {
		return err
	}
	return chownTo(path, cred)
}

func chownTo(path string, cred *syscall.Credential) error {
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}
