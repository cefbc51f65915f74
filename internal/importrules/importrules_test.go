// Package importrules holds the test that enforces kvroute's import rules
// (DESIGN.md's package table), as pebble's forbidden-imports lint test does:
// it lists every package of the module with `go list` and fails on any
// import that crosses a rule.
package importrules

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/kvroute/kvroute/"

// production is the router's production packages (each with the packages
// under it): they never import a test harness.
var production = []string{
	"server", "extproc", "routing", "index", "ingest", "mesh", "discovery", "config",
	"tokenize", "chattemplate", "blockhash", "cmd/kvroute", "internal/engine", "internal/zmtpcap", "internal/panics",
}

// harnesses are the packages that exist for tests and tools, read from
// harnesses.txt (which scripts/deadcode.sh reads too).
func harnesses(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("harnesses.txt")
	if err != nil {
		t.Fatal(err)
	}
	var hs []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			hs = append(hs, line)
		}
	}
	if len(hs) == 0 {
		t.Fatal("harnesses.txt lists no package")
	}
	return hs
}

// forbidden maps a package (with the packages under it) to the packages it
// must not depend on, directly or through another.
var forbidden = map[string][]string{
	// extproc speaks Envoy's protocol and knows no vLLM wire format.
	"extproc": {"ingest", "config"},
	// The decision receives resolved pools; it is called by extproc.
	"routing": {"config", "ingest", "extproc"},
	// Pure and testable alone: none of the other top-level packages.
	"index":     {"server", "extproc", "routing", "ingest", "mesh", "discovery", "config", "tokenize", "chattemplate", "blockhash"},
	"tokenize":  {"server", "extproc", "routing", "index", "ingest", "mesh", "discovery", "config", "chattemplate", "blockhash"},
	"blockhash": {"server", "extproc", "routing", "index", "ingest", "mesh", "discovery", "config", "tokenize", "chattemplate"},
	"mesh":      {"ingest", "config", "extproc"},
	"discovery": {"config", "ingest"},
	"config":    {"server", "extproc", "routing", "index", "ingest", "mesh", "discovery"},
	// Leaves that packages which may not import each other share.
	"internal/engine":  {"server", "extproc", "routing", "index", "ingest", "mesh", "discovery", "config", "tokenize", "chattemplate", "blockhash"},
	"internal/zmtpcap": {"server", "extproc", "routing", "index", "ingest", "mesh", "discovery", "config", "tokenize", "chattemplate", "blockhash"},
}

// exceptions are the rule crossings that exist today, each naming what
// crosses: a listed crossing is allowed, any other fails. There are none.
var exceptions = map[[2]string]string{}

type pkg struct {
	ImportPath   string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

// listPackages is `go list -deps=false -json ./...` over the module.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = strings.TrimSpace(string(root))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: not the module", len(pkgs))
	}
	return pkgs
}

// under reports whether import path path is package rel of the module or
// under it.
func under(path, rel string) bool {
	p := module + rel
	return path == p || strings.HasPrefix(path, p+"/")
}

// ownInternal reports whether imp is an internal package of the command
// importer belongs to (cmd/kvroute importing cmd/kvroute/internal/...),
// the one way into cmd/ that keeps a command's parts its own.
func ownInternal(importer, imp string) bool {
	root, _, ok := strings.Cut(imp, "/internal/")
	return ok && (importer == root || strings.HasPrefix(importer, root+"/"))
}

// violations applies the rules to pkgs and returns one line per crossing.
func violations(pkgs []pkg, harnesses []string) []string {
	var bad []string
	for _, p := range pkgs {
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if under(imp, "cmd") && !ownInternal(p.ImportPath, imp) {
				bad = append(bad, p.ImportPath+" imports "+imp+": nothing imports cmd/...")
			}
		}
		for _, prod := range production {
			if !under(p.ImportPath, prod) {
				continue
			}
			for _, dep := range p.Deps {
				for _, h := range harnesses {
					if under(dep, h) {
						bad = append(bad, p.ImportPath+" depends on "+dep+": production never imports a test harness")
					}
				}
			}
		}
		for from, tos := range forbidden {
			if !under(p.ImportPath, from) {
				continue
			}
			for _, dep := range p.Deps {
				for _, to := range tos {
					if under(dep, to) && exceptions[[2]string{from, to}] == "" {
						bad = append(bad, p.ImportPath+" depends on "+dep+": "+from+" must not import "+to)
					}
				}
			}
		}
	}
	return bad
}

// TestImportRules: the module's packages keep DESIGN.md's import rules.
func TestImportRules(t *testing.T) {
	for _, v := range violations(listPackages(t), harnesses(t)) {
		t.Error(v)
	}
}

// TestRulesCatchACrossing: each kind of rule reports a crossing, so the
// rules test cannot pass by matching nothing.
func TestRulesCatchACrossing(t *testing.T) {
	pkgs := []pkg{
		{ImportPath: module + "server", TestImports: []string{module + "cmd/kvroute"}},
		{ImportPath: module + "cmd/vllm-emu", Imports: []string{module + "cmd/kvroute/internal/sighup"}},
		{ImportPath: module + "cmd/kvroute", Imports: []string{module + "cmd/kvroute/internal/sighup"}}, // its own: allowed
		{ImportPath: module + "extproc", Deps: []string{module + "internal/fakeenvoy", module + "ingest"}},
		{ImportPath: module + "routing", Deps: []string{module + "config"}},
		{ImportPath: module + "mesh", Deps: []string{module + "ingest"}},
		{ImportPath: module + "tokenize/internal/x", Deps: []string{module + "blockhash"}},
	}
	got := violations(pkgs, harnesses(t))
	want := []string{
		"server imports " + module + "cmd/kvroute",
		"cmd/vllm-emu imports " + module + "cmd/kvroute/internal/sighup",
		"extproc depends on " + module + "internal/fakeenvoy",
		"extproc depends on " + module + "ingest: extproc must not import ingest",
		"routing depends on " + module + "config: routing must not import config",
		"mesh depends on " + module + "ingest: mesh must not import ingest",
		"tokenize/internal/x depends on " + module + "blockhash: tokenize must not import blockhash",
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
			t.Errorf("no violation %q in %q", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d violations, want %d: %q", len(got), len(want), got)
	}
}
