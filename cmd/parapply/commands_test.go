package main

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"
)

// TestCommandSettingsRefused: each command reads its settings typed and
// refuses what it lacks before it connects anywhere, with the message and
// exit status it always had; a setting it does not take, bad in the
// configuration file, is passed over.
func TestCommandSettingsRefused(t *testing.T) {
	const (
		dropNeeds    = `drop needs --target and --slot (default "parapply"); with --source it drops the slot on the publisher too`
		skipNeeds    = `skip needs --target, --slot (default "parapply") and either --lsn, the commit LSN of the source transaction to skip, or --list`
		verifyNeeds  = "verify needs --source, --target and --publication"
		cutoverNeeds = "cutover needs --source, --target and --publication"
		badSequences = `sequences = "bogus" is not valid: choose none, owned or all`
		noTarget     = "no target given: set --target (or target in the config file, or PARAPPLY_TARGET) to the target's connection string"
	)
	both := []string{"--source", "host=s", "--target", "host=t"}
	for _, tt := range []struct {
		args []string
		file string // passed with --config FILE where args name FILE
		env  map[string]string
		want string
		code int
	}{
		{args: []string{"ddl"}, want: "ddl needs install, uninstall or status: parapply ddl install --source DSN --publication NAME", code: 2},
		{args: []string{"ddl", "install", "--publication", "p"}, want: "ddl install needs --source, the publisher (as a superuser for install and uninstall: event triggers need one)", code: 1},
		{args: []string{"ddl", "status", "--config", "FILE"}, file: "source = ''\nworkers = many\n", want: "ddl status needs --source, the publisher (as a superuser for install and uninstall: event triggers need one)", code: 1},
		{args: []string{"drop"}, want: dropNeeds, code: 1},
		{args: []string{"drop", "--config", "FILE", "--source", "host=s"}, file: "slot = old\nbatch_rows = none\n", want: dropNeeds, code: 1},
		{args: []string{"drop", "--slot", "old"}, env: map[string]string{"PARAPPLY_TARGET": ""}, want: dropNeeds, code: 1},
		{args: []string{"skip", "--target", "host=t"}, want: skipNeeds, code: 1},
		{args: []string{"skip", "--lsn", "0/1"}, want: skipNeeds, code: 1},
		{args: []string{"skip", "--target", "host=t", "--lsn", "0/1", "--list"}, want: skipNeeds, code: 1},
		{args: []string{"skip", "--config", "FILE", "--lsn", "zz"}, file: "target = 'host=t'\nsequences = bogus\n", want: `invalid --lsn "zz": give a commit LSN as PostgreSQL prints it, such as 0/1A2B3C4`, code: 1},
		{args: append([]string{"verify"}, both...), want: verifyNeeds, code: 2},
		{args: append([]string{"verify", "--publication", " , "}, both...), want: verifyNeeds, code: 2},
		{args: []string{"verify", "--config", "FILE"}, file: "source = 'host=s'\ntarget = 'host=t'\n", want: verifyNeeds, code: 2},
		{args: []string{"verify", "--publication", "p"}, env: map[string]string{"PARAPPLY_SOURCE": "host=s"}, want: verifyNeeds, code: 2},
		{args: []string{"cutover", "--sequences", "bogus"}, want: cutoverNeeds, code: 2},
		{args: append([]string{"cutover", "--publication", "p", "--sequences", "bogus"}, both...), want: badSequences, code: 1},
		{args: append([]string{"cutover", "--publication", "p"}, both...), env: map[string]string{"PARAPPLY_SEQUENCES": "bogus"}, want: badSequences, code: 1},
		{args: []string{"sync-sequences"}, want: "sync-sequences needs --source and --target", code: 1},
		{args: []string{"sync-sequences", "--source", "host=s", "--sequences", "bogus"}, want: badSequences, code: 1},
		{args: []string{"sync-sequences", "--config", "FILE"}, file: "sequences = bogus\n", want: badSequences, code: 1},
		{args: []string{"status"}, want: noTarget, code: 1},
		{args: []string{"status", "--config", "FILE", "--source", "host=s"}, file: "target = ''\nworkers = many\n", want: noTarget, code: 1},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := append([]string(nil), tt.args...)
			if tt.file != "" {
				path := writeFile(t, tt.file)
				for i, a := range args {
					if a == "FILE" {
						args[i] = path
					}
				}
			}
			err := newCommand(args[0], io.Discard).Run(context.Background(), args[1:])
			if err == nil || err.Error() != tt.want {
				t.Fatalf("parapply %q: %v\nwant %s", args, err, tt.want)
			}
			if code := exitCode(err); code != tt.code {
				t.Errorf("parapply %q: exit status %d, want %d", args, code, tt.code)
			}
		})
	}
}

