package tablesync

import (
	"regexp"
	"strings"
	"time"
)

// deferred is one statement saved in parapply.deferred_index that
// rebuilds what the copy of a table dropped: an index, a constraint, or
// any DDL saved with them.
type deferred struct {
	index string // the row's index_name, its key
	sql   string
	ord   int
}

// step is one transaction of a table's index phase: sql, then the row of
// index in parapply.deferred_index deleted, or, with then set, rewritten
// to then, the step still to come (a constraint's ALTER TABLE ... USING
// INDEX once its index is built).
type step struct {
	j     *tableJob
	index string
	sql   string
	then  string
	// attach: the cheap second half of a constraint (no sort, no scan of
	// the rows beyond a NOT NULL check), left out of the ETA's work.
	attach bool
}

// Statements the index phase runs beside others of the same table: a
// plain CREATE [UNIQUE] INDEX (no CONCURRENTLY, which cannot run in a
// transaction) takes a ShareLock on the table, which does not conflict
// with itself; and a PRIMARY KEY or UNIQUE constraint as ALTER TABLE
// writes it, with nothing after its columns but INCLUDE, which is built
// as such an index and attached afterwards, alone (ALTER TABLE takes an
// ACCESS EXCLUSIVE lock: two in the transactions that built their
// indexes would each wait for the other's ShareLock).
var (
	createIndexRE = regexp.MustCompile(`(?is)^\s*CREATE\s+(UNIQUE\s+)?INDEX\s+(\S+)`)
	constraintRE  = regexp.MustCompile(`(?is)^\s*ALTER\s+TABLE\s+(?:ONLY\s+)?(` + qnamePat + `)\s+ADD\s+CONSTRAINT\s+(` + identPat + `)\s+(PRIMARY\s+KEY|UNIQUE)(\s+NULLS\s+NOT\s+DISTINCT)?\s*(\([^();"]*\))(\s+INCLUDE\s*\([^();"]*\))?\s*;?\s*$`)
)

const (
	identPat = `(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)`
	qnamePat = identPat + `(?:\.` + identPat + `)?`
)

// single tells whether sql is one statement: no semicolon but a last one
// (one inside a quoted name or literal makes it count as several, which
// only costs it running alone).
func single(sql string) bool {
	s := strings.TrimRight(strings.TrimSpace(sql), ";")
	return !strings.Contains(s, ";")
}

// batches plans a table's index phase from its saved statements, in
// order: statements the server builds beside one another share a batch,
// which the copy's workers take one step each; any other statement is a
// batch of its own, run alone after everything before it and before
// everything after it, as is each constraint's attaching, after the batch
// that built its index. partitioned: the table is partitioned, where
// ALTER TABLE ... USING INDEX is refused, so its constraints run as saved.
func batches(j *tableJob, ds []deferred, partitioned bool) [][]*step {
	var out [][]*step
	var shared, attach []*step
	flush := func() {
		if len(shared) > 0 {
			out = append(out, shared)
		}
		for _, a := range attach {
			out = append(out, []*step{a})
		}
		shared, attach = nil, nil
	}
	for _, d := range ds {
		switch build, then := classify(d.sql, partitioned); {
		case build == "":
			flush()
			out = append(out, []*step{{j: j, index: d.index, sql: d.sql}})
		case then == "":
			shared = append(shared, &step{j: j, index: d.index, sql: d.sql})
		default:
			shared = append(shared, &step{j: j, index: d.index, sql: build, then: then})
			attach = append(attach, &step{j: j, index: d.index, sql: then, attach: true})
		}
	}
	flush()
	return out
}

// classify says how the index phase runs sql: build is what may run beside
// other builds of the table ("" when sql must run alone), and then, for a
// constraint, the ALTER TABLE that attaches the index build made.
func classify(sql string, partitioned bool) (build, then string) {
	if !single(sql) {
		return "", ""
	}
	if m := createIndexRE.FindStringSubmatch(sql); m != nil {
		if strings.EqualFold(m[2], "CONCURRENTLY") {
			return "", ""
		}
		return sql, ""
	}
	m := constraintRE.FindStringSubmatch(sql)
	if m == nil || partitioned {
		return "", ""
	}
	table, name, kind, nulls, cols, include := m[1], m[2], strings.ToUpper(strings.Join(strings.Fields(m[3]), " ")), m[4], m[5], strings.TrimSpace(m[6])
	build = "CREATE UNIQUE INDEX " + name + " ON " + table + " " + cols
	if include != "" {
		build += " " + include
	}
	if nulls != "" {
		build += " NULLS NOT DISTINCT"
	}
	return build, "ALTER TABLE " + table + " ADD CONSTRAINT " + name + " " + kind + " USING INDEX " + name
}

// firstBuildRate is the index phase's rate, in bytes of the table's heap
// per second and build, until the copy has measured its own on a build:
// a first guess (a B-tree over a key or two, sorted within
// maintenance_work_mem).
const firstBuildRate = 100 << 20

// indexLeft estimates the time the index phase has still to run: the heap
// bytes its builds still have to read (pending, a table's size once for
// each of its builds left) at the rate measured on the builds so far
// (done bytes in spent; firstBuildRate before any), shared by workers.
func indexLeft(pending, done int64, spent time.Duration, workers int) time.Duration {
	if pending <= 0 {
		return 0
	}
	rate := float64(firstBuildRate)
	if done > 0 && spent > 0 {
		rate = float64(done) / spent.Seconds()
	}
	return time.Duration(float64(pending) / rate / float64(max(workers, 1)) * float64(time.Second))
}
