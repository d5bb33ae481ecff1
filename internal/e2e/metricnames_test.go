package e2e

import (
	"slices"
	"testing"
	"time"
)

// TestMetricTableNames: every metric names a table one way, schema.table
// as regclass prints it (quoted only where it must be), the copy's as the
// stream's; and a partitioned table published through its root counts
// its partitions' rows under the root's name, though a second publication
// sends one partition as itself.
func TestMetricTableNames(t *testing.T) {
	e := newEnv(t, "")
	e.both(`CREATE TABLE "Items" (id int PRIMARY KEY, v text);
		CREATE TABLE measures (id int, k int, PRIMARY KEY (id, k)) PARTITION BY RANGE (k);
		CREATE TABLE measures_1 PARTITION OF measures FOR VALUES FROM (0) TO (100);
		CREATE TABLE measures_2 PARTITION OF measures FOR VALUES FROM (100) TO (200)`)
	e.exec(e.pub, `CREATE PUBLICATION pub_root FOR TABLE "Items", measures WITH (publish_via_partition_root = true);
		CREATE PUBLICATION pub_part FOR TABLE measures_2`)
	e.exec(e.pub, `INSERT INTO "Items" SELECT g, 'v' FROM generate_series(1, 10) g; INSERT INTO measures SELECT g, g FROM generate_series(1, 150) g`)
	addr := freeAddr(t)
	p := e.runProcess(t, "--publication", "pub_root,pub_part", "--slot", "names", "--metrics-addr", addr)
	e.waitSlotExists(t, "names", p)
	e.exec(e.pub, `INSERT INTO "Items" VALUES (11, 'w'); INSERT INTO measures VALUES (1000, 50), (1001, 150)`)
	e.waitSlotConfirmed("names", time.Minute, p.alive)

	want := []string{`public."Items"`, "public.measures"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fams := scrape(t, addr)
		var labels []string
		for _, name := range []string{"parapply_copy_rows_total", "parapply_rows_total", "parapply_conflicts_total"} {
			f, ok := fams[name]
			if !ok {
				continue
			}
			for _, m := range f.Metric {
				for _, lp := range m.Label {
					if lp.GetName() == "table" && !slices.Contains(labels, name+" "+lp.GetValue()) {
						labels = append(labels, name+" "+lp.GetValue())
					}
				}
			}
		}
		var wantLabels []string
		for _, name := range []string{"parapply_copy_rows_total", "parapply_rows_total", "parapply_conflicts_total"} {
			for _, w := range want {
				wantLabels = append(wantLabels, name+" "+w)
			}
		}
		slices.Sort(labels)
		slices.Sort(wantLabels)
		if slices.Equal(labels, wantLabels) {
			if got := value(t, fams, "parapply_rows_total", "table", "public.measures", "kind", "insert"); got != 2 {
				t.Errorf("rows_total of public.measures, insert = %v, want 2 (one row in each partition)", got)
			}
			if got := value(t, fams, "parapply_copy_rows_total", "table", "public.measures"); got != 150 {
				t.Errorf("copy_rows_total of public.measures = %v, want 150", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("table labels:\n%q\nwant\n%q", labels, wantLabels)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
