// Package pkgdoc checks that every package of the module has a package
// doc comment (STYLE.md: routine guards).
package pkgdoc

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEveryPackageHasADocComment(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s", root)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin") {
			return filepath.SkipDir
		}
		entries, err := os.ReadDir(path)
		if err != nil {
			return err
		}
		// package name → documented (non-test files only).
		pkgs := map[string]bool{}
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(path, n), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				return err
			}
			documented := f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != ""
			pkgs[f.Name.Name] = pkgs[f.Name.Name] || documented
		}
		for p, documented := range pkgs {
			checked++
			if !documented {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("package %s (%s) has no package doc comment", p, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("only %d packages found; is the walk broken?", checked)
	}
}
