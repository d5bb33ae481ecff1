package e2e

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// clientLoad runs n clients on dsn until the stop it returns is called:
// each calls step again and again on a connection of its own, with a
// generator seeded from seed and the client's number (the test logs seed).
// stop waits for the clients and fails the test on a client's error; a
// deadlock (40P01, with a schema change, say) is the client's to retry and
// is not one. stop may be called more than once.
func clientLoad(t *testing.T, dsn string, n int, seed uint64, step func(ctx context.Context, c *pgx.Conn, rng *rand.Rand) error) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- runClient(dsn, rand.New(rand.NewPCG(seed, uint64(i))), done, step)
		}()
	}
	var once sync.Once
	return func() {
		t.Helper()
		once.Do(func() {
			close(done)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("a client of the load: %v", err)
				}
			}
		})
	}
}

func runClient(dsn string, rng *rand.Rand, done <-chan struct{}, step func(ctx context.Context, c *pgx.Conn, rng *rand.Rand) error) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	for {
		select {
		case <-done:
			return nil
		default:
		}
		if err := step(ctx, c, rng); err != nil && !strings.Contains(err.Error(), "SQLSTATE 40P01") {
			return err
		}
	}
}
