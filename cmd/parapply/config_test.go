package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

func TestParseValue(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "", want: ""},
		{in: "plain", want: "plain"},
		{in: "plain # comment", want: "plain"},
		{in: "plain#comment", want: "plain"},
		{in: "  spaced value  ", want: "spaced value"},
		{in: "# only a comment", want: ""},
		{in: "''", want: ""},
		{in: "'quoted'", want: "quoted"},
		{in: "'with space'", want: "with space"},
		{in: "'it''s'", want: "it's"},
		{in: "''''", want: "'"},
		{in: "'a''''b'", want: "a''b"},
		{in: "'has # hash'", want: "has # hash"},
		{in: "'host=x dbname=y' # the source", want: "host=x dbname=y"},
		{in: "'v'#c", want: "v"},
		{in: "'v'   ", want: "v"},
		{in: "'unterminated", wantErr: "unterminated quoted value"},
		{in: "'", wantErr: "unterminated quoted value"},
		{in: "'ends with escaped quote''", wantErr: "unterminated quoted value"},
		{in: "'v' extra", wantErr: "unexpected text after quoted value"},
		{in: "'v'x", wantErr: "unexpected text after quoted value"},
		{in: "'a' 'b'", wantErr: "unexpected text after quoted value"},
	}
	for _, tt := range tests {
		got, err := parseValue(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseValue(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseValue(%q) = %q, %v; want %q, nil", tt.in, got, err, tt.want)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "parapply.conf")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadConfigFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    map[string]string
		wantErr []string // substrings of the error; "FILE" stands for the path
	}{
		{
			name:    "equals",
			content: "slot = myslot\nbatch_rows=500\n",
			want:    map[string]string{"slot": "myslot", "batch_rows": "500"},
		},
		{
			name:    "without equals",
			content: "slot myslot\nstreaming   on\n",
			want:    map[string]string{"slot": "myslot", "streaming": "on"},
		},
		{
			name: "comments and blank lines",
			content: "# leading comment\n\n   \n\t# indented comment\n" +
				"slot = s1 # trailing comment\n" +
				"source = 'host=a dbname=b' # quoted, then a comment\n\n",
			want: map[string]string{"slot": "s1", "source": "host=a dbname=b"},
		},
		{
			name:    "quoted with escapes and equals signs",
			content: "application_name = 'it''s = fine'\n",
			want:    map[string]string{"application_name": "it's = fine"},
		},
		{
			name:    "upper-case names folded",
			content: "SLOT = upper\nBatch_Rows = 7\n",
			want:    map[string]string{"slot": "upper", "batch_rows": "7"},
		},
		{
			name:    "last assignment wins",
			content: "slot = first\nslot = second\n",
			want:    map[string]string{"slot": "second"},
		},
		{
			name:    "empty file",
			content: "",
			want:    map[string]string{},
		},
		{
			name:    "unknown parameter",
			content: "slot = ok\n\nno_such_thing = 1\n",
			wantErr: []string{"FILE:3:", `"no_such_thing"`, "unrecognized configuration parameter"},
		},
		{
			name:    "unknown upper-case parameter is reported folded",
			content: "Bogus = 1\n",
			wantErr: []string{"FILE:1:", `"bogus"`},
		},
		{
			name:    "name only",
			content: "# c\nslot\n",
			wantErr: []string{"FILE:2:", "expected name = value"},
		},
		{
			name:    "empty name",
			content: "= value\n",
			wantErr: []string{"FILE:1:", "expected name = value"},
		},
		{
			name:    "bad quoted value",
			content: "slot = 'open\n",
			wantErr: []string{"FILE:1:", "slot", "unterminated quoted value"},
		},
		{
			name:    "text after quote",
			content: "\n\nslot = 'a' b\n",
			wantErr: []string{"FILE:3:", "slot", "unexpected text after quoted value"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.content)
			got, err := readConfigFile(path)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("readConfigFile = %v, nil; want an error", got)
				}
				for _, s := range tt.wantErr {
					s = strings.ReplaceAll(s, "FILE", path)
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("readConfigFile: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("readConfigFile = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReadConfigFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.conf")
	_, err := readConfigFile(path)
	if err == nil || !strings.Contains(err.Error(), "configuration file") || !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("readConfigFile(missing) error = %v; want a wrapped not-exist error", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// clearEnv makes sure no PARAPPLY_ variable from the calling environment
// leaks into a test; t.Setenv restores the previous values afterwards.
func clearEnv(t *testing.T) {
	t.Helper()
	names := []string{"PARAPPLY_CONFIG"}
	for _, s := range settings {
		names = append(names, "PARAPPLY_"+strings.ToUpper(s.name))
	}
	for _, n := range names {
		t.Setenv(n, "")
		os.Unsetenv(n)
	}
}

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func TestLoadConfigPrecedence(t *testing.T) {
	const file = "slot = from_file\nbatch_rows = 200\nstatus_interval = 2s\napplication_name = 'file app'\n"
	tests := []struct {
		name string
		file bool // pass the file with --config
		env  map[string]string
		args []string
		want map[string]string // checked entries only
	}{
		{
			name: "defaults",
			want: map[string]string{"slot": "parapply", "batch_rows": "10000", "status_interval": "10s",
				"synchronous_commit": "off", "streaming": "on", "log_format": "text", "log_level": "info",
				"application_name": "parapply", "source": "", "target": "", "publication": ""},
		},
		{
			name: "file over defaults",
			file: true,
			want: map[string]string{"slot": "from_file", "batch_rows": "200", "status_interval": "2s",
				"application_name": "file app", "log_level": "info"},
		},
		{
			name: "environment over file",
			file: true,
			env:  map[string]string{"PARAPPLY_SLOT": "from_env", "PARAPPLY_BATCH_ROWS": "300", "PARAPPLY_LOG_LEVEL": "debug"},
			want: map[string]string{"slot": "from_env", "batch_rows": "300", "status_interval": "2s", "log_level": "debug"},
		},
		{
			name: "empty environment value still overrides",
			file: true,
			env:  map[string]string{"PARAPPLY_SLOT": ""},
			want: map[string]string{"slot": "", "batch_rows": "200"},
		},
		{
			name: "flags over environment",
			file: true,
			env:  map[string]string{"PARAPPLY_SLOT": "from_env", "PARAPPLY_BATCH_ROWS": "300"},
			args: []string{"--slot", "from_flag", "--batch-rows=400", "-synchronous-commit", "on"},
			want: map[string]string{"slot": "from_flag", "batch_rows": "400", "status_interval": "2s",
				"synchronous_commit": "on", "application_name": "file app"},
		},
		{
			name: "flags without file or environment",
			args: []string{"--status-interval=5s", "--application-name", "flag app", "--log-format", "json"},
			want: map[string]string{"status_interval": "5s", "application_name": "flag app", "log_format": "json", "slot": "parapply"},
		},
		{
			name: "explicit empty flag overrides",
			env:  map[string]string{"PARAPPLY_PUBLICATION": "pub"},
			args: []string{"--publication="},
			want: map[string]string{"publication": ""},
		},
		{
			name: "config file from environment",
			env:  map[string]string{"PARAPPLY_CONFIG": "FILE"},
			want: map[string]string{"slot": "from_file", "batch_rows": "200"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			path := writeFile(t, file)
			for k, v := range tt.env {
				if v == "FILE" {
					v = path
				}
				t.Setenv(k, v)
			}
			args := tt.args
			if tt.file {
				args = append([]string{"--config", path}, args...)
			}
			c, err := loadConfig(newFlagSet(), args)
			if err != nil {
				t.Fatalf("loadConfig(%q): %v", args, err)
			}
			if len(c) != len(settings) {
				t.Errorf("config has %d entries, want one per setting (%d): %v", len(c), len(settings), c)
			}
			for k, want := range tt.want {
				if got, ok := c[k]; !ok || got != want {
					t.Errorf("%s = %q (present %v), want %q", k, got, ok, want)
				}
			}
		})
	}
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		content string
		wantErr string
	}{
		{name: "unknown flag", args: []string{"--no-such-flag=1"}, wantErr: "no-such-flag"},
		{name: "underscore flag is not accepted", args: []string{"--batch_rows=1"}, wantErr: "batch_rows"},
		{name: "positional argument", args: []string{"--slot", "s", "extra"}, wantErr: `unexpected argument "extra"`},
		{name: "missing config file", args: []string{"--config", "FILE.missing"}, wantErr: "configuration file"},
		{name: "bad config file", args: []string{"--config", "FILE"}, content: "nope = 1\n", wantErr: `unrecognized configuration parameter "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			path := writeFile(t, tt.content)
			args := make([]string, len(tt.args))
			for i, a := range tt.args {
				args[i] = strings.ReplaceAll(a, "FILE", path)
			}
			c, err := loadConfig(newFlagSet(), args)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("loadConfig(%q) = %v, %v; want error containing %q", args, c, err, tt.wantErr)
			}
		})
	}
}

// readKind reads v with k as setting "x" and returns the error, if any.
func readKind(k kind, v string) error { return k.set("x", v) }

func TestBoolKind(t *testing.T) {
	for _, v := range []string{"on", "ON", "true", "True", "yes", "1"} {
		var got bool
		if err := readKind(boolean(&got), v); err != nil || !got {
			t.Errorf("bool(%q) = %v, %v; want true, nil", v, got, err)
		}
	}
	for _, v := range []string{"off", "OFF", "false", "no", "0", ""} {
		got := true
		if err := readKind(boolean(&got), v); err != nil || got {
			t.Errorf("bool(%q) = %v, %v; want false, nil", v, got, err)
		}
	}
	for _, v := range []string{"2", "y", "enable", " on", "tru"} {
		var got bool
		err := readKind(boolean(&got), v)
		if want := `x = "` + v + `" is not valid: choose on or off`; err == nil || err.Error() != want {
			t.Errorf("bool(%q) error = %v; want %s", v, err, want)
		}
	}
}

func TestIntKind(t *testing.T) {
	tests := []struct {
		v        string
		min, max int
		want     int
		wantErr  string
	}{
		{v: "1", min: 1, max: maxInt, want: 1},
		{v: "10000", min: 1, max: maxInt, want: 10000},
		{v: "0", min: 0, max: maxInt, want: 0},
		{v: "-3", min: -5, max: maxInt, want: -3},
		{v: "64", min: 1, max: 64, want: 64},
		{v: "65", min: 1, max: 64, wantErr: `x = "65" is not valid: an integer from 1 to 64`},
		{v: "0", min: 1, max: 64, wantErr: `x = "0" is not valid: an integer from 1 to 64`},
		{v: "0", min: 1, max: maxInt, wantErr: `x = "0" is not valid: an integer of at least 1`},
		{v: "-1", min: 0, max: maxInt, wantErr: `x = "-1" is not valid: an integer of at least 0`},
		{v: "", min: 0, max: maxInt, wantErr: `x = "" is not valid`},
		{v: "1.5", min: 0, max: maxInt, wantErr: `x = "1.5" is not valid`},
		{v: "1e3", min: 0, max: maxInt, wantErr: `x = "1e3" is not valid`},
		{v: "ten", min: 0, max: maxInt, wantErr: `x = "ten" is not valid`},
		{v: " 5", min: 0, max: maxInt, wantErr: `x = " 5" is not valid`},
	}
	for _, tt := range tests {
		got := -42
		err := readKind(integer(&got, tt.min, tt.max), tt.v)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got != -42 {
				t.Errorf("int(%q, %d..%d) = %d, %v; want error %q and the field left alone", tt.v, tt.min, tt.max, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("int(%q, %d..%d) = %d, %v; want %d", tt.v, tt.min, tt.max, got, err, tt.want)
		}
	}
}

func TestWorkersKind(t *testing.T) {
	tests := []struct {
		v       string
		want    int
		auto    bool
		wantErr bool
	}{
		{v: "auto", auto: true},
		{v: "AUTO", auto: true},
		{v: " auto ", auto: true},
		{v: "0", want: 0},
		{v: "4", want: 4},
		{v: "64", want: 64},
		{v: "65", wantErr: true},
		{v: "-1", wantErr: true},
		{v: "many", wantErr: true},
		{v: "", wantErr: true},
	}
	for _, tt := range tests {
		n, auto := -1, !tt.auto
		err := readKind(workers(&n, &auto), tt.v)
		if tt.wantErr {
			if want := `x = "` + tt.v + `" is not valid: an integer from 0 to 64, or auto`; err == nil || err.Error() != want {
				t.Errorf("workers(%q) error = %v; want %s", tt.v, err, want)
			}
			continue
		}
		if err != nil || auto != tt.auto || (!tt.auto && n != tt.want) {
			t.Errorf("workers(%q) = %d, auto %v, %v; want %d, auto %v", tt.v, n, auto, err, tt.want, tt.auto)
		}
	}
}

func TestDurationKind(t *testing.T) {
	tests := []struct {
		v       string
		off     bool // 0 allowed
		want    time.Duration
		wantErr bool
	}{
		{v: "10s", want: 10 * time.Second},
		{v: "1m30s", want: 90 * time.Second},
		{v: "250ms", want: 250 * time.Millisecond},
		{v: "1.5s", want: 1500 * time.Millisecond},
		{v: "5min", want: 5 * time.Minute}, // postgresql.conf's unit for minutes
		{v: "2h", want: 2 * time.Hour},
		{v: "1500", wantErr: true}, // a bare number: refused, naming both units
		{v: "5", wantErr: true},
		{v: " 10s ", want: 10 * time.Second},
		{v: "10", off: true, wantErr: true},
		{v: "0", off: true, want: 0},
		{v: " 0 ", off: true, want: 0},
		{v: "30s", off: true, want: 30 * time.Second},
		{v: "", wantErr: true},
		{v: "10 s", wantErr: true},
		{v: "soon", wantErr: true},
		{v: "0", wantErr: true},
		{v: "0s", wantErr: true},
		{v: "0s", off: true, wantErr: true}, // only 0 itself is off
		{v: "-1s", wantErr: true},
		{v: "-5", wantErr: true},
		{v: "1.5", wantErr: true}, // not an integer, and no unit
		{v: "1d", wantErr: true},
	}
	for _, tt := range tests {
		got := time.Duration(-1)
		err := readKind(duration(&got, tt.off), tt.v)
		if tt.wantErr {
			want := `x = "` + tt.v + `" is not valid: a duration above zero with its unit, such as 10s`
			if n := strings.TrimSpace(tt.v); n != "0" && isNumber(n) {
				want = `x = "` + tt.v + `" is not valid: a duration with its unit, such as ` + n + `ms or ` + n + `s (a bare number is refused`
			}
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("duration(%q, off %v) = %v, %v; want error %s", tt.v, tt.off, got, err, want)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("duration(%q, off %v) = %v, %v; want %v", tt.v, tt.off, got, err, tt.want)
		}
	}
}

func TestSizeKind(t *testing.T) {
	tests := []struct {
		v        string
		min      int
		optional bool
		want     int
		wantErr  string
	}{
		{v: "16MB", want: 16 << 20},
		{v: "16 MB", want: 16 << 20},
		{v: "16mb", want: 16 << 20},
		{v: "64kB", want: 64 << 10},
		{v: "1GB", want: 1 << 30},
		{v: "2TB", want: 2 << 40},
		{v: "4096", wantErr: `x = "4096" is not valid: a size with its unit, such as 16MB (units B, kB, MB, GB, TB; a bare number is refused`},
		{v: "100B", want: 100},
		{v: "", optional: true, want: 0},
		{v: "64kB", min: 64 << 10, want: 64 << 10},
		{v: "1MB", min: 64 << 10, optional: true, want: 1 << 20},
		{v: "63kB", min: 64 << 10, wantErr: `x = "63kB" is not valid: a size of at least 64kB`},
		{v: "65535B", min: 64 << 10, wantErr: `x = "65535B" is not valid: a size of at least 64kB`},
		{v: "", wantErr: `x = "" is not valid: a size with its unit, such as 16MB`},
		{v: "MB", wantErr: `x = "MB" is not valid`},
		{v: "0MB", wantErr: `x = "0MB" is not valid`},
		{v: "0", optional: true, wantErr: `x = "0" is not valid`},
		{v: "-1MB", wantErr: `x = "-1MB" is not valid`},
		{v: "16XB", wantErr: `x = "16XB" is not valid`},
		{v: "1.5MB", wantErr: `x = "1.5MB" is not valid`},
	}
	for _, tt := range tests {
		got := -1
		err := readKind(size(&got, max(tt.min, 1), tt.optional), tt.v)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("size(%q) = %v, %v; want error %q", tt.v, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("size(%q) = %v, %v; want %v", tt.v, got, err, tt.want)
		}
	}
}

func TestSizeText(t *testing.T) {
	for n, want := range map[int]string{1: "1B", 1023: "1023B", 1 << 10: "1kB", 64 << 10: "64kB", 1536 << 10: "1536kB", 16 << 20: "16MB", 1 << 30: "1GB", 3 << 40: "3TB"} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestListKinds(t *testing.T) {
	var l []string
	if err := readKind(list(&l), " a ,b,, c "); err != nil || !reflect.DeepEqual(l, []string{"a", "b", "c"}) {
		t.Errorf("list = %q, %v; want [a b c]", l, err)
	}
	var r *conflict.Rules
	if err := readKind(rules(&r), "insert_exists=skip"); err != nil || r.String() != "insert_exists=skip" {
		t.Errorf("rules = %q, %v; want insert_exists=skip", r.String(), err)
	}
	if err := readKind(rules(&r), "insert_exist=skip"); err == nil || !strings.Contains(err.Error(), "conflict_resolution") {
		t.Errorf("rules(insert_exist=skip) error = %v; want one naming conflict_resolution", err)
	}
	var lv slog.Level
	for v, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError, "info+2": slog.LevelInfo + 2} {
		if err := readKind(level(&lv), v); err != nil || lv != want {
			t.Errorf("level(%q) = %v, %v; want %v", v, lv, err, want)
		}
	}
	if err := readKind(level(&lv), "loud"); err == nil || err.Error() != `x = "loud" is not valid: choose debug, info, warn or error` {
		t.Errorf("level(loud) error = %v", err)
	}
}

// TestEnumSettings reads every value of each setting that takes one of a
// set of words, and a bad one, whose error names the setting, the value
// and the choices.
func TestEnumSettings(t *testing.T) {
	tests := []struct {
		name  string
		good  []string
		field func(o options) string
		bad   string
	}{
		{"commit_order", []string{"preserve", "dependency"}, func(o options) string { return string(o.CommitOrder) },
			`commit_order = "fast" is not valid: choose preserve or dependency`},
		{"on_error", []string{"stop", "skip_transaction"}, func(o options) string { return string(o.OnError) },
			`on_error = "fast" is not valid: choose stop or skip_transaction`},
		{"ddl", []string{"off", "apply"}, func(o options) string { return string(o.DDL) },
			`ddl = "fast" is not valid: choose off or apply`},
		{"existing_data", []string{"error", "truncate", "keep"}, func(o options) string { return string(o.ExistingData) },
			`existing_data = "fast" is not valid: choose error, truncate or keep`},
		{"sequences", []string{"none", "owned", "all"}, func(o options) string { return string(o.Sequences) },
			`sequences = "fast" is not valid: choose none, owned or all`},
		{"origin", []string{"any", "none"}, func(o options) string { return string(o.Origin) },
			`origin = "fast" is not valid: choose any or none`},
		{"synchronous_commit", []string{"on", "off", "local", "remote_write", "remote_apply"}, func(o options) string { return string(o.SynchronousCommit) },
			`synchronous_commit = "fast" is not valid: choose on, off, local, remote_write or remote_apply`},
		{"log_format", []string{"text", "json"}, func(o options) string { return string(o.LogFormat) },
			`log_format = "fast" is not valid: choose text or json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, v := range tt.good {
				o, err := config{tt.name: v}.options(tt.name)
				if err != nil || tt.field(o) != v {
					t.Errorf("%s = %q: read %q, %v", tt.name, v, tt.field(o), err)
				}
			}
			for _, v := range []string{"fast", "", strings.ToUpper(tt.good[0]), " " + tt.good[0]} {
				_, err := config{tt.name: v}.options(tt.name)
				want := strings.Replace(tt.bad, `"fast"`, strconv.Quote(v), 1)
				if err == nil || err.Error() != want {
					t.Errorf("%s = %q: error %v, want %s", tt.name, v, err, want)
				}
			}
		})
	}
}

// TestDefaultsRead: every setting's default is a value its kind takes, and
// reads to the value parapply always had.
func TestDefaultsRead(t *testing.T) {
	c := config{}
	for _, s := range settings {
		c[s.name] = s.def
		if _, err := c.options(s.name); err != nil {
			t.Errorf("default of %s: %v", s.name, err)
		}
	}
	o, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	want := options{Slot: "parapply", ApplicationName: "parapply", SynchronousCommit: "off", Streaming: true, DecodingWorkMem: 1 << 20, Failover: true,
		Origin: source.OriginAny, DetectConflicts: true, MaxClockSkew: time.Second, OnError: subscriber.OnErrorStop, DDL: subscriber.DDLOff, StreamWorkers: 2,
		Schema: schemacopy.Target, CopyData: true, CopyWorkers: 2, CopyDeferIndexes: true, ExistingData: tablesync.ExistingError, AutoWorkers: true, MaxWorkers: 8,
		CommitOrder: subscriber.CommitPreserve, Prefetch: true, Binary: true, PrefetchConnections: 16, BatchRows: 10000,
		GroupMaxChanges: 20000, GroupMaxBytes: 16 << 20, GroupMaxDelay: 200 * time.Millisecond, Sequences: sequences.Owned,
		SequenceSyncInterval: 30 * time.Second, LockTimeout: 10 * time.Second, ReconnectTimeout: 5 * time.Minute,
		StatusInterval: 10 * time.Second, LogFormat: "text", LogLevel: slog.LevelInfo}
	if o.Conflicts.String() != "" {
		t.Errorf("default conflict_resolution read as %q, want none", o.Conflicts)
	}
	want.Conflicts = o.Conflicts // a pointer
	if !reflect.DeepEqual(o, want) {
		t.Errorf("defaults read as\n%+v\nwant\n%+v", o, want)
	}
}

// TestHelpShowsKinds: run -h shows each flag with the word for its kind
// and its default, and the units a duration takes.
func TestHelpShowsKinds(t *testing.T) {
	clearEnv(t)
	var out strings.Builder
	helpOut = &out
	defer func() { helpOut = os.Stdout }()
	if _, err := loadConfig(newFlagSet(), []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("loadConfig(-h) = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	for _, want := range []string{
		"-batch-rows integer\n",
		"-commit-order preserve|dependency\n",
		"-existing-data error|truncate|keep\n",
		"-group-max-bytes size\n",
		"-group-max-delay duration\n",
		"with its unit: ms, s, min or h",
		"(default 200ms)",
		"-log-level debug|info|warn|error\n",
		"-streaming on|off\n",
		"-workers auto|integer\n",
		"(default auto)",
		"-publication list\n",
		"-source string\n",
		"-conflict-resolution list\n",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("run -h does not show %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "`") {
		t.Errorf("run -h shows a backquote:\n%s", help)
	}
}

func TestWithSourceEnv(t *testing.T) {
	tests := []struct {
		paced, trickle     string
		unpaced, noTrickle bool
	}{
		{"", "", false, false},
		{"off", "", true, false},
		{"", "off", false, true},
		{"off", "off", true, true},
		{"on", "on", false, false},
	}
	for _, tt := range tests {
		t.Setenv("PARAPPLY_PACED", tt.paced)
		t.Setenv("PARAPPLY_TRICKLE", tt.trickle)
		c := withSourceEnv(source.Config{Slot: "s"})
		if c.Unpaced != tt.unpaced || c.NoTrickle != tt.noTrickle || c.Slot != "s" {
			t.Errorf("PARAPPLY_PACED=%q PARAPPLY_TRICKLE=%q: Unpaced %v, NoTrickle %v, Slot %q; want %v, %v, s",
				tt.paced, tt.trickle, c.Unpaced, c.NoTrickle, c.Slot, tt.unpaced, tt.noTrickle)
		}
	}
}

// validConfig returns the defaults plus the three required settings.
func validConfig() config {
	c := config{}
	for _, s := range settings {
		c[s.name] = s.def
	}
	c["source"] = "host=src dbname=a"
	c["target"] = "host=dst dbname=b"
	c["publication"] = "pub"
	return c
}

func TestSubscriberConfigErrors(t *testing.T) {
	tests := []struct {
		name    string
		change  map[string]string
		wantErr []string
	}{
		{name: "no source", change: map[string]string{"source": ""}, wantErr: []string{"no source", "--source"}},
		{name: "no target", change: map[string]string{"target": ""}, wantErr: []string{"no target", "--target"}},
		{name: "no publication", change: map[string]string{"publication": ""}, wantErr: []string{"no publication", "--publication"}},
		{name: "only commas", change: map[string]string{"publication": " , ,"}, wantErr: []string{"--publication"}},
		{name: "bad streaming", change: map[string]string{"streaming": "sometimes"}, wantErr: []string{"streaming", `"sometimes"`}},
		{name: "zero batch rows", change: map[string]string{"batch_rows": "0"}, wantErr: []string{"batch_rows", `"0"`}},
		{name: "bad batch rows", change: map[string]string{"batch_rows": "lots"}, wantErr: []string{"batch_rows"}},
		{name: "bad status interval", change: map[string]string{"status_interval": "often"}, wantErr: []string{"status_interval"}},
		{name: "bad synchronous_commit", change: map[string]string{"synchronous_commit": "maybe"}, wantErr: []string{"synchronous_commit", `"maybe"`}},
		{name: "synchronous_commit is case sensitive", change: map[string]string{"synchronous_commit": "ON"}, wantErr: []string{"synchronous_commit"}},
		{name: "synchronous_commit true is not accepted", change: map[string]string{"synchronous_commit": "true"}, wantErr: []string{"synchronous_commit"}},
		{name: "bad workers", change: map[string]string{"workers": "many"}, wantErr: []string{"workers", `"many"`, "or auto"}},
		{name: "too many workers", change: map[string]string{"workers": "65"}, wantErr: []string{"workers", "0 to 64"}},
		{name: "zero max_workers", change: map[string]string{"workers": "auto", "max_workers": "0"}, wantErr: []string{"max_workers", `"0"`}},
		{name: "too many max_workers", change: map[string]string{"workers": "auto", "max_workers": "65"}, wantErr: []string{"max_workers", "1 to 64"}},
		{name: "a missing source is named before a bad setting", change: map[string]string{"source": "", "batch_rows": "0"}, wantErr: []string{"no source", "--source"}},
		{name: "bad commit_order", change: map[string]string{"commit_order": "fast"}, wantErr: []string{`commit_order = "fast" is not valid: choose preserve or dependency`}},
		{name: "bad on_error", change: map[string]string{"on_error": "skip"}, wantErr: []string{`on_error = "skip" is not valid: choose stop or skip_transaction`}},
		{name: "bad existing_data", change: map[string]string{"existing_data": "replace"}, wantErr: []string{`existing_data = "replace" is not valid: choose error, truncate or keep`}},
		{name: "bad sequences", change: map[string]string{"sequences": "some"}, wantErr: []string{`sequences = "some" is not valid: choose none, owned or all`}},
		{name: "bad origin", change: map[string]string{"origin": "local"}, wantErr: []string{"origin", "any or none"}},
		{name: "small logical_decoding_work_mem", change: map[string]string{"logical_decoding_work_mem": "32kB"}, wantErr: []string{"logical_decoding_work_mem", `"32kB"`, "at least 64kB"}},
		{name: "bad group_max_delay", change: map[string]string{"group_max_delay": "0"}, wantErr: []string{`group_max_delay = "0" is not valid`, "with its unit"}},
		{name: "bad lock_timeout", change: map[string]string{"lock_timeout": "0s"}, wantErr: []string{`lock_timeout = "0s"`}},
		{name: "bad conflict_resolution", change: map[string]string{"conflict_resolution": "insert_exist=skip"}, wantErr: []string{"conflict_resolution", `"insert_exist"`}},
		{name: "update_deleted without detection", change: map[string]string{"detect_conflicts": "off", "detect_update_deleted": "on"},
			wantErr: []string{"detect_update_deleted is on, but detect_conflicts is off"}},
		{name: "policies without detection", change: map[string]string{"detect_conflicts": "off", "conflict_resolution": "insert_exists=skip"},
			wantErr: []string{"conflict_resolution is set, but detect_conflicts is off"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			for k, v := range tt.change {
				c[k] = v
			}
			_, err := subscriberConfig(c, nil)
			if err == nil {
				t.Fatal("subscriberConfig succeeded; want an error")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestSubscriberConfigSynchronousCommit(t *testing.T) {
	for _, v := range []string{"on", "off", "local", "remote_write", "remote_apply"} {
		c := validConfig()
		c["synchronous_commit"] = v
		cfg, err := subscriberConfig(c, nil)
		if err != nil {
			t.Errorf("synchronous_commit %q: %v", v, err)
			continue
		}
		if string(cfg.Target.SynchronousCommit) != v {
			t.Errorf("synchronous_commit %q: got %q", v, cfg.Target.SynchronousCommit)
		}
	}
}

func TestSubscriberConfigPublications(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"pub", []string{"pub"}},
		{"a, b,,c", []string{"a", "b", "c"}},
		{" a ,b, ", []string{"a", "b"}},
		{",x,", []string{"x"}},
	}
	for _, tt := range tests {
		c := validConfig()
		c["publication"] = tt.in
		cfg, err := subscriberConfig(c, nil)
		if err != nil {
			t.Errorf("publication %q: %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(cfg.Source.Publications, tt.want) {
			t.Errorf("publication %q: got %q, want %q", tt.in, cfg.Source.Publications, tt.want)
		}
	}
}

func TestSubscriberConfigMapping(t *testing.T) {
	c := validConfig()
	c["slot"] = "myslot"
	c["application_name"] = "myapp"
	c["batch_rows"] = "123"
	c["streaming"] = "on"
	c["status_interval"] = "750ms"
	c["synchronous_commit"] = "remote_apply"
	o, err := c.read()
	if err != nil {
		t.Fatal(err)
	}
	log := o.logger(io.Discard)
	cfg, err := subscriberConfig(c, log)
	if err != nil {
		t.Fatalf("subscriberConfig: %v", err)
	}
	src, dst := cfg.Source, cfg.Target
	checks := []struct {
		what      string
		got, want any
	}{
		{"Source.DSN", src.DSN, "host=src dbname=a"},
		{"Source.Slot", src.Slot, "myslot"},
		{"Source.Publications", src.Publications, []string{"pub"}},
		{"Source.Streaming", src.Streaming, true},
		{"Source.AppName", src.AppName, "myapp"},
		{"Source.StatusInterval", src.StatusInterval, 750 * time.Millisecond},
		{"Target.DSN", dst.DSN, "host=dst dbname=b"},
		{"Target.AppName", dst.AppName, "myapp apply"},
		{"Target.Slot", dst.Slot, "myslot"},
		{"Target.SynchronousCommit", dst.SynchronousCommit, apply.SyncCommitRemoteApply},
		{"Target.BatchRows", dst.BatchRows, 123},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.what, ch.got, ch.want)
		}
	}
	if cfg.Log != log {
		t.Errorf("Log is not the logger passed in")
	}

	// The defaults map through as well.
	cfg, err = subscriberConfig(validConfig(), nil)
	if err != nil {
		t.Fatalf("subscriberConfig(defaults): %v", err)
	}
	if cfg.Source.Slot != "parapply" || cfg.Target.Slot != "parapply" || cfg.Source.AppName != "parapply" ||
		cfg.Target.AppName != "parapply apply" || cfg.Target.BatchRows != 10000 || !cfg.Source.Streaming || cfg.Source.DecodingWorkMem != "1024kB" || cfg.StreamWorkers != 2 ||
		cfg.Source.StatusInterval != 10*time.Second || cfg.Target.SynchronousCommit != "off" {
		t.Errorf("defaults mapped to Source %+v, Target %+v", cfg.Source, cfg.Target)
	}
	if !cfg.AutoWorkers || cfg.Workers != 8 {
		t.Errorf("default workers: AutoWorkers %v, Workers %d; want auto with 8", cfg.AutoWorkers, cfg.Workers)
	}
	for _, w := range []struct {
		workers, max string
		auto         bool
		n            int
	}{{"auto", "8", true, 8}, {"AUTO", "3", true, 3}, {"0", "8", false, 0}, {"4", "16", false, 4}} {
		c := validConfig()
		c["workers"], c["max_workers"] = w.workers, w.max
		cfg, err := subscriberConfig(c, nil)
		if err != nil || cfg.AutoWorkers != w.auto || cfg.Workers != w.n {
			t.Errorf("workers = %s, max_workers = %s: AutoWorkers %v, Workers %d, %v; want %v, %d", w.workers, w.max, cfg.AutoWorkers, cfg.Workers, err, w.auto, w.n)
		}
	}
	// An empty logical_decoding_work_mem keeps the publisher's own.
	empty := validConfig()
	empty["logical_decoding_work_mem"] = ""
	if cfg, err = subscriberConfig(empty, nil); err != nil || cfg.Source.DecodingWorkMem != "" {
		t.Errorf("logical_decoding_work_mem = '': got %q, %v; want it left to the publisher", cfg.Source.DecodingWorkMem, err)
	}
}

func TestNewLogger(t *testing.T) {
	c := validConfig()
	for _, f := range []string{"text", "json"} {
		c["log_format"] = f
		o, err := c.read()
		if err != nil {
			t.Errorf("log_format %q: %v", f, err)
			continue
		}
		var out strings.Builder
		o.logger(&out).Info("x")
		if json := strings.HasPrefix(out.String(), "{"); json != (f == "json") {
			t.Errorf("log_format %q logs %q", f, out.String())
		}
	}
	c["log_format"] = "xml"
	if _, err := c.read(); err == nil || !strings.Contains(err.Error(), "log_format") {
		t.Errorf("log_format xml: error %v, want one naming log_format", err)
	}
	c["log_format"] = "text"
	c["log_level"] = "loud"
	if _, err := c.read(); err == nil || !strings.Contains(err.Error(), "log_level") {
		t.Errorf("log_level loud: error %v, want one naming log_level", err)
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"run", "-h"}, {"status", "--help"}, {"demo", "--help"}, {"sync-sequences", "--help"}} {
		err := run(context.Background(), args)
		if code := exitCode(err); code != 0 {
			t.Errorf("parapply %v: exit status %d (%v), want 0", args, code, err)
		}
	}
	if code := exitCode(run(context.Background(), nil)); code != 2 {
		t.Errorf("parapply with no command: exit status %d, want 2", code)
	}
	for _, args := range [][]string{{"run", "--no-such-flag"}, {"skip", "--batch-rows", "5"}, {"nosuchcommand"}, {"drop", "extra"}} {
		err := run(context.Background(), args)
		if code := exitCode(err); code != 2 {
			t.Errorf("parapply %v: exit status %d (%v), want 2 (a usage error)", args, code, err)
		}
		if err != nil && !strings.Contains(err.Error(), "parapply") {
			t.Errorf("parapply %v: %v does not say where the commands or flags are listed", args, err)
		}
	}
}

// TestHelpPerCommand: -h prints to standard output, and each command lists
// its own flags, not every setting of run.
func TestHelpPerCommand(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		args          []string
		want, notWant []string
	}{
		{[]string{"run", "-h"}, []string{"usage: parapply run", "-batch-rows integer", "-workers auto|integer", "-config string"}, nil},
		{[]string{"check", "-h"}, []string{"usage: parapply check", "-json", "-batch-rows integer"}, nil},
		{[]string{"skip", "-h"}, []string{"usage: parapply skip", "-lsn string", "-list", "-target string", "-slot string"}, []string{"-batch-rows", "-workers", "-source"}},
		{[]string{"sync-sequences", "-h"}, []string{"-sequences none|owned|all", "-publication list"}, []string{"-batch-rows", "-workers"}},
		{[]string{"drop", "-h"}, []string{"-source string", "-target string", "-slot string"}, []string{"-batch-rows", "-publication"}},
		{[]string{"status", "-h"}, []string{"-watch", "-json"}, []string{"-batch-rows"}},
	}
	for _, tt := range tests {
		var out strings.Builder
		helpOut = &out
		err := run(context.Background(), tt.args)
		helpOut = os.Stdout
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("parapply %v: %v, want flag.ErrHelp", tt.args, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("parapply %v does not show %q:\n%s", tt.args, w, out.String())
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(out.String(), w) {
				t.Errorf("parapply %v shows %q, not its flag:\n%s", tt.args, w, out.String())
			}
		}
	}
}

// TestUnknownEnv: a PARAPPLY_ variable that is no setting is reported
// only when it is near the name of one (a misspelling), with that name;
// settings, parapply's other variables and the names scripts around it use
// for themselves (PARAPPLY_BIN, PARAPPLY_ARGS) are not.
func TestUnknownEnv(t *testing.T) {
	const warn = "parapply: warning: %s is set in the environment but is no setting of parapply; it is ignored (did you mean %s?)\n"
	for _, tt := range []struct {
		env  string
		want string // "" for no warning
	}{
		{"PARAPPLY_WOKERS=3", fmt.Sprintf(warn, "PARAPPLY_WOKERS", "PARAPPLY_WORKERS")},
		{"PARAPPLY_wokers=3", fmt.Sprintf(warn, "PARAPPLY_wokers", "PARAPPLY_WORKERS")},
		{"PARAPPLY_BATCHROWS=5", fmt.Sprintf(warn, "PARAPPLY_BATCHROWS", "PARAPPLY_BATCH_ROWS")},
		{"PARAPPLY_SLOTS=a", fmt.Sprintf(warn, "PARAPPLY_SLOTS", "PARAPPLY_SLOT")},
		{"PARAPPLY_CONFG=x", fmt.Sprintf(warn, "PARAPPLY_CONFG", "PARAPPLY_CONFIG")},
		{"PARAPPLY_DDL=apply", ""},
		{"PARAPPLY_WORKERS=2", ""},
		{"PARAPPLY_CONFIG=x", ""},
		{"PARAPPLY_TEST_SEED=1", ""},
		{"PARAPPLY_CPU_PROFILE=p", ""},
		{"PARAPPLY_BIN=/usr/local/bin/parapply", ""},
		{"PARAPPLY_ARGS=--workers 4", ""},
		{"PARAPPLY_DIR=/opt/parapply", ""},
		{"PARAPPLY_HOME=/opt/parapply", ""},
		{"PARAPPLY_VERSION=1.2", ""},
		{"PARAPPLY_LOG=/var/log/parapply", ""},
		{"PARAPPLY_OPTS=-v", ""},
		{"PARAPPLY_SHINY=1", ""},
		{"PATH=/bin", ""},
	} {
		var out strings.Builder
		warnUnknownEnv([]string{tt.env}, &out)
		if out.String() != tt.want {
			t.Errorf("%s: warned %q, want %q", tt.env, out.String(), tt.want)
		}
	}
}

// TestLoadConfigTyped: values from the file, the environment and flags are
// read by the same kinds, and a bad value gets the same error from each.
func TestLoadConfigTyped(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, "group_max_delay = 5ms\ncommit_order = dependency\nworkers = 2\nlogical_decoding_work_mem = '256 kB'\n")
	t.Setenv("PARAPPLY_WORKERS", "4")
	t.Setenv("PARAPPLY_LOCK_TIMEOUT", "2min")
	c, err := loadConfig(newFlagSet(), []string{"--config", path, "--group-max-bytes", "1MB", "--lock-timeout", "0"})
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	if o.GroupMaxDelay != 5*time.Millisecond || o.CommitOrder != subscriber.CommitDependency || o.Workers != 4 || o.AutoWorkers ||
		o.DecodingWorkMem != 256<<10 || o.GroupMaxBytes != 1<<20 || o.LockTimeout != 0 {
		t.Errorf("read %+v", o)
	}

	const want = `batch_rows = "zero" is not valid: an integer of at least 1`
	for _, src := range []string{"file", "environment", "flag"} {
		t.Run(src, func(t *testing.T) {
			clearEnv(t)
			var args []string
			switch src {
			case "file":
				args = []string{"--config", writeFile(t, "batch_rows = zero\n")}
			case "environment":
				t.Setenv("PARAPPLY_BATCH_ROWS", "zero")
			case "flag":
				args = []string{"--batch-rows", "zero"}
			}
			c, err := loadConfig(newFlagSet(), append(args, "--source", "s", "--target", "t", "--publication", "p"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := subscriberConfig(c, nil); err == nil || err.Error() != want {
				t.Errorf("batch_rows = zero from the %s: %v, want %s", src, err, want)
			}
		})
	}
}

// TestCheckDSN: a connection keyword libpq does not know, in keyword/value
// form or as a URI's query parameter, is refused with the nearest known
// one; known keywords, quoted values and strings the connection's parser
// is left to judge pass.
func TestCheckDSN(t *testing.T) {
	for _, tt := range []struct {
		dsn, want string // want "" for no error
	}{
		{"host=pub dbname=app user=repl", ""},
		{"host = pub  port=5432 password='a b\\' c=d' sslmode=require application_name=x", ""},
		{"postgres://repl:secret@pub:5432/app?sslmode=disable&application_name=x", ""},
		{"postgresql:///app?host=/tmp&target_session_attrs=read-write", ""},
		{"hostt=pub dbname=app", "unknown connection keyword hostt in source (did you mean host?)"},
		{"host=pub password='x hostt=y' dbnme=app", "unknown connection keyword dbnme in source (did you mean dbname?)"},
		{"host=pub database=app", "unknown connection keyword database in source (did you mean dbname?)"},
		{"host=pub ssl_mode=require", "unknown connection keyword ssl_mode in source (did you mean sslmode?)"},
		{"postgres://pub/app?sslmod=disable", "unknown connection keyword sslmod in source (did you mean sslmode?)"},
		{"host=pub search_path=app", "unknown connection keyword search_path in source: libpq knows no such keyword (server settings go in options='-c name=value')"},
		{"host=pub password='unterminated", ""}, // left to the parser
		{"", ""},
	} {
		err := checkDSN("source", tt.dsn)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("checkDSN(%q) = %q, want %q", tt.dsn, got, tt.want)
		}
	}
}

// TestLoadConfigDSNKeyword: every command's --source and --target (and
// those of the file and environment) are checked before it connects.
func TestLoadConfigDSNKeyword(t *testing.T) {
	clearEnv(t)
	t.Setenv("PARAPPLY_SOURCE", "host=pub dbname=app")
	_, err := loadConfig(newFlagSet(), []string{"--target", "hostt=sub dbname=app"}, "source", "target")
	if err == nil || err.Error() != "unknown connection keyword hostt in target (did you mean host?)" {
		t.Fatalf("loadConfig: %v", err)
	}
	var out strings.Builder
	err = (&StatusCommand{out: &out}).Run(context.Background(), []string{"--target", "host=sub", "--source", "hots=pub"})
	if err == nil || err.Error() != "unknown connection keyword hots in source (did you mean host?)" {
		t.Fatalf("status: %v", err)
	}
}

// TestSkipLine: the skip command a run's errors print carries the run's
// target without its secrets (or the configuration file the target came
// from) and its slot, quoted for the shell.
func TestSkipLine(t *testing.T) {
	file := writeFile(t, "target = 'host=sub dbname=app'\nslot = app\n")
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		target, slot, file, want string
	}{
		{"host=sub dbname=app user=apply password=secret", "app", "",
			"parapply skip --target 'host=sub dbname=app user=apply' --slot app"},
		{"host=sub password='s e\\'cret' dbname=app sslpassword=x", "parapply", "",
			"parapply skip --target 'host=sub dbname=app' --slot parapply"},
		{"postgres://apply:secret@sub:5432/app?sslmode=require&password=x", "app", "",
			"parapply skip --target 'postgres://apply@sub:5432/app?sslmode=require' --slot app"},
		{`host=sub dbname='it\'s'`, "my slot", "",
			`parapply skip --target 'host=sub dbname='\''it\'\''s'\''' --slot 'my slot'`},
		{"host=sub dbname=app", "app", file, "parapply skip --config " + shellQuote(abs) + " --slot app"},
		// The target came from the environment or a flag, not the file.
		{"host=other dbname=app", "app", file, "parapply skip --target 'host=other dbname=app' --slot app"},
	} {
		got := skipLine(options{Target: tt.target, Slot: tt.slot}, tt.file)
		if got != tt.want {
			t.Errorf("skipLine(%q, %q, %q):\n got %s\nwant %s", tt.target, tt.slot, tt.file, got, tt.want)
		}
	}
}

// TestCPUProfile: cpu_profile, from the file, the environment or a flag,
// makes run write a CPU profile (Go's pprof format, gzipped) when it ends;
// a file it cannot create refuses the run, naming the setting.
func TestCPUProfile(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name    string
		env     map[string]string
		args    []string
		path    string // the profile expected, "" for none
		wantErr string
	}{
		{name: "off by default"},
		{name: "flag", args: []string{"--cpu-profile", filepath.Join(dir, "flag.prof")}, path: filepath.Join(dir, "flag.prof")},
		{name: "environment", env: map[string]string{"PARAPPLY_CPU_PROFILE": filepath.Join(dir, "env.prof")}, path: filepath.Join(dir, "env.prof")},
		{name: "unwritable", args: []string{"--cpu-profile", filepath.Join(dir, "missing", "p.prof")},
			wantErr: "cpu_profile: open " + filepath.Join(dir, "missing", "p.prof") + ": no such file or directory (name a file parapply may write, or leave it empty)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := loadConfig(newFlagSet(), tt.args)
			if err != nil {
				t.Fatal(err)
			}
			o, _ := c.options()
			stop, err := startProfiles(o.CPUProfile)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			stop()
			if tt.path == "" {
				if o.CPUProfile != "" {
					t.Fatalf("cpu_profile %q, want empty", o.CPUProfile)
				}
				return
			}
			b, err := os.ReadFile(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
				t.Fatalf("%s holds %d bytes, not a gzipped profile", tt.path, len(b))
			}
		})
	}
}
