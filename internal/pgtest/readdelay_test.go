package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestReadDelay starts a server whose reads are delayed by 30 ms and checks
// that reading a table not in its buffer cache takes at least that long,
// while the same read from the cache does not.
func TestReadDelay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	env, err := ReadDelayEnv(30 * time.Millisecond)
	if err != nil {
		t.Skip(err) // no C compiler here
	}
	ctx := context.Background()
	s, err := Start(ctx, Options{Name: "slow", Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE t AS SELECT 1 AS a; CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)
	// A restart empties shared_buffers: the next read of t goes to the file.
	if err := s.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	c, err = pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	timed := func() time.Duration {
		began := time.Now()
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
			t.Fatalf("reading t: %d rows, %v", n, err)
		}
		return time.Since(began)
	}
	cold, warm := timed(), timed()
	t.Logf("cold read %s, warm read %s", cold, warm)
	if cold < 30*time.Millisecond {
		t.Errorf("a read from the file took %s, under the 30 ms delay: the library is not in the server", cold)
	}
	if warm >= 30*time.Millisecond {
		t.Errorf("a read from the buffer cache took %s: reads that touch no file were delayed too", warm)
	}
}
