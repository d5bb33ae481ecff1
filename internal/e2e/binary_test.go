package e2e

import (
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"
)

// families is a table with a column of each type family that travels in
// binary when its type is the same built-in one on both sides (or an enum
// on the target), and rows of their awkward values.
const families = `CREATE TYPE mood AS ENUM ('calm', 'busy', 'élan');
	CREATE TABLE fam (id int PRIMARY KEY, t text, vc varchar(20), bp char(5), b bytea, n numeric, n2 numeric(12,3),
		ts timestamp, tz timestamptz, d date, tm time, iv interval, u uuid, j jsonb, f4 real, f8 double precision,
		bo boolean, i2 smallint, i8 bigint, ip inet, m mood, r int4range, bits bit varying, x money, b5 bit(5));
	CREATE TABLE fam_full (LIKE fam); ALTER TABLE fam_full REPLICA IDENTITY FULL`

const familyRows = `(1, 'hello, wörld', 'tab	and
newline', 'ab', '\x00ff10'::bytea, 123456789.123456789, 12.5, '2026-11-27 01:02:03.456789', '2026-11-27 01:02:03.1+02', '2026-11-27', '13:14:15.5',
		'1 year 2 days 03:04:05', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{"a": [1, 2.5, null], "b": "x"}', 0.1, 0.1,
		true, -32768, -9223372036854775808, '192.168.0.1/24', 'élan', '[1,10)', B'10110', 12.34, B'10101'),
	(2, '', '', '', ''::bytea, 'NaN', 0, 'infinity', '-infinity', 'infinity', '00:00', '-1 mon', '00000000-0000-0000-0000-000000000000', '[]',
		'NaN', '-Infinity', false, 32767, 9223372036854775807, '::1', 'calm', 'empty', B'', -0.01, B'00000'),
	(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
	(4, E'back\\slash ''quote'' "dq"', 'x', 'abcde', '\x5c'::bytea, '-0.000100', -999999999.999, '0001-01-01 00:00:00', '1900-06-01 12:00:00+00', '0001-01-01', '24:00',
		'0', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '"s"', '-0', 5e-324, true, 0, 0, '10.0.0.0/8', 'busy', '(,5]', B'1', 0, B'11111')`

// familyChanges inserts many rows (an insert run long enough to go by
// COPY), updates (of values, of the key) and deletes on tab.
func familyChanges(tab string) string {
	return `INSERT INTO ` + tab + ` SELECT g + 100, 'row ' || g, left(md5(g::text), 20), left(md5(g::text), 3), decode(md5(g::text), 'hex'), g / 7.0, g / 3.0,
			'2020-01-01'::timestamp + g * interval '1 minute', '2020-01-01 00:00+00'::timestamptz + g * interval '1 second', '2020-01-01'::date + g, '00:00'::time + g * interval '1 s',
			g * interval '1 ms', md5(g::text)::uuid, jsonb_build_object('g', g, 'h', g / 3.0), g / 9.0, g / 11.0,
			g % 2 = 0, (g % 30000)::smallint, g * 1000000000::bigint, ('10.0.' || (g % 250) || '.1')::inet, (ARRAY['calm', 'busy', 'élan'])[1 + g % 3]::mood,
			int4range(g, g + 10), (g % 64)::bit(6)::varbit, g / 100.0, (g % 32)::bit(5)
		FROM generate_series(1, 600) g;
		BEGIN;
		UPDATE ` + tab + ` SET t = t || ' again', n = -n, tz = tz + interval '1 hour', j = j || '{"u": true}', m = 'busy', f8 = f8 * 3 WHERE id % 3 = 0;
		UPDATE ` + tab + ` SET b = NULL, vc = 'changed', d = d - 1, r = 'empty' WHERE id BETWEEN 100 AND 150;
		DELETE FROM ` + tab + ` WHERE id % 7 = 0;
		COMMIT`
}

