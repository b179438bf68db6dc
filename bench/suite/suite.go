// Package suite is `make bench`: it renders one Envoy bootstrap per variant,
// runs Envoy pinned to one CPU against a load generator pinned to the other,
// checks each variant's header before timing it, measures interleaved rounds
// (A B C … A B C …), adds the engine micro-benchmarks, configuration and
// memory measurements, and writes bench/REPORT.md with the raw data under
// bench/raw/.
//
// Every process it starts is stopped before Run returns (and killed by the
// kernel if the suite dies first); all traffic stays on 127.0.0.1.
package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
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
	// Base, when set, makes the run a comparison instead (compare.go): the
	// filter built from this git revision against bin/allot.wasm.
	Base string
	// VM, when set, makes the run the VM benchmark instead (vm.go): the
	// modules in Node's V8 without Envoy, with Base beside this tree's.
	VM bool
	// Floors, when set, makes the run the floors diagnostic instead
	// (floor.go, `make bench-floors`): the Wasm floors K and L and K's
	// native counterpart M against the variants they explain.
	Floors bool
	// Replicas, when set, makes the run the replicas section alone
	// (replicas.go, `make bench-replicas`), written to bench/raw/REPLICAS.md.
	Replicas bool
	// ReplicaClients are the fleet sizes of the replicas section (nil:
	// every size of ReplicaFleets).
	ReplicaClients []int
	// Allotd, when set, is the allotd binary the replicas section runs
	// instead of building control-plane/cmd/allotd (to compare builds).
	Allotd  string
	Command string    // the command line, for the report
	Log     io.Writer `json:"-"`
}

// results is everything the report shows; it is also written to
// bench/raw/results.json.
type results struct {
	Started    time.Time       `json:"started"`
	Duration   time.Duration   `json:"duration"`
	Machine    machine         `json:"machine"`
	Options    Options         `json:"options"`
	Variants   []variantInfo   `json:"variants"`
	Runs       []run           `json:"runs"`
	Paired     *paired         `json:"paired,omitempty"`
	Profiles   []hostProfile   `json:"host_profiles"`
	Micro      *micro          `json:"micro,omitempty"`
	Memory     *memory         `json:"memory,omitempty"`
	LoadTime   *loadTime       `json:"load_time,omitempty"`
	Propagate  propagation     `json:"propagation"`
	Replicas   *replicasResult `json:"replicas,omitempty"`
	Commands   []string        `json:"commands"`
	LoadBefore string          `json:"loadavg_before"`
	LoadAfter  string          `json:"loadavg_after"`
}

type variantInfo struct {
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

// interleavedOnly says whether the variant was measured in the interleaved
// section only (see variant.interleavedOnly).
func (v variantInfo) interleavedOnly() bool {
	return v.FloorOf != "" || v.NativeOf != "" || v.Probe || v.Cost
}

// Run runs the whole suite and writes the report; -replicas, -vm, -base
// and -floors run their own section instead.
func Run(ctx context.Context, o Options) error {
	p := newPaths(o.Root)
	if err := os.MkdirAll(filepath.Join(p.raw, "bin"), 0o755); err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, "bench: "+format+"\n", args...) }
	if o.Replicas { // allotd is only told the filter's path
		return runReplicas(ctx, o, p, logf)
	}
	if _, err := os.Stat(p.allotWasm); err != nil {
		return fmt.Errorf("allot filter not built (%v): run `make build-filter`", err)
	}
	if o.VM {
		return runVM(ctx, o, p, logf)
	}
	if err := checkTools(o); err != nil {
		return err
	}
	switch {
	case o.Base != "":
		return runCompare(ctx, o, p, logf)
	case o.Floors:
		return runFloors(ctx, o, p, logf)
	}
	return runReport(ctx, o, p, logf)
}

// newPaths are the files of a run under the repository root: the filter's
// builds in bin/, the suite's own in bench/raw/bin/.
func newPaths(root string) *paths {
	raw := filepath.Join(root, "bench", "raw")
	return &paths{allotWasm: filepath.Join(root, "bin", "allot.wasm"), raw: raw,
		minWasm: filepath.Join(raw, "bin", "minwasm.wasm"), allotSO: filepath.Join(root, "bin", "liballot.so"),
		minDynmod: filepath.Join(raw, "bin", "libmindynmod.so"), cDynmod: filepath.Join(raw, "bin", "libcdynmod.so"),
		noRespWasm: filepath.Join(raw, "bin", "allot-noresponse.wasm"), upstream: filepath.Join(raw, "bin", "allot-upstream"),
		allotFaultSO: filepath.Join(raw, "bin", "allotfault", "liballot.so")}
}

