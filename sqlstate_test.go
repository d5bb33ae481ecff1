package parapply

import (
	"go/ast"
	"go/token"
	"regexp"
	"strings"
	"testing"
)

// TestSQLStatesAreNamed keeps SQLSTATEs out of the code as bare strings: an
// error code compared, switched on or raised is one of pgerrcode's
// constants (or, for parapply's own, targetdb.SQLStateConflictFound and
// SQLStateConflictError), so a reader sees the condition's name and a typo
// cannot slip in as a code no server sends.
func TestSQLStatesAreNamed(t *testing.T) {
	var found []string
	eachSourceFile(t, func(_ string, fset *token.FileSet, file *ast.File) {
		found = append(found, bareSQLStates(fset, file)...)
	})
	for _, f := range found {
		t.Errorf("%s: name the SQLSTATE: a github.com/jackc/pgerrcode constant (a class as one's, pgerrcode.DataException[:2]), parapply's own a targetdb.SQLState constant", f)
	}
}

// raisedCode finds an SQLSTATE written into SQL text that raises it.
var raisedCode = regexp.MustCompile(`(?i)ERRCODE\s*=\s*'[0-9A-Z]{5}'|SQLSTATE\s+'[0-9A-Z]{5}'`)

// bareSQLStates returns the places in file f where a string
// literal is compared with, switched on as, or prefixed to an error's Code,
// or raised in SQL text.
func bareSQLStates(fset *token.FileSet, f *ast.File) []string {
	var out []string
	report := func(lit *ast.BasicLit) {
		out = append(out, fset.Position(lit.Pos()).String()+": "+lit.Value)
	}
	reportRaised := func(lit *ast.BasicLit, codes []string) {
		out = append(out, fset.Position(lit.Pos()).String()+": "+strings.Join(codes, ", "))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			if lit, ok := stringLit(n.Y); ok && isCode(n.X) {
				report(lit)
			}
			if lit, ok := stringLit(n.X); ok && isCode(n.Y) {
				report(lit)
			}
		case *ast.SwitchStmt:
			if n.Tag == nil || !isCode(n.Tag) {
				return true
			}
			for _, s := range n.Body.List {
				for _, e := range s.(*ast.CaseClause).List {
					if lit, ok := stringLit(e); ok {
						report(lit)
					}
				}
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "HasPrefix" && len(n.Args) == 2 && isCode(n.Args[0]) {
				if lit, ok := stringLit(n.Args[1]); ok {
					report(lit)
				}
			}
		case *ast.BasicLit:
			if codes := raisedCode.FindAllString(n.Value, -1); n.Kind == token.STRING && codes != nil {
				reportRaised(n, codes)
			}
		}
		return true
	})
	return out
}

// stringLit reports whether e is a string literal.
func stringLit(e ast.Expr) (*ast.BasicLit, bool) {
	lit, ok := e.(*ast.BasicLit)
	return lit, ok && lit.Kind == token.STRING
}

// isCode reports whether e reads an error's code: x.Code, or a slice of it
// (its class, x.Code[:2]).
func isCode(e ast.Expr) bool {
	if s, ok := e.(*ast.SliceExpr); ok {
		e = s.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	return ok && (sel.Sel.Name == "Code" || sel.Sel.Name == "SQLState")
}