// TestBinaryTransfer: with binary on and every published column of the
// same built-in type on both sides (or an enum on the target), values
// travel in binary: each type family's awkward values arrive exact through
// inserts (few rows, and many, which go by binary COPY), updates by key
// and of the key, and deletes, under a key and under REPLICA IDENTITY FULL,
// row for row as in text mode (binary off, the same changes). A published
// array column puts the whole stream in text, and so does an OID alias
// (regclass), copied in text too; a column of one added while parapply
// runs makes the next run read on in text, nothing lost.
func TestBinaryTransfer(t *testing.T) {
	for _, binary := range []bool{true, false} {
		name := map[bool]string{true: "binary", false: "text"}[binary]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, families)
			cfg := e.config("fam")
			cfg.Binary = binary
			r := e.start(cfg)
			for _, tab := range []string{"fam", "fam_full"} {
				e.exec(e.pub, `INSERT INTO `+tab+` VALUES `+familyRows)
				e.exec(e.pub, familyChanges(tab))
			}
			e.exec(e.pub, `UPDATE fam SET id = id + 10000 WHERE id BETWEEN 1 AND 4`)
			e.waitCaughtUp(r)
			if got := r.s.Status().Binary; got != binary {
				t.Errorf("status says binary %v, want %v", got, binary)
			}
			e.verify("public.fam", "public.fam_full")
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("array columns put the stream in text", func(t *testing.T) {
		e := newEnv(t, `CREATE TABLE plain (id int PRIMARY KEY, v numeric); CREATE TABLE tagged (id int PRIMARY KEY, tags text[], m int[][])`)
		cfg := e.config("arr")
		cfg.Binary = true // whatever PARAPPLY_TEST_BINARY says
		r := e.start(cfg)
		e.exec(e.pub, `INSERT INTO plain SELECT g, g / 3.0 FROM generate_series(1, 300) g;
			INSERT INTO tagged VALUES (1, '{a,"b c",NULL}', '{{1,2},{3,4}}'), (2, '{}', NULL)`)
		e.endsInText(r, "with an array column published", "public.plain", "public.tagged")
	})

	t.Run("OID aliases travel in text", func(t *testing.T) {
		// A regclass or regtype value in binary is an OID: on a target
		// whose OIDs differ (one more table made first), it would name
		// another object. In text it names the same one, in the copy and
		// in the stream.
		e := newEnv(t, "")
		e.exec(e.sub, `CREATE TABLE shifts_oids (a int)`)
		e.both(`CREATE TABLE named (id int PRIMARY KEY, r regclass, rt regtype, rs regclass[]); CREATE TABLE other (id int); CREATE TYPE kind AS (a int)`)
		e.exec(e.pub, `CREATE PUBLICATION pub FOR TABLE named; INSERT INTO named VALUES (1, 'other', 'kind', '{other,named}')`)
		cfg := e.config("oids")
		cfg.Binary, cfg.CopyData = true, true
		r := e.start(cfg)
		e.exec(e.pub, `INSERT INTO named VALUES (2, 'named', 'kind[]', '{other}'); UPDATE named SET r = 'other' WHERE id = 2`)
		e.endsInText(r, "with a regclass column published", "public.named")
	})

	t.Run("a column added while running goes on in text", func(t *testing.T) {
		e := newEnv(t, `CREATE TABLE grows (id int PRIMARY KEY, v numeric, at timestamptz)`)
		cfg := e.config("grows")
		cfg.Binary = true
		r := e.start(cfg)
		e.exec(e.pub, `INSERT INTO grows SELECT g, g / 3.0, now() FROM generate_series(1, 500) g`)
		e.waitCaughtUp(r)
		if !r.s.Status().Binary {
			t.Fatal("status says text before the array column was added")
		}
		e.exec(e.sub, `ALTER TABLE grows ADD COLUMN tags text[]`)
		e.exec(e.pub, `ALTER TABLE grows ADD COLUMN tags text[]`)
		e.exec(e.pub, `BEGIN; UPDATE grows SET tags = ARRAY[id::text, 'x'] WHERE id % 2 = 0; INSERT INTO grows VALUES (1000, 1, now(), '{y}'); DELETE FROM grows WHERE id % 5 = 0; COMMIT`)
		e.exec(e.pub, `INSERT INTO grows VALUES (1001, 2, now(), NULL)`)
		deadline := time.Now().Add(time.Minute)
		for r.s.Status().Binary && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		e.endsInText(r, "after an array column joined", "public.grows")
	})
}

// endsInText waits for r to catch up, checks that values travel in text
// (why says what put them so), compares tables row for row, and stops r,
// which must end without an error.
func (e *env) endsInText(r *running, why string, tables ...string) {
	e.t.Helper()
	e.waitCaughtUp(r)
	if r.s.Status().Binary {
		e.t.Errorf("status says binary %s", why)
	}
	e.verify(tables...)
	if err := r.stop(); err != nil {
		e.t.Fatal(err)
	}
}

// refusedSchema holds values PostgreSQL writes in binary but whose binary
// input refuses them: an empty tsquery (by a literal, and by to_tsquery of
// a stop word), in a small table and in one large enough to be copied in
// ranges; beside them a table of plain values.
const refusedSchema = `CREATE TABLE tq (id int PRIMARY KEY, q tsquery, v tsvector);
	CREATE TABLE tq_wide (id int PRIMARY KEY, q tsquery, pad text) WITH (fillfactor = 10);
	CREATE TABLE calm (id int PRIMARY KEY, n numeric)`

