package pgtest

import (
	"context"
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
