package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPgcopydbEngineNames checks the engine names pgcopydb takes, its
// defaults and the errors of malformed settings.
func TestPgcopydbEngineNames(t *testing.T) {
	for _, tc := range []struct {
		name         string
		tables, idxs int
		err          string
	}{
		{name: "pgcopydb", tables: 2, idxs: 2},
		{name: "pgcopydb:table_jobs=4", tables: 4, idxs: 2},
		{name: "pgcopydb:index_jobs=3:table_jobs=1", tables: 1, idxs: 3},
		{name: "pgcopydb:table_jobs=0", err: `"table_jobs=0" is not table_jobs=N`},
		{name: "pgcopydb:table_jobs", err: `"table_jobs" is not table_jobs=N`},
		{name: "pgcopydb:split=2", err: `unknown pgcopydb setting "split"`},
		{name: "pgcopydbx", err: "is not pgcopydb"},
	} {
		tables, idxs, err := pgcopydbJobs(tc.name)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.err)
		case tc.err == "" && (err != nil || tables != tc.tables || idxs != tc.idxs):
			t.Errorf("%s: %d table jobs, %d index jobs, error %v; want %d, %d", tc.name, tables, idxs, err, tc.tables, tc.idxs)
		}
	}
}

// TestBringsOwnSchema checks which engines start an initial sync with an
// empty target, and that pgcopydb is refused without an initial-sync
// workload and left out of the others'.
func TestBringsOwnSchema(t *testing.T) {
	for e, want := range map[string]bool{
		"builtin": false, "drain": false, "parapply": false,
		"parapply:copy_workers=2":             false,
		"parapply:schema=none":                false,
		"parapply:schema=copy":                true,
		"parapply:copy_workers=4:schema=copy": true,
		"pgcopydb":                            true,
		"pgcopydb:table_jobs=4":               true,
	} {
		if got := bringsOwnSchema(e); got != want {
			t.Errorf("bringsOwnSchema(%q) = %v, want %v", e, got, want)
		}
	}
	if err := checkEngine("pgcopydb", []string{"update"}); err == nil || !strings.Contains(err.Error(), "initial-sync workloads only") {
		t.Errorf("pgcopydb without an initial-sync workload: %v", err)
	}
	if err := checkEngine("pgcopydb:index_jobs=1", []string{"update", "initial-sync-indexed"}); err != nil {
		t.Errorf("pgcopydb with an initial-sync workload: %v", err)
	}
	o := options{engines: []string{"builtin", "pgcopydb"}, workers: []int{autoWorkers}}
	for w, want := range map[string]int{"update": 1, "initial-sync": 2} {
		if got := len(cellsOf(o, w)); got != want {
			t.Errorf("%s: %d cells, want %d", w, got, want)
		}
	}
}

// TestPgClientWrappers makes the wrappers of a plain bin folder: each
// program runs the folder's, and pg_config names the wrappers' folder
// as the bin folder, which is how pgcopydb finds psql and pg_dump.
func TestPgClientWrappers(t *testing.T) {
	from, dir := t.TempDir(), t.TempDir()
	for _, p := range []string{"psql", "pg_dump", "pg_restore", "pg_config"} {
		if err := os.WriteFile(filepath.Join(from, p), []byte("#!/bin/sh\necho "+p+" \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeClientWrappers(from, dir); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ prog, arg, want string }{
		{"pg_config", "--bindir", dir},
		{"pg_config", "--version", "pg_config --version"},
		{"psql", "--version", "psql --version"},
		{"pg_dump", "-Fc", "pg_dump -Fc"},
	} {
		out, err := exec.Command(filepath.Join(dir, tc.prog), tc.arg).Output()
		if got := strings.TrimSpace(string(out)); err != nil || got != tc.want {
			t.Errorf("%s %s: %q, %v; want %q", tc.prog, tc.arg, got, err, tc.want)
		}
	}
	if err := os.Remove(filepath.Join(from, "pg_restore")); err != nil {
		t.Fatal(err)
	}
	if err := writeClientWrappers(from, t.TempDir()); err == nil || !strings.Contains(err.Error(), "has no pg_restore") {
		t.Errorf("a folder without pg_restore: %v", err)
	}
	if err := writeClientWrappers(t.TempDir(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither a bin folder") {
		t.Errorf("an empty folder: %v", err)
	}
}

// TestPgURI checks the URI pgcopydb is given for a key=value connection
// string.
func TestPgURI(t *testing.T) {
	got, err := pgURI("host=127.0.0.1 port=5433 user=postgres dbname=postgres sslmode=disable")
	if want := "postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable"; err != nil || got != want {
		t.Fatalf("pgURI: %q, %v; want %q", got, err, want)
	}
}

// TestPgcopydbNotInstalled checks that a machine without pgcopydb is told
// how to install it.
func TestPgcopydbNotInstalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if _, err := preparePgClient(""); err == nil || !strings.Contains(err.Error(), "apt-get install pgcopydb") {
		t.Fatalf("without pgcopydb in PATH: %v", err)
	}
}

// TestPgClientPackageTree checks that the programs of an unpacked package
// tree (as .ci/run makes) run through the tree's own loader and libraries.
func TestPgClientPackageTree(t *testing.T) {
	from := t.TempDir()
	bin := filepath.Join(from, "root/usr/lib/postgresql/18/bin")
	loader := filepath.Join(from, "root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
	for _, f := range []string{filepath.Join(bin, "psql"), loader} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gotBin, prefix, err := clientPrograms(from)
	libs := filepath.Join(from, "root/usr/lib/x86_64-linux-gnu") + ":" + filepath.Join(from, "root/lib/x86_64-linux-gnu")
	if want := shellQuote(loader) + " --library-path " + shellQuote(libs) + " "; err != nil || gotBin != bin || prefix != want {
		t.Fatalf("clientPrograms: %q, %q, %v; want %q, %q", gotBin, prefix, err, bin, want)
	}
}
