package pgtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestStartPair(t *testing.T) {
	ctx := context.Background()
	p, err := StartPair(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	for _, s := range []*Server{p.Publisher, p.Subscriber} {
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		var level string
		if err := c.QueryRow(ctx, "show wal_level").Scan(&level); err != nil {
			t.Fatal(err)
		}
		c.Close(ctx)
		if level != "logical" {
			t.Fatalf("%s: wal_level = %s, want logical", s.Name, level)
		}
		if s.Version < 15 {
			t.Fatalf("%s: version %d", s.Name, s.Version)
		}
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}

// TestPublisherBinaries: the publisher's installation is the target's
// unless PARAPPLY_PG_PUBLISHER_BIN or _VERSION names another; a named
// folder without postgres is refused, naming the variable.
func TestPublisherBinaries(t *testing.T) {
	target, err := Binaries()
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	for _, tc := range []struct {
		name, bin, version string
		want, wantErr      string
	}{
		{name: "neither set", want: target},
		{name: "bin set", bin: target, want: target},
		{name: "bin without postgres", bin: empty, wantErr: EnvPublisherBin + "=" + empty},
		{name: "bin wins over version", bin: empty, version: DefaultVersion, wantErr: EnvPublisherBin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvPublisherBin, tc.bin)
			t.Setenv(EnvPublisherVersion, tc.version)
			got, err := PublisherBinaries()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PublisherBinaries() = %q, %v; want an error naming %s", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("PublisherBinaries() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
