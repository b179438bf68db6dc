package main

// The rules archlint enforces, as data. Edit these tables when a package
// moves or a new one appears; the checks themselves (imports.go, sizes.go)
// need no change.
//
// Package patterns are module-relative ("control-plane/admin") and match
// that package only, or end in "/..." and match the package and every
// package below it ("filter/..." matches filter and filter/engine). Paths
// of the standard library and other modules are written in full
// ("net/http/...", "google.golang.org/grpc/...") in the External fields.

// importRules are the import rules: each refuses, for every package matching
// From (minus FromExcept), an import of a package of this module matching
// To (minus ToExcept), or of a standard or other module's package matching
// External. A Direct rule looks at the package's own imports; otherwise every
// package it links is looked at, and a violation names the checked package,
// the refused one and the chain between them (a checked package on the way
// reports its own imports instead).
//
// The rules look at the imports of non-test files (with the e2e and
// reliability build tags, on the host and for GOOS=wasip1 GOARCH=wasm),
// and a rule with Tests at its test files' too: otherwise a test may import
// what it checks its package against. The nested modules
// deploy/ and deploy/istio are separate modules, out of scope here.
var importRules = []importRule{
	{
		// The control plane shares with the filter its engine (so that what
		// the admin API accepts is what a proxy runs), its config decoder
		// and the wire contract, and nothing else: the proxy-wasm adapter,
		// the ABI, the cookie codec and the dynamic-module glue are the
		// filter's own, free to change without the control plane noticing.
		// filter/internal/... is reached through engine and config, never
		// imported directly (Go's internal rule refuses that already).
		Name:     "control-plane-uses-filter-contract",
		From:     []string{"control-plane/..."},
		To:       []string{"filter/..."},
		ToExcept: []string{"filter/engine", "filter/config", "filter/wire/..."},
		Direct:   true,
		Why:      "control-plane/ may import of filter/ only filter/engine, filter/config and filter/wire",
	},
	{
		// The filter is linked into Envoy, as a Wasm module and as a native
		// dynamic module: the control plane, the tooling, gRPC and net/http
		// would bloat both (each MB of Wasm module costs Envoy ~16 MiB of
		// RSS) and tie the data plane to the control plane's releases.
		Name:     "filter-stands-alone",
		From:     []string{"filter/..."},
		To:       []string{"control-plane/...", "bench/...", "e2e/...", "internal/..."},
		External: []string{"google.golang.org/grpc/...", "net/http/..."},
		Why:      "filter/ links neither control-plane/, bench/, e2e/, internal/, gRPC nor net/http",
	},
	{
		// The wire contract (header names, stat names, their accounting) is
		// what the filter and the control plane share: it imports nothing of
		// either, so that either side can depend on it without the other.
		Name:     "wire-contract-stands-alone",
		From:     []string{"filter/wire/..."},
		To:       []string{"filter/...", "control-plane/..."},
		ToExcept: []string{"filter/wire/..."},
		Direct:   true,
		Why:      "filter/wire imports nothing of filter/ or control-plane/",
	},
	{
		// The Wasm module (package filter, built for wasip1) pays for every
		// package it links: fmt, os and their kin cost hundreds of KB of
		// module, and each MB costs Envoy ~16 MiB of RSS.
		Name:     "wasm-module-stays-light",
		From:     []string{"filter"},
		External: []string{"regexp/...", "fmt", "os", "encoding/json", "time", "runtime/debug", "net/..."},
		Why:      "the Wasm module links none of regexp, fmt, os, encoding/json, time, runtime/debug, net (each MB costs Envoy ~16 MiB of RSS)",
	},
	{
		// The experiment model is what the admin API, allotctl and the
		// controllers agree on: pure, so that allotctl links no server side
		// through it.
		Name:     "experiment-is-pure",
		From:     []string{"control-plane/experiment"},
		To:       []string{"..."},
		ToExcept: []string{"control-plane/experiment", "control-plane/guard", "control-plane/store", "proto/...", "filter/engine", "filter/internal/..."},
		Why:      "control-plane/experiment links only the standard library, guard, store's types, the proto packages and the filter's engine",
	},
	{
		// The rollout plans and the mesh registry's interface are imported
		// by xds, the registry's etcd adapter, admin and allotctl: they link
		// nothing of the control plane, no Prometheus, Envoy API or etcd.
		Name:     "rollout-stands-alone",
		From:     []string{"control-plane/rollout"},
		To:       []string{"..."},
		ToExcept: []string{"control-plane/rollout", "proto/..."},
		External: []string{"github.com/prometheus/...", "github.com/envoyproxy/...", "go.etcd.io/..."},
		Why:      "control-plane/rollout links only the standard library and the proto packages",
	},
	{
		// allotctl is a client of the HTTP/JSON admin API: it links neither
		// the server side, the stores and their clients, Prometheus, gRPC
		// (client and server share the grpc package; the admin API's gRPC
		// service lives apart from the messages allotctl uses) nor
		// go-control-plane's server (its Envoy API messages are only
		// messages).
		Name: "allotctl-is-a-client",
		From: []string{"control-plane/cmd/allotctl"},
		To: []string{"control-plane/admin", "control-plane/server", "control-plane/store/bolt/...", "control-plane/store/etcd/...",
			"control-plane/rollout/etcd", "control-plane/outcomes/...", "control-plane/internal/...", "control-plane/xds/...",
			"control-plane/reconcile", "control-plane/guardian", "control-plane/mtls/...", "control-plane/console", "control-plane/migrate",
			"proto/allot/admin/v1/adminv1grpc"},
		External: []string{"github.com/prometheus/...", "go.etcd.io/...", "google.golang.org/grpc/...", "github.com/envoyproxy/go-control-plane/pkg/..."},
		Why:      "allotctl links neither the admin server, the stores, xDS, gRPC nor Prometheus",
	},
	{
		// e2e/ is the end-to-end suite: its helpers start real Envoys and
		// change with it. Shared helpers live in internal/ (internal/echo,
		// internal/harness).
		Name:       "nothing-imports-e2e",
		From:       []string{"..."},
		FromExcept: []string{"e2e/..."},
		To:         []string{"e2e/..."},
		Direct:     true,
		Tests:      true,
		Why:        "nothing outside e2e/ imports e2e/...",
	},
}

