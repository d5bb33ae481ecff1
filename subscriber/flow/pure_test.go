package flow

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
