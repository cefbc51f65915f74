package routing

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryReasonIsEmitted fails for a decision reason or outcome that no
// production code uses: a label value the metric can never carry is a
// promise the docs make for nothing.
func TestEveryReasonIsEmitted(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "reasons.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Reason") || strings.HasPrefix(n.Name, "Outcome") {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found %d reasons in reasons.go", len(names))
	}
	used := map[string]bool{}
	var scan func(dir string)
	scan = func(dir string) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if e.IsDir() {
				if e.Name() != "testdata" && e.Name() != ".git" && e.Name() != ".cache" && e.Name() != "third_party" {
					scan(p)
				}
				continue
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || p == filepath.Join("..", "routing", "reasons.go") {
				continue
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if strings.Contains(string(b), n) {
					used[n] = true
				}
			}
		}
	}
	scan("..")
	for _, n := range names {
		if !used[n] {
			t.Errorf("%s is declared but no production code uses it", n)
		}
	}
}