// runReport is make bench: the rounds, the interleaved section, the
// extra sections, then bench/REPORT.md and bench/raw/results.json.
func runReport(ctx context.Context, o Options, p *paths, logf func(string, ...any)) error {
	res := &results{Started: time.Now(), Options: o, LoadBefore: loadavg(), Machine: describeMachine(o), Commands: []string{o.Command}}
	vs, az, err := prepare(ctx, o, p, res)
	if err != nil {
		return err
	}
	if err := measureRounds(ctx, o, p, vs, az, res, logf); err != nil {
		return err
	}
	if o.Rounds > 0 {
		if err := measureInterleaved(ctx, o, p, vs, az, res, logf); err != nil {
			return err
		}
	}
	if err := measureExtras(ctx, o, p, res, logf); err != nil {
		return err
	}
	res.LoadAfter = loadavg()
	res.Duration = time.Since(res.Started)
	return writeReport(o, p, res, logf)
}

// writeReport writes res to bench/raw/results.json and renders
// bench/REPORT.md from it.
func writeReport(o Options, p *paths, res *results, logf func(string, ...any)) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p.raw, "results.json"), b, 0o644); err != nil {
		return err
	}
	report, err := renderReport(res)
	if err != nil {
		return err
	}
	path := filepath.Join(o.Root, "bench", "REPORT.md")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	logf("wrote %s in %v", path, res.Duration.Round(time.Second))
	return nil
}

// measureExtras runs the sections besides the variants' (unless
// -skip-extras): the engine micro-benchmarks, the configuration load time,
// memory, propagation and replicas. ALLOT_BENCH_ONLY_PROPAGATION keeps
// propagation alone.
func measureExtras(ctx context.Context, o Options, p *paths, res *results, logf func(string, ...any)) error {
	if o.SkipExtras {
		res.Propagate = propagation{NotMeasured: "skipped (-skip-extras)"}
		return nil
	}
	onlyPropagation := os.Getenv("ALLOT_BENCH_ONLY_PROPAGATION") != ""
	if !onlyPropagation {
		logf("engine micro-benchmarks and ParseConfig")
		m, err := runMicro(ctx, o, p)
		if err != nil {
			return err
		}
		res.Micro = m
		res.Commands = append(res.Commands, m.Command)
		logf("configuration load time in Envoy")
		if res.LoadTime, err = measureLoadTime(ctx, o, p); err != nil {
			return err
		}
		logf("memory at --concurrency 2")
		if res.Memory, err = measureMemory(ctx, o, p); err != nil {
			return err
		}
		logf("the native module's C cache hits (its allotfault build)")
		cmd, err := countServedInC(ctx, o, p, res.Memory)
		if err != nil {
			return err
		}
		res.Commands = append(res.Commands, cmd)
	}
	res.Propagate = measurePropagation(ctx, o, p, logf)
	res.Commands = append(res.Commands,
		"bench/raw/bin/allotd -admin-addr 127.0.0.1:<port> -xds-addr 127.0.0.1:<port> -db bench/raw/propagation.db -tokens envoy-configs/dev-tokens.json -wasm-path bin/allot.wasm",
		fmt.Sprintf("taskset -c %d bench/raw/bin/allot-xdsload -addr 127.0.0.1:<xds port> -clients %d -conns 50 -cluster sim", o.LoadCPU, propSimulated),
		"curl -X POST -H 'Authorization: Bearer <admin token>' '127.0.0.1:<port>/v1/experiments?wait=30s' -d '{\"key\":\"prop-…\",…}'   # timed, 20 times")
	if !onlyPropagation {
		rep, cmds := measureReplicas(ctx, o, p, replicaFleets(o.ReplicaClients), logf)
		res.Replicas = &rep
		res.Commands = append(res.Commands, cmds...)
	}
	return nil
}
