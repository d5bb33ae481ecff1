package parapply

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// eachSourceFile parses every non-test Go file of the module and calls f
// with its path (relative to the root) and syntax tree.
func eachSourceFile(t *testing.T, f func(path string, fset *token.FileSet, file *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		n++
		f(filepath.ToSlash(path), fset, file)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 {
		t.Fatalf("only %d source files found: not run from the module's root?", n)
	}
}

// TestEnvironmentAtTheEdges: the environment is read by the commands
// (cmd/) and by internal/pgtest, the harness that starts the embedded
// servers of the tests, the demo and the benchmark (its PARAPPLY_PG_*
// variables choose their binaries); never by the packages that replicate,
// whose behaviour is set by their Config alone.
func TestEnvironmentAtTheEdges(t *testing.T) {
	reads := map[string]bool{"Getenv": true, "LookupEnv": true, "Environ": true, "ExpandEnv": true}
	eachSourceFile(t, func(path string, fset *token.FileSet, file *ast.File) {
		if strings.HasPrefix(path, "cmd/") || strings.HasPrefix(path, "internal/pgtest/") {
			return
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && (x.Name == "os" || x.Name == "syscall") && reads[sel.Sel.Name] {
					t.Errorf("%s: %s.%s: read the environment in cmd/ and pass the value in the package's Config", fset.Position(sel.Pos()), x.Name, sel.Sel.Name)
				}
			}
			return true
		})
	})
}

// TestOnePackageMakesTheSchema: every table, function and trigger parapply
// keeps on the target is made by package targetdb's migrations (or its
// on-demand tombstone objects), so that one ordered list says what a target
// holds at each version. Package ddl is the one other maker: its objects
// (the DDL capture) are on the publisher, installed by parapply ddl
// install.
func TestOnePackageMakesTheSchema(t *testing.T) {
	creates := regexp.MustCompile(`(?i)CREATE\s+(OR\s+REPLACE\s+)?(UNLOGGED\s+)?(TABLE|FUNCTION|TRIGGER|INDEX|SEQUENCE|VIEW|SCHEMA)\b[^;]*\bparapply\b`)
	makers := map[string]bool{}
	eachSourceFile(t, func(path string, fset *token.FileSet, file *ast.File) {
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				s, err := strconv.Unquote(lit.Value)
				if err == nil && creates.MatchString(s) {
					makers[filepath.Dir(path)] = true
					if filepath.Dir(path) != "targetdb" && filepath.Dir(path) != "ddl" {
						t.Errorf("%s: creates parapply's own objects on the target: add a migration in targetdb/ instead", fset.Position(lit.Pos()))
					}
				}
			}
			return true
		})
	})
	if !makers["targetdb"] {
		t.Error("no CREATE of parapply's objects found in targetdb/: the pattern no longer matches how migrations are written")
	}
}

// maxFuncLines is the longest a function of parapply may be: past it, what
// a function does no longer reads at a glance.
const maxFuncLines = 80

// longFuncExceptions are the functions allowed past maxFuncLines, each with
// its reason.
var longFuncExceptions = map[string]string{
	// One case per pgoutput message type, each a few lines that read the
	// message's fields in wire order: split, the protocol's list of messages
	// would no longer read in one place.
	"pgoutput/decode.go:Decode": "the decoder's one switch over the message types",
}

// TestFunctionsShort: no function of any package of the module (commands,
// tools and tests' harness included) is longer than maxFuncLines lines,
// but the exceptions named in longFuncExceptions.
func TestFunctionsShort(t *testing.T) {
	seen := map[string]bool{}
	eachSourceFile(t, func(path string, fset *token.FileSet, file *ast.File) {
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			key := path + ":" + fd.Name.Name
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			n := end.Line - start.Line + 1
			if _, ok := longFuncExceptions[key]; ok {
				seen[key] = true
				continue
			}
			if n > maxFuncLines {
				t.Errorf("%s: %s is %d lines long, more than %d: split it into functions whose names say what they do", start, fd.Name.Name, n, maxFuncLines)
			}
		}
	})
	for key := range longFuncExceptions {
		if !seen[key] {
			t.Errorf("%s is named an exception but no such function is found: remove it from longFuncExceptions", key)
		}
	}
}
