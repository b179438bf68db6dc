package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// importRule is one row of importRules.
type importRule struct {
	Name       string   // printed with each violation
	From       []string // importers (module-relative patterns)
	FromExcept []string
	To         []string // refused packages of this module
	ToExcept   []string
	External   []string // refused packages of other modules or the standard library
	Direct     bool     // only the importer's own imports, not what they link
	Tests      bool     // also the direct imports of the importer's test files
	Why        string   // printed with each violation
}

// graph is an import graph: each package's import path and the import paths
// of its non-test imports.
type graph map[string][]string

// matches reports whether the (module-relative or full) path p matches
// the pattern pat: equal, or below pat's prefix when pat ends in "/...".
// "..." alone matches every path.
func matches(pat, p string) bool {
	if pat == "..." {
		return true
	}
	if prefix, ok := strings.CutSuffix(pat, "/..."); ok {
		return p == prefix || strings.HasPrefix(p, prefix+"/")
	}
	return p == pat
}

func matchesAny(pats []string, p string) bool {
	for _, pat := range pats {
		if matches(pat, p) {
			return true
		}
	}
	return false
}

// module knows which import paths are this module's.
type module string

// rel returns p relative to the module and whether p is the module's.
func (m module) rel(p string) (string, bool) {
	if p == string(m) {
		return ".", true
	}
	r, ok := strings.CutPrefix(p, string(m)+"/")
	return r, ok
}

// name is how a violation names p: module-relative when it is the module's.
func (m module) name(p string) string {
	if r, ok := m.rel(p); ok {
		return r
	}
	return p
}

// refuses reports whether rule r refuses a package to link p.
func (m module) refuses(r importRule, p string) bool {
	if rel, own := m.rel(p); own {
		return matchesAny(r.To, rel) && !matchesAny(r.ToExcept, rel)
	}
	return matchesAny(r.External, p)
}

// checkImports returns a line per violation of rules, and of layers, in the
// graph g of module m; tests are the imports of its packages' test files.
func checkImports(m module, g, tests graph, rules []importRule, layered []string, layers [][]string) []string {
	var out []string
	pkgs := make([]string, 0, len(g))
	for p := range g {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, r := range rules {
		from := func(p string) bool {
			rel, own := m.rel(p)
			return own && matchesAny(r.From, rel) && !matchesAny(r.FromExcept, rel)
		}
		for _, p := range pkgs {
			if !from(p) {
				continue
			}
			for _, v := range m.violations(g, r, p, from) {
				out = append(out, v+": "+r.Name+": "+r.Why)
			}
			if !r.Tests {
				continue
			}
			for _, q := range tests[p] {
				if m.refuses(r, q) {
					out = append(out, m.name(p)+" (tests) imports "+m.name(q)+": "+r.Name+": "+r.Why)
				}
			}
		}
	}
	out = append(out, m.checkLayers(g, pkgs, layered, layers)...)
	return out
}

// violations returns, for the importer p, "p imports q" for each refused
// import q; for a transitive rule also "p imports q (via a → b)" when p
// links q through packages the rule does not check themselves (those it
// checks report their own imports).
func (m module) violations(g graph, r importRule, p string, checked func(string) bool) []string {
	var out []string
	if r.Direct {
		for _, q := range g[p] {
			if m.refuses(r, q) {
				out = append(out, m.name(p)+" imports "+m.name(q))
			}
		}
		return out
	}
	// Breadth first from p, not entering checked packages or refused ones.
	via := map[string]string{p: ""}
	queue := []string{p}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		for _, q := range g[a] {
			if _, seen := via[q]; seen {
				continue
			}
			via[q] = a
			switch {
			case m.refuses(r, q):
				var chain []string
				for x := a; x != p; x = via[x] {
					chain = append(chain, m.name(x))
				}
				line := m.name(p) + " imports " + m.name(q)
				if len(chain) > 0 {
					slices.Reverse(chain)
					line += " (via " + strings.Join(chain, " → ") + ")"
				}
				out = append(out, line)
			case !checked(q):
				queue = append(queue, q)
			}
		}
	}
	return out
}

// checkLayers refuses a package under layered that layers do not place,
// and an import from a layered package to one on a higher level.
func (m module) checkLayers(g graph, pkgs, layered []string, layers [][]string) []string {
	level := func(p string) (int, bool) {
		rel, own := m.rel(p)
		if !own || !matchesAny(layered, rel) {
			return 0, false
		}
		best, bestLen := -1, -1
		for i, l := range layers {
			for _, pat := range l {
				if matches(pat, rel) && len(pat) > bestLen {
					best, bestLen = i, len(pat)
				}
			}
		}
		return best, true
	}
	var out []string
	for _, p := range pkgs {
		lp, ok := level(p)
		if !ok {
			continue
		}
		if lp < 0 {
			out = append(out, m.name(p)+": layers: not placed; add it to a level of layers in tools/archlint/rules.go (above everything it imports, below everything that imports it)")
			continue
		}
		for _, q := range g[p] {
			if lq, ok := level(q); ok && lq > lp {
				out = append(out, fmt.Sprintf("%s imports %s: layers: upward import (level %d imports level %d); imports point down", m.name(p), m.name(q), lp, lq))
			}
		}
	}
	return out
}

// listed is what archlint reads of a `go list -json` package.
type listed struct {
	ImportPath                         string
	Imports, TestImports, XTestImports []string
	Error                              *struct{ Err string }
}

// loadGraph lists the packages of the module in root and everything they
// link, with the e2e and reliability build tags, on the host and, for
// filter/..., for wasip1: the union of both graphs. tests are the imports
// of the module's packages' test files. problems are the packages go list
// could not load.
func loadGraph(root string) (mod module, g, tests graph, problems []string, err error) {
	if mod, err = modulePath(root); err != nil {
		return "", nil, nil, nil, err
	}
	g, tests = graph{}, graph{}
	runs := []struct {
		env      []string
		patterns []string
	}{
		{nil, []string{"./..."}},
		{[]string{"GOOS=wasip1", "GOARCH=wasm"}, []string{"./filter/..."}},
	}
	for _, run := range runs {
		args := append([]string{"list", "-e", "-deps", "-tags", "e2e reliability", "-json=ImportPath,Imports,TestImports,XTestImports,Error"}, run.patterns...)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), run.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", nil, nil, nil, fmt.Errorf("go list: %v: %s", err, stderr.String())
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p listed
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				return "", nil, nil, nil, fmt.Errorf("go list: %w", err)
			}
			_, own := mod.rel(p.ImportPath)
			if own && p.Error != nil && !strings.Contains(p.Error.Err, "build constraints exclude all Go files") {
				problems = append(problems, fmt.Sprintf("%s: go list: %s", mod.name(p.ImportPath), p.Error.Err))
			}
			g.add(p.ImportPath, p.Imports)
			if own {
				tests.add(p.ImportPath, p.TestImports)
				tests.add(p.ImportPath, p.XTestImports)
			}
		}
	}
	return mod, g, tests, problems, nil
}

// add records that p imports imports, once each; p is in g even with none.
func (g graph) add(p string, imports []string) {
	if _, ok := g[p]; !ok {
		g[p] = nil
	}
	for _, q := range imports {
		if !slices.Contains(g[p], q) {
			g[p] = append(g[p], q)
		}
	}
}

// modulePath reads the module path from root's go.mod.
func modulePath(root string) (module, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return module(strings.Trim(strings.TrimSpace(rest), `"`)), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", filepath.Join(root, "go.mod"))
}