// TestBinaryRefused: binary is a setting, and a value whose binary form
// the target refuses stops nothing. With binary = off the copy goes in
// text COPY (every table's "table copied" line says text) and the stream
// in text. With binary = on, an empty tsquery (sent in binary, refused by
// its binary input on the target) makes the copy of its table go in text
// from the refused range on, one warning per table (a table copied in two
// ranges, the refused one rolled back and copied again, nothing doubled);
// in the stream, it makes the run go on in text from the target's last
// commit, one warning, by a statement's parameter and by an insert run's
// COPY (a new start reads in binary again). Either way the run never
// exits, and the target equals the publisher row for row.
func TestBinaryRefused(t *testing.T) {
	for _, binary := range []bool{true, false} {
		name := map[bool]string{true: "binary", false: "text"}[binary]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, refusedSchema)
			// tq_wide fills a page a row, 4,200 pages: two ranges for two
			// copy workers; its empty tsquery is in the second.
			e.exec(e.pub, `INSERT INTO tq VALUES (1, 'a & b', 'a b'), (2, '', ''), (3, NULL, NULL), (4, to_tsquery('english', 'the'), 'the'), (5, '!x | y:*', 'x:1A');
				INSERT INTO tq_wide SELECT g, CASE WHEN g = 4000 THEN ''::tsquery ELSE ('w' || g)::tsquery END, repeat('p', 700) FROM generate_series(1, 4200) g;
				INSERT INTO calm SELECT g, g / 7.0 FROM generate_series(1, 100) g;
				ANALYZE`)
			logs := &logBuffer{}
			cfg := e.config("refused_" + name)
			cfg.Binary, cfg.CopyData, cfg.CopyWorkers = binary, true, 2
			cfg.Log = slog.New(slog.NewTextHandler(io.MultiWriter(logs, e.log), &slog.HandlerOptions{Level: slog.LevelInfo}))
			r := e.start(cfg)
			log := logs.String()
			for table, format := range map[string]string{"tq": "text in 1", "tq_wide": "text in 2", "calm": "text in 1"} {
				if binary {
					format = map[string]string{"tq": "binary, then text in 1", "tq_wide": "binary, then text in 2", "calm": "binary in 1"}[table]
				}
				quoted := `table="\\"public\\".\\"` + table + `\\""`
				var got []string
				for _, m := range regexp.MustCompile(`msg="table copied" `+quoted+` .* format=("[^"]*"|\S+) chunks=(\d+)`).FindAllStringSubmatch(log, -1) {
					got = append(got, strings.Trim(m[1], `"`)+" in "+m[2])
				}
				if len(got) != 1 || got[0] != format {
					t.Errorf("%s copied (format in chunks): %v, want %s", table, got, format)
				}
				if table == "calm" {
					continue
				}
				n := len(regexp.MustCompile(`msg="copying the table in text[^"]*" `+quoted+` column=q `).FindAllString(log, -1))
				if want := map[bool]int{true: 1, false: 0}[binary]; n != want {
					t.Errorf("%d warnings that %s is copied in text, naming column q; want %d", n, table, want)
				}
			}
			if got := r.s.Status().Binary; got != binary {
				t.Errorf("status says binary %v after the copy, want %v", got, binary)
			}
			// By a statement's parameter (a few rows), then by an insert
			// run's COPY (300 rows in one transaction) after a new start.
			e.exec(e.pub, `INSERT INTO tq VALUES (10, 'c', 'c'), (11, '', ''); UPDATE tq SET q = '' WHERE id = 1; INSERT INTO calm VALUES (1000, 1)`)
			e.endsInText(r, "after the target refused a value in binary", "public.tq", "public.tq_wide", "public.calm")
			r = e.start(cfg)
			if got := r.s.Status().Binary; got != binary {
				t.Errorf("status says binary %v at a new start, want %v", got, binary)
			}
			e.exec(e.pub, `INSERT INTO tq SELECT g, CASE WHEN g % 50 = 0 THEN ''::tsquery ELSE 'z'::tsquery END, 'z' FROM generate_series(100, 399) g; UPDATE calm SET n = -n`)
			e.waitCaughtUp(r)
			e.verify("public.tq", "public.calm")
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			// One warning per start: the first names no column (a bind
			// parameter's), the second the COPY's.
			warned := regexp.MustCompile(`msg="values go on in text for every table[^"]*" column=(\S*) `).FindAllStringSubmatch(logs.String(), -1)
			var columns []string
			for _, m := range warned {
				columns = append(columns, m[1])
			}
			if want := map[bool]string{true: `"" q`, false: ""}[binary]; strings.Join(columns, " ") != want {
				t.Errorf("warnings that values go on in text name the columns %q, want %q (one per start)", columns, want)
			}
		})
	}
}
