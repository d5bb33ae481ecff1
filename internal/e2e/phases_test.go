package e2e

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// phaseTracer records, for every statement a run's reader session sends
// from its connect, claim or setup phase, the parapply package that sent
// it: the innermost frame of the module's code that is not this test's.
type phaseTracer struct {
	mu   sync.Mutex
	pkgs []string // in the order sent, one entry per stretch of a package
	sql  []string // the first statement of each stretch, for the failure message
}

const module = "github.com/parapply/parapply/"

func (p *phaseTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	sender, inSetup := "", false
	for {
		f, more := frames.Next()
		name, ok := strings.CutPrefix(f.Function, module)
		if ok && !strings.HasPrefix(name, "internal/e2e") {
			pkg, _, _ := strings.Cut(name, ".")
			if pkg == "citus" {
				// A Citus coordinator's catalog, read with the target's
				// own (its session, its tables): the target's step.
				pkg = "targetdb"
			}
			if sender == "" {
				sender = pkg
			}
			for _, phase := range []string{"connect", "claim", "setup"} {
				if name == "subscriber.(*Subscriber)."+phase {
					inSetup = true
				}
			}
		}
		if !more {
			break
		}
	}
	if !inSetup {
		return ctx
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.pkgs); n == 0 || p.pkgs[n-1] != sender {
		p.pkgs = append(p.pkgs, sender)
		p.sql = append(p.sql, strings.Join(strings.Fields(data.SQL), " "))
	}
	return ctx
}

func (p *phaseTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestSetupInOrder: followed from Run, a run's setup enters each package
// once, in order. The statements its reader's target session sends in the
// connect, claim and setup phases come from targetdb (parapply's own
// objects on the target: the schema, claims, origins, tombstones), then
// progress, then tablesync, then schemacopy (what a schema copy left to
// run after the copy: foreign keys, triggers), each package in one
// stretch, at a first start (the slot created, the tables copied) and at a
// restart alike. (The copy's
// and the sequences' own sessions are theirs alone; the publisher's
// session is source's.)
func TestSetupInOrder(t *testing.T) {
	e := newEnv(t, `CREATE TABLE a (id int PRIMARY KEY, v text)`)
	e.exec(e.pub, `INSERT INTO a SELECT g, 'row ' || g FROM generate_series(1, 200) g`)
	e.applyOwnsTables() // detect_update_deleted installs a trigger: the apply role owns the tables (docs/operations.md)
	want := []string{"targetdb", "progress", "tablesync", "schemacopy"}
	for i, start := range []string{"first start", "restart"} {
		tr := &phaseTracer{}
		cfg := e.config("phases")
		cfg.CopyData = true
		cfg.DetectUpdateDeleted = true
		cfg.Target.Tracer = tr
		r := e.start(cfg)
		e.exec(e.pub, `UPDATE a SET v = 'after' WHERE id = `+[]string{"1", "2"}[i])
		e.waitCaughtUp(r)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		tr.mu.Lock()
		got, first := tr.pkgs, tr.sql
		tr.mu.Unlock()
		t.Logf("%s: setup statements by package: %v", start, got)
		if !slices.Equal(got, want) {
			var b strings.Builder
			for j, p := range got {
				b.WriteString("\n  " + p + ": " + first[j])
			}
			t.Errorf("%s: the setup's statements came from %v, want %v; each stretch began with:%s", start, got, want, b.String())
		}
	}
	e.verify("public.a")
}
