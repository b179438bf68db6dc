package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testModule = "example.com/m"

// own turns a module-relative graph (importer → imports, "std:" marking a
// standard or other module's path) into one of full import paths.
func own(rel map[string][]string) graph {
	full := func(p string) string {
		if s, ok := strings.CutPrefix(p, "std:"); ok {
			return s
		}
		return testModule + "/" + p
	}
	g := graph{}
	for p, imps := range rel {
		var q []string
		for _, i := range imps {
			q = append(q, full(i))
		}
		g[full(p)] = q
	}
	return g
}

// TestImportRules runs the real rule tables over small import graphs: each
// case shows one rule refusing an import, or accepting what it must.
func TestImportRules(t *testing.T) {
	const (
		contract = "control-plane-uses-filter-contract: control-plane/ may import of filter/ only filter/engine, filter/config and filter/wire"
		alone    = "filter-stands-alone: filter/ links neither control-plane/, bench/, e2e/, internal/, gRPC nor net/http"
		noE2E    = "nothing-imports-e2e: nothing outside e2e/ imports e2e/..."
		light    = "wasm-module-stays-light: the Wasm module links none of regexp, fmt, os, encoding/json, time, runtime/debug, net (each MB costs Envoy ~16 MiB of RSS)"
		pure     = "experiment-is-pure: control-plane/experiment links only the standard library, guard, store's types, the proto packages and the filter's engine"
		rollout  = "rollout-stands-alone: control-plane/rollout links only the standard library and the proto packages"
		client   = "allotctl-is-a-client: allotctl links neither the admin server, the stores, xDS, gRPC nor Prometheus"
	)
	tests := []struct {
		name  string
		graph map[string][]string
		want  []string
	}{
		{"the control plane uses the engine, config and the wire contract", map[string][]string{
			"control-plane/translate": {"filter/engine", "filter/config", "filter/wire", "proto/allot/filter/v1", "std:strings"},
			"filter/engine":           {"filter/internal/regex"},
			"filter/config":           {"filter/engine", "filter/internal/jsonx"},
		}, nil},
		{"the control plane imports the filter's adapters", map[string][]string{
			"control-plane/translate":  {"filter/plugin", "filter/abi"},
			"control-plane/outcomes":   {"filter/cookie", "filter/dynmod"},
			"control-plane/xds":        {"filter/proxywasm", "filter/nativemod", "filter/native"},
			"control-plane/experiment": {"filter"},
		}, []string{
			"control-plane/experiment imports filter: " + contract,
			"control-plane/outcomes imports filter/cookie: " + contract,
			"control-plane/outcomes imports filter/dynmod: " + contract,
			"control-plane/translate imports filter/plugin: " + contract,
			"control-plane/translate imports filter/abi: " + contract,
			"control-plane/xds imports filter/proxywasm: " + contract,
			"control-plane/xds imports filter/nativemod: " + contract,
			"control-plane/xds imports filter/native: " + contract,
			"control-plane/experiment imports filter: " + pure,
		}},
		{"the filter links the control plane, the tooling, gRPC or net/http", map[string][]string{
			"filter/plugin":                  {"control-plane/experiment", "filter/engine"},
			"filter/engine":                  {"std:strings", "std:internal/abi"}, // the standard library's internal/ is fine
			"filter/config":                  {"std:example.org/telemetry"},
			"std:example.org/telemetry":      {"std:example.org/telemetry/otlp"},
			"std:example.org/telemetry/otlp": {"std:net/http", "std:google.golang.org/grpc/codes"},
			"filter/nativemod":               {"internal/harness", "bench/suite", "e2e/echo"},
		}, []string{
			"filter/config imports net/http (via example.org/telemetry → example.org/telemetry/otlp): " + alone,
			"filter/config imports google.golang.org/grpc/codes (via example.org/telemetry → example.org/telemetry/otlp): " + alone,
			"filter/nativemod imports internal/harness: " + alone,
			"filter/nativemod imports bench/suite: " + alone,
			"filter/nativemod imports e2e/echo: " + alone,
			"filter/plugin imports control-plane/experiment: " + alone,
			"filter/nativemod imports e2e/echo: " + noE2E,
		}},
		{"a filter package reports its own import, not its importers", map[string][]string{
			"filter":        {"filter/plugin"},
			"filter/plugin": {"std:net/http"},
		}, []string{
			"filter/plugin imports net/http: " + alone,
			"filter imports net/http (via filter/plugin): " + light,
		}},
		{"the Wasm module links a heavy standard package", map[string][]string{
			"filter":        {"filter/plugin", "std:strconv"},
			"filter/plugin": {"filter/engine"},
			"filter/engine": {"std:regexp"},
			"std:regexp":    {"std:regexp/syntax"},
			"filter/native": {"std:fmt", "std:os"}, // the native module may
		}, []string{
			"filter imports regexp (via filter/plugin → filter/engine): " + light,
		}},
		{"the experiment model links the server side", map[string][]string{
			"control-plane/experiment": {"control-plane/guard", "control-plane/store", "filter/engine", "proto/allot/experiment/v1", "control-plane/translate"},
			"filter/engine":            {"filter/internal/regex"},
			"control-plane/store":      nil,
			"control-plane/translate":  {"control-plane/experiment"},
		}, []string{
			"control-plane/experiment imports control-plane/translate: " + pure,
			"control-plane/experiment imports control-plane/translate: layers: upward import (level 1 imports level 2); imports point down",
		}},
		{"rollout links etcd or another control-plane package", map[string][]string{
			"control-plane/rollout": {"proto/allot/admin/v1", "std:go.etcd.io/etcd/client/v3", "control-plane/mtls"},
			"proto/allot/admin/v1":  {"std:google.golang.org/protobuf/proto"},
			"control-plane/mtls":    nil,
		}, []string{
			"control-plane/rollout imports go.etcd.io/etcd/client/v3: " + rollout,
			"control-plane/rollout imports control-plane/mtls: " + rollout,
		}},
		{"allotctl links the server side", map[string][]string{
			"control-plane/cmd/allotctl": {"control-plane/cli"},
			"control-plane/cli":          {"control-plane/experiment", "control-plane/rollout", "std:google.golang.org/grpc"},
			"control-plane/experiment":   {"control-plane/store"},
			"control-plane/rollout":      nil,
			"control-plane/store":        {"control-plane/store/etcd"},
		}, []string{
			"control-plane/experiment imports control-plane/store/etcd (via control-plane/store): " + pure,
			"control-plane/cmd/allotctl imports google.golang.org/grpc (via control-plane/cli): " + client,
			"control-plane/cmd/allotctl imports control-plane/store/etcd (via control-plane/cli → control-plane/experiment → control-plane/store): " + client,
			"control-plane/store imports control-plane/store/etcd: layers: upward import (level 0 imports level 1); imports point down",
		}},
		{"the wire contract imports the filter or the control plane", map[string][]string{
			"filter/wire":       {"filter/wire/headers", "filter/engine", "control-plane/rollout", "std:strconv"},
			"filter/wire/stats": {"filter/wire"},
		}, []string{
			"filter/wire imports control-plane/rollout: " + alone,
			"filter/wire imports filter/engine: wire-contract-stands-alone: filter/wire imports nothing of filter/ or control-plane/",
			"filter/wire imports control-plane/rollout: wire-contract-stands-alone: filter/wire imports nothing of filter/ or control-plane/",
		}},
		{"something outside e2e imports e2e", map[string][]string{
			"internal/harness": {"e2e/echo"},
			"e2e/reliability":  {"e2e/echo", "internal/harness"},
			"bench/suite":      {"e2e"},
		}, []string{
			"bench/suite imports e2e: " + noE2E,
			"internal/harness imports e2e/echo: " + noE2E,
		}},
		{"imports point down the layers", map[string][]string{
			"control-plane/cmd/allotd": {"control-plane/server", "control-plane/store/etcd"},
			"control-plane/server":     {"control-plane/admin", "control-plane/rollout"},
			"control-plane/admin":      {"control-plane/store", "proto/allot/admin/v1"},
			"control-plane/store/etcd": {"control-plane/rollout", "control-plane/store"},
		}, nil},
		{"an upward import", map[string][]string{
			"control-plane/store":      {"control-plane/admin"},
			"control-plane/experiment": {"control-plane/cmd/allotctl"},
			"control-plane/admin":      nil,
		}, []string{
			"control-plane/experiment imports control-plane/cmd/allotctl: " + pure,
			"control-plane/experiment imports control-plane/cmd/allotctl: layers: upward import (level 1 imports level 6); imports point down",
			"control-plane/store imports control-plane/admin: layers: upward import (level 0 imports level 3); imports point down",
		}},
		{"a package the layers do not place", map[string][]string{
			"control-plane/newthing": {"control-plane/store"},
			"internal/newthing":      nil, // not layered
		}, []string{
			"control-plane/newthing: layers: not placed; add it to a level of layers in tools/archlint/rules.go (above everything it imports, below everything that imports it)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkImports(testModule, own(tt.graph), nil, importRules, layered, layers)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
		})
	}
}

