package variant

import (
	"io"
	"path/filepath"
	"time"
)

// Options configures a run. Durations are per variant per round.
type Options struct {
	Root       string // repository root
	Envoy      string // Envoy binary
	Go         string // go command
	Rounds     int
	Throughput time.Duration // closed-loop max-throughput run
	Latency    time.Duration // fixed-rate run
	Warmup     time.Duration
	Rate       float64 // fixed rate, requests/s
	Conns      int     // connections of the max-throughput run
	RateConns  int     // connections of the fixed-rate run
	EnvoyCPU   int
	LoadCPU    int
	Only       string // variant letters to run (empty: all)
	SkipExtras bool   // skip micro-benchmarks, memory and load-time sections
	// PairedRounds is the rounds of the interleaved CPU measurement: the
	// targets' figures, or a comparison's (0: pairedRounds, compareRounds).
	PairedRounds int
	// Base, when set, makes the run a comparison instead (scenario.RunCompare): the
	// filter built from this git revision against bin/allot.wasm.
	Base string
	// VM, when set, makes the run the VM benchmark instead (scenario.RunVM): the
	// modules in Node's V8 without Envoy, with Base beside this tree's.
	VM bool
	// Floors, when set, makes the run the floors diagnostic instead
	// (scenario.RunFloors, `make bench-floors`): the Wasm floors K and L and K's
	// native counterpart M against the variants they explain.
	Floors bool
	// Replicas, when set, makes the run the replicas section alone
	// (scenario.RunReplicas, `make bench-replicas`), written to bench/raw/REPLICAS.md.
	Replicas bool
	// Render, when set, measures nothing: it renders bench/REPORT.md again
	// from bench/raw/results.json (after a change to the report's format).
	Render bool
	// ReplicaClients are the fleet sizes of the replicas section (nil:
	// every size of ReplicaFleets).
	ReplicaClients []int
	// Allotd, when set, is the allotd binary the replicas section runs
	// instead of building control-plane/cmd/allotd (to compare builds).
	Allotd string
	// ReplicaProfile, when positive, is how long the replicas section
	// profiles each fleet's servers (-replica-profile).
	ReplicaProfile time.Duration
	Command        string    // the command line, for the report
	Log            io.Writer `json:"-"`
}

// Info is what the report keeps of a variant (Variant.Info).
type Info struct {
	ID, Name string
	// FloorOf lists the variants whose writes this floor variant replays.
	FloorOf string `json:",omitempty"`
	// FloorRef is the minimal filter the floor builds on (empty: E).
	FloorRef string `json:",omitempty"`
	// NativeOf names the floor variant whose writes this one makes with
	// Envoy's native filters.
	NativeOf string `json:",omitempty"`
	// Probe marks a floor of the native host.
	Probe bool `json:",omitempty"`
	// WasmTwin names the Wasm variant a dynamic-module variant does the
	// work of.
	WasmTwin string `json:",omitempty"`
	// Cost marks a variant of the cost tables (stickiness, observe).
	Cost bool `json:",omitempty"`
}

// InterleavedOnly says whether the variant was measured in the interleaved
// section only (see variant.interleavedOnly).
func (v Info) InterleavedOnly() bool {
	return v.FloorOf != "" || v.NativeOf != "" || v.Probe || v.Cost
}

// NewPaths are the files of a run under the repository root: the filter's
// builds in bin/, the suite's own in bench/raw/bin/.
func NewPaths(root string) *Paths {
	raw := filepath.Join(root, "bench", "raw")
	return &Paths{AllotWasm: filepath.Join(root, "bin", "allot.wasm"), Raw: raw,
		MinWasm: filepath.Join(raw, "bin", "minwasm.wasm"), AllotSO: filepath.Join(root, "bin", "liballot.so"),
		MinDynmod: filepath.Join(raw, "bin", "libmindynmod.so"), CDynmod: filepath.Join(raw, "bin", "libcdynmod.so"),
		NoRespWasm: filepath.Join(raw, "bin", "allot-noresponse.wasm"), Upstream: filepath.Join(raw, "bin", "allot-upstream"),
		AllotFaultSO: filepath.Join(raw, "bin", "allotfault", "liballot.so"),
		BaseWasm:     filepath.Join(raw, "bin", "allot-base.wasm"), BaseSO: filepath.Join(raw, "bin", "base", "liballot.so")}
}

// Module describes a build of the filter: its size and digest.
type Module struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}