// TestLoadOptions: a command's settings are read typed from the flags,
// the environment and the file, as run reads them; only the settings it
// names are read, and a bad one leaves the others read beside its error.
func TestLoadOptions(t *testing.T) {
	const file = "slot = from_file\npublication = 'a, b'\nworkers = many\n"
	for _, tt := range []struct {
		name    string
		names   []string
		env     map[string]string
		args    []string
		want    options
		wantErr string
	}{
		{
			name:  "drop's settings",
			names: []string{"target", "source", "slot", "application_name"},
			env:   map[string]string{"PARAPPLY_TARGET": "host=env"},
			args:  []string{"--application-name", "flag app"},
			want:  options{Target: "host=env", Slot: "from_file", ApplicationName: "flag app"},
		},
		{
			name:  "verify's settings",
			names: []string{"source", "target", "publication", "slot", "application_name"},
			args:  []string{"--source", "host=s", "--slot", "from_flag"},
			want:  options{Source: "host=s", Publications: []string{"a", "b"}, Slot: "from_flag", ApplicationName: "parapply"},
		},
		{
			name:  "defaults where nothing gives one",
			names: []string{"slot", "sequences"},
			env:   map[string]string{"PARAPPLY_SLOT": "from_env"},
			want:  options{Slot: "from_env", Sequences: "owned"},
		},
		{
			name:    "a bad value named, the others read",
			names:   []string{"target", "sequences", "application_name"},
			args:    []string{"--target", "host=t", "--sequences", "some"},
			want:    options{Target: "host=t", ApplicationName: "parapply"},
			wantErr: `sequences = "some" is not valid: choose none, owned or all`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := append([]string{"--config", writeFile(t, file)}, tt.args...)
			o, err := loadOptions(newFlagSet(), args, tt.names...)
			if (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
				t.Fatalf("loadOptions(%q): %v, want error %q", args, err, tt.wantErr)
			}
			if !reflect.DeepEqual(o, tt.want) {
				t.Errorf("loadOptions(%q) read\n%+v\nwant\n%+v", args, o, tt.want)
			}
		})
	}
}

// TestStatusResolve: status takes target, source and slot from its flags,
// then the configuration file, then the environment where the file leaves
// one empty; slot has no default (every slot is shown).
func TestStatusResolve(t *testing.T) {
	for _, tt := range []struct {
		name                 string
		file                 string
		env                  map[string]string
		args                 []string
		target, source, slot string
	}{
		{name: "flags", args: []string{"--target", "host=t", "--slot", "s"}, target: "host=t", slot: "s"},
		{name: "file over environment", file: "target = 'host=file'\nslot = fs\nworkers = many\n",
			env:    map[string]string{"PARAPPLY_TARGET": "host=env", "PARAPPLY_SOURCE": "host=src", "PARAPPLY_SLOT": "es"},
			target: "host=file", source: "host=src", slot: "fs"},
		{name: "environment where the file is empty", file: "target = ''\n",
			env: map[string]string{"PARAPPLY_TARGET": "host=env"}, target: "host=env"},
		{name: "flags over file and environment", file: "target = 'host=file'\nslot = fs\n",
			env: map[string]string{"PARAPPLY_SLOT": "es"}, args: []string{"--target", "host=flag", "--slot", ""},
			target: "host=flag"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeFile(t, tt.file)}, args...)
			}
			cmd := &StatusCommand{out: io.Discard}
			fs := cmd.flags()
			if err := parseFlags(fs, args); err != nil {
				t.Fatal(err)
			}
			if err := cmd.resolve(fs); err != nil {
				t.Fatalf("resolve(%q): %v", args, err)
			}
			if cmd.target != tt.target || cmd.source != tt.source || cmd.slot != tt.slot {
				t.Errorf("resolve(%q): target %q source %q slot %q, want %q %q %q", args, cmd.target, cmd.source, cmd.slot, tt.target, tt.source, tt.slot)
			}
		})
	}
}