// layered are the packages that must each have a place in layers: a new
// package under them is refused until it is placed, so that its level is
// chosen, not inherited.
var layered = []string{"control-plane/...", "proto/..."}

// layers are the control plane's levels, lowest first. A package may import
// packages of its own level or below, never above: dependencies point down,
// from the mains to the pure packages. A package takes the level of the
// longest pattern that matches it. The levels were derived from the import
// graph (go list -f '{{.ImportPath}} {{.Imports}}' ./control-plane/...): a
// package sits one above the highest package it imports.
var layers = [][]string{
	// 0: the generated API, and packages importing nothing of the control
	// plane: the guard statistics, the store's interface and types, mTLS,
	// the console's assets, the rollout plans and the mesh registry's
	// interface; the etcd connection the etcd adapters share.
	{"proto/...", "control-plane/guard", "control-plane/store", "control-plane/mtls/...", "control-plane/console", "control-plane/rollout", "control-plane/internal/..."},
	// 1: the experiment model; the adapters: the store's, the mesh
	// registry's, the outcome records'; migration.
	{"control-plane/experiment", "control-plane/store/bolt", "control-plane/store/etcd", "control-plane/rollout/etcd", "control-plane/outcomes/etcd", "control-plane/migrate"},
	// 2: what is built from experiments: Envoy resources, xDS snapshots;
	// the store test suites.
	{"control-plane/translate", "control-plane/xds", "control-plane/store/storetest", "control-plane/store/bolt/bolttest", "control-plane/store/etcd/etcdtest"},
	// 3: the admin API, the outcome readers, the CLI, the xDS load generator.
	{"control-plane/admin", "control-plane/outcomes", "control-plane/cli", "control-plane/xds/loadgen"},
	// 4: the loops over the admin API: reconcile, guardian.
	{"control-plane/reconcile", "control-plane/guardian"},
	// 5: the server that wires them.
	{"control-plane/server"},
	// 6: the mains.
	{"control-plane/cmd/..."},
}

// Size limits.
const (
	maxGoLines   = 800 // a non-test, non-generated Go file
	maxFuncLines = 100 // a function body (between its braces), unless it is data
	// dataShare is the share of a function body's lines that composite
	// literals must cover for the function to count as table-driven data,
	// exempt from maxFuncLines: 4/5.
	dataShareNum, dataShareDen = 4, 5

	maxMarkdownLineRunes = 300 // outside fenced code blocks; tables count
	maxGuideLines        = 700 // a Markdown file, unless markdownLines says otherwise
)

// markdownLines are the Markdown files with a line limit of their own:
// the package READMEs are short maps for developers (the internals are in
// the package docs, the guides in docs/).
var markdownLines = map[string]int{
	"control-plane/README.md": 250,
	"filter/README.md":        250,
}

// markdownRecords are the Markdown files exempt from maxGuideLines (not
// from the line width): generated measurement records, which grow with
// every run, not guides anyone reads end to end. A pattern ending in "/"
// matches every file below it.
var markdownRecords = []string{
	"docs/perf/",      // the performance records
	"bench/REPORT.md", // written by make bench
}
