package subscriber

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, fset *token.FileSet, dir string) []*ast.File {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// maxFuncLines is the longest a function of the packages that make up a
// run may be: past it, what a function does no longer reads at a glance.
const maxFuncLines = 80

// sourceFuncLines bounds source's functions until source/source.go is
// split by concern (its check is 83 lines).
const sourceFuncLines = 100

// TestFunctionsShort: no function of subscriber (with flow, its loop's
// core), apply, source, tablesync or target is longer than maxFuncLines
// lines.
func TestFunctionsShort(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range []string{".", "flow", "../apply", "../source", "../tablesync", "../target"} {
		limit := maxFuncLines
		if dir == "../source" {
			limit = sourceFuncLines
		}
		for _, f := range parseDir(t, fset, dir) {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
				if n := end.Line - start.Line + 1; n > limit {
					t.Errorf("%s: %s is %d lines long, more than %d: split it into functions whose names say what they do", start, fd.Name.Name, n, limit)
				}
			}
		}
	}
}

// TestRunInPhases: a run is its phases, called in order, each a method of
// its own file (see connect.go), and its setup reads the slot's record on
// the target with one call into progress (progress.Open).
func TestRunInPhases(t *testing.T) {
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}
	files := map[string]string{}
	for _, f := range parseDir(t, fset, ".") {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil && isSubscriber(fd.Recv.List[0].Type) {
				funcs[fd.Name.Name] = fd
				files[fd.Name.Name] = filepath.Base(fset.Position(fd.Pos()).Filename)
			}
		}
	}
	// calls lists the calls fd makes, as x.name, in source order.
	calls := func(fd *ast.FuncDecl) []string {
		var out []string
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok {
						out = append(out, x.Name+"."+sel.Sel.Name)
					}
				}
			}
			return true
		})
		return out
	}
	run := funcs["run"]
	if run == nil {
		t.Fatal("no method run of *Subscriber")
	}
	var phases []string
	for _, c := range calls(run) {
		if name, ok := strings.CutPrefix(c, "s."); ok && name != "endRun" {
			phases = append(phases, name)
		}
	}
	want := []string{"connect", "claim", "setup", "stream"}
	if !slices.Equal(phases, want) {
		t.Errorf("run calls %v; want the phases %v, in order", phases, want)
	}
	for _, p := range want {
		if got := files[p]; got != p+".go" {
			t.Errorf("phase %s is in %q, want %s.go", p, got, p)
		}
	}
	if setup := funcs["setup"]; setup != nil {
		var progressCalls []string
		for _, c := range calls(setup) {
			if strings.HasPrefix(c, "progress.") {
				progressCalls = append(progressCalls, c)
			}
		}
		if !slices.Equal(progressCalls, []string{"progress.Open"}) {
			t.Errorf("setup calls into progress %v; want one progress.Open", progressCalls)
		}
	}
}

// isSubscriber reports whether a receiver's type is *Subscriber.
func isSubscriber(e ast.Expr) bool {
	st, ok := e.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := st.X.(*ast.Ident)
	return ok && id.Name == "Subscriber"
}
