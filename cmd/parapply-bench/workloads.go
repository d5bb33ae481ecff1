package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

var workloads = map[string]workload{
	// parallel-apply-benchmark.txt, case 1: 1000 transactions of 1000 inserts.
	"insert": {
		schema: "CREATE TABLE foo (id int PRIMARY KEY, value double precision)",
		tables: []string{"foo"},
		write: func(ctx context.Context, c *pgx.Conn, scale float64) error {
			n := scaled(1000, scale)
			for i := 0; i < n; i++ {
				if _, err := c.Exec(ctx, "INSERT INTO foo SELECT g, random() FROM generate_series($1::int, $2::int) g", i*1000+1, i*1000+1000); err != nil {
					return err
				}
			}
			return nil
		},
	},
	// Case 2: 1M rows preloaded, 1000 transactions of 1000 updates, each on
	// different rows.
	"update": {
		schema: "CREATE TABLE foo (id int PRIMARY KEY, value double precision)",
		preload: func(scale float64) string {
			return fmt.Sprintf("INSERT INTO foo SELECT g, 0 FROM generate_series(1, %d) g", scaled(1000, scale)*1000)
		},
		tables: []string{"foo"},
		write: func(ctx context.Context, c *pgx.Conn, scale float64) error {
			n := scaled(1000, scale)
			for i := 0; i < n; i++ {
				if _, err := c.Exec(ctx, "UPDATE foo SET value = value + 1 WHERE id BETWEEN $1 AND $2", i*1000+1, i*1000+1000); err != nil {
					return err
				}
			}
			return nil
		},
	},
	// The extra case: no primary key, REPLICA IDENTITY FULL; 40k rows,
	// 200 transactions of 200 updates at scale 1.
	"update-full": {
		schema: "CREATE TABLE foo (id int, value double precision); ALTER TABLE foo REPLICA IDENTITY FULL",
		preload: func(scale float64) string {
			return fmt.Sprintf("INSERT INTO foo SELECT g, 0 FROM generate_series(1, %d) g", scaled(200, scale)*200)
		},
		tables: []string{"foo"},
		write: func(ctx context.Context, c *pgx.Conn, scale float64) error {
			n := scaled(200, scale)
			for i := 0; i < n; i++ {
				if _, err := c.Exec(ctx, "UPDATE foo SET value = value + 1 WHERE id BETWEEN $1 AND $2", i*200+1, i*200+200); err != nil {
					return err
				}
			}
			return nil
		},
	},
}

func scaled(n int, scale float64) int {
	v := int(float64(n)*scale + 0.5)
	if v < 1 {
		v = 1
	}
	return v
}

func workloadNames() []string {
	var names []string
	for n := range workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
