package flow

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parapply/parapply"
)

// TestPure: the core does no I/O: it imports no connection, file or log
// package, reads no clock and starts no goroutine.
func TestPure(t *testing.T) {
	allowed := map[string]bool{"fmt": true, "time": true, "github.com/parapply/parapply": true, "github.com/parapply/parapply/pgoutput": true}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); !allowed[p] {
				t.Errorf("%s imports %s", n, p)
			}
		}
		ast.Inspect(f, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: a goroutine", fset.Position(x.Pos()))
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "time" && (x.Sel.Name == "Now" || x.Sel.Name == "Since" || x.Sel.Name == "After" || x.Sel.Name == "Sleep") {
					t.Errorf("%s: reads the clock (time.%s)", fset.Position(x.Pos()), x.Sel.Name)
				}
			}
			return true
		})
	}
}

// TestNoAllocation: a source transaction of row changes costs the core no
// allocation (the hot path: one call a message).
func TestNoAllocation(t *testing.T) {
	c := New(Start{Limits: Limits{MaxChanges: 1000, MaxBytes: 1 << 20, MaxDelay: 1 << 30}})
	lsn := parapply.LSN(0)
	allocs := testing.AllocsPerRun(1000, func() {
		lsn += 10
		c.Hold(HoldBegin, Txn{XID: 1, CommitLSN: lsn})
		txn, _ := c.Release("")
		if _, skip, err := c.Begin(txn); skip || err != nil {
			t.Fatal(skip, err)
		}
		for range 3 {
			if !c.Change() {
				t.Fatal("a change dropped")
			}
		}
		if c.Commit() != EndTaken || c.Full(3, 30, 0, 1000) || c.PastOneByOne() {
			t.Fatal("not a plain end")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations a transaction", allocs)
	}
}
