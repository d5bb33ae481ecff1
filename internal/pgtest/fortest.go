package pgtest

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// TB is the part of testing.TB that ForTest and Connect use, so that this
// package, which parapply demo links, does not import testing.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// ForTest starts a server for a unit test, stopped when the test ends, and
// returns it with a context that bounds the test to limit: the start, its
// cleanup and the bound every such test repeated.
func ForTest(t TB, name string, limit time.Duration) (context.Context, *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	srv, err := Start(ctx, Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return ctx, srv
}

// Connect opens a connection for a test, closed when the test ends.
func Connect(ctx context.Context, t TB, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
