// Command funclen lists the functions of the Go files under the directories given, tests left
// out, that are longer than -max lines, from `func` to the closing brace, longest first; it
// exits 1 when there is one. `make lint` runs it over the packages that hold the engine and its
// drivers, so that each function stays short enough to read at once.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// long is a function over the limit.
type long struct {
	lines int
	where string
	name  string
}

func main() {
	limit := flag.Int("max", 80, "the most lines a function may have")
	flag.Parse()
	var found []long
	for _, root := range flag.Args() {
		l, err := longFuncs(root, *limit)
		if err != nil {
			fmt.Fprintln(os.Stderr, "funclen:", err)
			os.Exit(2)
		}
		found = append(found, l...)
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].lines > found[j].lines })
	for _, f := range found {
		fmt.Printf("%4d lines  %s  %s\n", f.lines, f.where, f.name)
	}
	if len(found) > 0 {
		fmt.Fprintf(os.Stderr, "funclen: %d functions over %d lines: split them\n", len(found), *limit)
		os.Exit(1)
	}
}

// longFuncs are the functions of the non-test Go files under root longer than limit lines.
func longFuncs(root string, limit int) ([]long, error) {
	var out []long
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > limit {
				out = append(out, long{lines: n, where: fmt.Sprintf("%s:%d", path, start.Line), name: funcName(fn)})
			}
		}
		return nil
	})
	return out, err
}

// funcName is fn's name, with its receiver's type for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if idx, ok := t.(*ast.IndexExpr); ok {
		t = idx.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
