package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLongFuncs(t *testing.T) {
	dir := t.TempDir()
	body := func(n int) string { return strings.Repeat("\t_ = 0\n", n) }
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// short: 3 lines; exact: 5 lines, at the limit; over: 6 lines; a method over the limit too.
	write("a.go", "package a\n\nfunc short() {\n"+body(1)+"}\n\nfunc exact() {\n"+body(3)+"}\n\nfunc over() {\n"+body(4)+"}\n\ntype T[X any] struct{}\n\nfunc (t *T[X]) method() {\n"+body(5)+"}\n")
	write("a_test.go", "package a\n\nfunc testOnly() {\n"+body(20)+"}\n")
	got, err := longFuncs(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range got {
		names = append(names, l.name)
	}
	if strings.Join(names, ",") != "over,T.method" || got[0].lines != 6 || got[1].lines != 7 {
		t.Errorf("longFuncs = %+v, want over (6 lines) and T.method (7), tests left out", got)
	}
	write("bad.go", "package a\nfunc (")
	if _, err := longFuncs(dir, 5); err == nil || !strings.Contains(err.Error(), "bad.go") {
		t.Errorf("longFuncs on a file that does not parse = %v, want an error naming it", err)
	}
}