// TestImportRulesOfTests shows the rules that look at test files too
// (nothing-imports-e2e) refusing a test's import, and the others letting a
// test import what it checks its package against.
func TestImportRulesOfTests(t *testing.T) {
	g := own(map[string][]string{"control-plane/xds": nil, "e2e/reliability": nil})
	tests := own(map[string][]string{
		"control-plane/xds": {"e2e/echo", "filter/plugin"},
		"e2e/reliability":   {"e2e/echo"},
	})
	got := checkImports(testModule, g, tests, importRules, layered, layers)
	want := []string{"control-plane/xds (tests) imports e2e/echo: nothing-imports-e2e: nothing outside e2e/ imports e2e/..."}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// lines returns n lines of text, each "\tx++".
func lines(n int) string {
	return strings.Repeat("\tx++\n", n)
}

func TestCheckGo(t *testing.T) {
	table := func(rows int) string { // a composite literal of rows lines
		return "[]string{\n" + strings.Repeat("\t\t\"row\",\n", rows-2) + "\t}"
	}
	tests := []struct {
		name, file, src string
		want            []string
	}{
		{"a file of 800 lines", "a/a.go", "package a\n" + strings.Repeat("\n", 799), nil},
		{"a file of 801 lines", "a/a.go", "package a\n" + strings.Repeat("\n", 800), []string{
			"a/a.go:801: go-file-size: 801 lines, at most 800 in a non-test, non-generated Go file",
		}},
		{"a test file of 900 lines", "a/a_test.go", "package a\n" + strings.Repeat("\n", 899), nil},
		{"a generated file of 900 lines", "a/a.pb.go", "// Code generated by protoc-gen-go. DO NOT EDIT.\n\npackage a\n" + strings.Repeat("\n", 897), nil},
		{"a function of 100 lines", "a/a.go", "package a\n\nfunc F(x int) {\n" + lines(100) + "}\n", nil},
		{"a function of 101 lines", "a/a.go", "package a\n\nfunc F(x int) {\n" + lines(101) + "}\n", []string{
			"a/a.go:3: func-size: func F has a 101-line body, at most 100 unless it is table-driven data",
		}},
		{"a method of 101 lines", "a/a.go", "package a\n\ntype T[P any] struct{}\n\nfunc (t *T[P]) M(x int) {\n" + lines(101) + "}\n", []string{
			"a/a.go:5: func-size: method T.M has a 101-line body, at most 100 unless it is table-driven data",
		}},
		{"a function literal of 101 lines", "a/a.go", "package a\n\nvar f = func(x int) {\n" + lines(101) + "}\n", []string{
			"a/a.go:3: func-size: func literal has a 101-line body, at most 100 unless it is table-driven data",
		}},
		{"table-driven data: one return of a literal", "a/a.go", "package a\n\nfunc F() []string {\n\treturn " + table(300) + "\n}\n", nil},
		{"table-driven data: mostly literal lines", "a/a.go", "package a\n\nfunc F(x int) []string {\n" + lines(10) + "\tt := " + table(100) + "\n" + lines(5) + "\treturn t\n}\n", nil},
		{"logic around a table", "a/a.go", "package a\n\nfunc F(x int) []string {\n" + lines(50) + "\tt := " + table(60) + "\n\treturn t\n}\n", []string{
			"a/a.go:3: func-size: func F has a 111-line body, at most 100 unless it is table-driven data",
		}},
		{"testdata is not built", "a/testdata/big.go", "package a\n" + strings.Repeat("\n", 900), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkGo(tt.file, []byte(tt.src)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
		})
	}
}

func TestCheckMarkdown(t *testing.T) {
	long := strings.Repeat("é", 301) // characters, not bytes
	ok := strings.Repeat("é", 300)
	tests := []struct {
		name, file, src string
		want            []string
	}{
		{"a line of 300 characters", "docs/a.md", "# A\n" + ok + "\n", nil},
		{"a line of 301 characters", "docs/a.md", "# A\n\n" + long + "\n", []string{
			"docs/a.md:3: markdown-line: 301 characters, at most 300 outside fenced code (tables too)",
		}},
		{"a table cell", "docs/a.md", "| a | b |\n|---|---|\n| x | " + long + " |\n", []string{
			"docs/a.md:3: markdown-line: 309 characters, at most 300 outside fenced code (tables too)",
		}},
		{"fenced code", "docs/a.md", "```json\n" + long + "\n```\n  ~~~\n" + long + "\n  ~~~\n" + long + "\n", []string{
			"docs/a.md:7: markdown-line: 301 characters, at most 300 outside fenced code (tables too)",
		}},
		{"a guide of 700 lines", "docs/a.md", strings.Repeat("x\n", 700), nil},
		{"a guide of 701 lines", "docs/a.md", strings.Repeat("x\n", 701), []string{
			"docs/a.md:701: markdown-size: 701 lines, at most 700",
		}},
		{"the control-plane README at 251 lines", "control-plane/README.md", strings.Repeat("x\n", 251), []string{
			"control-plane/README.md:251: markdown-size: 251 lines, at most 250",
		}},
		{"the filter README at 251 lines", "filter/README.md", strings.Repeat("x\n", 251), []string{
			"filter/README.md:251: markdown-size: 251 lines, at most 250",
		}},
		{"another README at 251 lines", "e2e/README.md", strings.Repeat("x\n", 251), nil},
		{"a measurement record of 900 lines", "docs/perf/a.md", strings.Repeat("x\n", 900) + long + "\n", []string{
			"docs/perf/a.md:901: markdown-line: 301 characters, at most 300 outside fenced code (tables too)",
		}},
		{"the bench report of 900 lines", "bench/REPORT.md", strings.Repeat("x\n", 900), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkMarkdown(tt.file, []byte(tt.src)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
		})
	}
}

// TestRun runs the whole check, go list and git included, on a throwaway
// module with one violation of each kind (a test file's import included).
func TestRun(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root := t.TempDir()
	tree := map[string]string{
		"go.mod":                            "module example.com/m\n\ngo 1.22\n",
		"filter/plugin/plugin.go":           "package plugin\n",
		"filter/engine/engine.go":           "package engine\n\nimport _ \"net/http\"\n",
		"control-plane/store/store.go":      "package store\n\nimport _ \"example.com/m/control-plane/admin\"\n",
		"control-plane/admin/admin.go":      "package admin\n\nimport (\n\t_ \"example.com/m/filter/engine\"\n\t_ \"example.com/m/filter/plugin\"\n)\n",
		"control-plane/newpkg/newpkg.go":    "package newpkg\n",
		"control-plane/store/store_test.go": "package store\n\nimport _ \"example.com/m/e2e/echo\"\n",
		"e2e/echo/echo.go":                  "package echo\n",
		"control-plane/store/big.go":        "package store\n" + strings.Repeat("\n", 800),
		"README.md":                         strings.Repeat("x", 301) + "\n",
	}
	for name, content := range tree {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}} {
		if out, err := exec.Command("git", append([]string{"-C", root}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	got, err := run(root, true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"README.md:1: markdown-line: 301 characters, at most 300 outside fenced code (tables too)",
		"control-plane/admin imports filter/plugin: control-plane-uses-filter-contract: control-plane/ may import of filter/ only filter/engine, filter/config and filter/wire",
		"control-plane/newpkg: layers: not placed; add it to a level of layers in tools/archlint/rules.go (above everything it imports, below everything that imports it)",
		"control-plane/store (tests) imports e2e/echo: nothing-imports-e2e: nothing outside e2e/ imports e2e/...",
		"control-plane/store imports control-plane/admin: layers: upward import (level 0 imports level 3); imports point down",
		"control-plane/store/big.go:801: go-file-size: 801 lines, at most 800 in a non-test, non-generated Go file",
		"filter/engine imports net/http: filter-stands-alone: filter/ links neither control-plane/, bench/, e2e/, internal/, gRPC nor net/http",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
