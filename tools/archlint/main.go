// Command archlint enforces the repository's code rules, those of issue #44
// that neither the compiler nor go vet sees:
//
//   - import rules (rules.go, importRules): control-plane/ uses of filter/
//     only its engine, config decoder and wire contract, which imports
//     nothing of either; filter/ links neither the control plane, the
//     tooling, gRPC nor net/http, and the Wasm module no heavy standard
//     package; control-plane/experiment and control-plane/rollout link
//     nothing of the server side, nor does allotctl; nothing imports e2e/
//     (`make check-deps` runs these alone: archlint -imports);
//   - layers (rules.go, layers): every control-plane and proto package has a
//     level, and no package imports one on a higher level;
//   - sizes: no non-test, non-generated Go file over 800 lines, no function
//     body over 100 lines unless it is table-driven data; no Markdown line
//     over 300 characters outside fenced code, the control-plane and filter
//     READMEs at most 250 lines, other Markdown at most 700 (measurement
//     records exempt).
//
// The import graph comes from `go list -json` (standard library only, no
// go/packages); the sizes from go/parser over the files git tracks, the
// nested modules deploy/ and deploy/istio included (they are out of scope
// for the import rules only: separate modules). `make lint` runs it from the
// repository root; it prints one line per violation naming the file and
// line, or the importing and imported package, and the rule, and exits 1 if
// there is any (2 if it cannot look).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/tools/internal/tracked"
)

func main() {
	root := flag.String("C", ".", "the repository (module root) to check")
	importsOnly := flag.Bool("imports", false, "check the import rules and layers only, not the sizes")
	flag.Parse()
	problems, err := run(*root, !*importsOnly)
	if err != nil {
		fmt.Fprintln(os.Stderr, "archlint:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("archlint: %d violation(s)\n", len(problems))
		os.Exit(1)
	}
}

// run returns every violation in the repository at root, sorted: of the
// import rules, and of the size limits when sizes is set.
func run(root string, sizes bool) ([]string, error) {
	mod, g, tests, problems, err := loadGraph(root)
	if err != nil {
		return nil, err
	}
	problems = append(problems, checkImports(mod, g, tests, importRules, layered, layers)...)
	if !sizes {
		sortProblems(problems)
		return problems, nil
	}
	files, err := tracked.Files(root)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		isGo, isMD := strings.HasSuffix(f, ".go"), strings.HasSuffix(f, ".md")
		if !isGo && !isMD {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) { // deleted in the work tree, not yet in the index
			continue
		} else if err != nil {
			return nil, err
		}
		if isGo {
			problems = append(problems, checkGo(f, b)...)
		} else {
			problems = append(problems, checkMarkdown(f, b)...)
		}
	}
	sortProblems(problems)
	return problems, nil
}

// sortProblems sorts violations by file, then line number, then text.
func sortProblems(problems []string) {
	key := func(p string) (string, int, string) {
		file, rest, _ := strings.Cut(p, ":")
		n, after, ok := strings.Cut(rest, ":")
		if line, err := strconv.Atoi(n); ok && err == nil {
			return file, line, after
		}
		return file, 0, rest
	}
	sort.SliceStable(problems, func(i, j int) bool {
		fi, li, ri := key(problems[i])
		fj, lj, rj := key(problems[j])
		if fi != fj {
			return fi < fj
		}
		if li != lj {
			return li < lj
		}
		return ri < rj
	})
}
