package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allotmesh/allot/bench/stats"
)

// The VM benchmark (`make bench-vm`) runs the Wasm modules in Node's V8, the
// engine Envoy embeds, under a proxy-wasm host written in JavaScript
// (bench/vm/host.mjs) whose side of every call costs next to nothing: what
// it times is the module's own work per request, which in Envoy hides under
// Envoy's far larger and noisier charge for the callbacks and the writes.
const (
	vmRounds   = 5
	vmRequests = 100000
	// In the evicting mode the host writes vmEvictKiB of memory between
	// requests, as Envoy's own work does, so the module's data comes from
	// memory rather than the CPU's caches: 2 MiB empties this CPU's L2.
	// Each request then costs the host about 0.2 ms, hence fewer requests.
	vmEvictKiB      = 2048
	vmEvictRequests = 5000
)

// vmRun is one variant on one module in one round.
type vmRun struct {
	Variant string             `json:"variant"`
	Module  int                `json:"module"` // 0 this tree's, 1 the base's
	Round   int                `json:"round"`
	Evict   int                `json:"evict_kib,omitempty"` // the evicting mode
	NS      float64            `json:"ns_per_request"`
	Calls   map[string]float64 `json:"host_calls_per_request"`
}

// vmResults is the VM benchmark's raw data (bench/raw/vm.json).
type vmResults struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration"`
	Machine  machine       `json:"machine"`
	Node     string        `json:"node"`
	Tree     string        `json:"tree"`
	Base     string        `json:"base,omitempty"`
	BaseRev  string        `json:"base_commit,omitempty"`
	Modules  []module      `json:"modules"`
	Variants []variantInfo `json:"variants"`
	Runs     []vmRun       `json:"runs"`
	Commands []string      `json:"commands"`
}

// vmVariant is a benchmark variant as the VM benchmark runs it.
type vmVariant struct {
	variant
	config string // plugin configuration file, "-" for none
}

// runVM measures E and Allot's variants F–J in V8 without Envoy, and with
// o.Base the base revision's filter beside this tree's, and writes
// bench/raw/VM.md.
func runVM(ctx context.Context, o Options, p *paths, logf func(string, ...any)) error {
	start := time.Now()
	node, err := exec.LookPath("node")
	if err != nil {
		return errors.New("node (Node.js ≥ 20) is required for the VM benchmark: it runs the modules in V8")
	}
	version, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return fmt.Errorf("node --version: %w", err)
	}
	r := &vmResults{Started: start, Machine: describeMachine(o), Node: strings.TrimSpace(string(version)),
		Tree: describeTree(o.Root), Commands: []string{o.Command}}
	cmd := "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o bench/raw/bin/minwasm.wasm ./bench/minwasm"
	if err := goBuild(ctx, o.Root, p.minWasm, "./bench/minwasm", true); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	r.Commands = append(r.Commands, cmd)
	modules := []string{p.allotWasm}
	if o.Base != "" {
		p.baseWasm = filepath.Join(p.raw, "bin", "allot-base.wasm")
		rev, cmds, err := buildBase(ctx, o, p.raw, o.Base, p.baseWasm)
		if err != nil {
			return err
		}
		r.Base, r.BaseRev = o.Base, rev
		r.Commands = append(r.Commands, cmds...)
		modules = append(modules, p.baseWasm)
	}
	for _, m := range modules {
		d, err := describeModule(m)
		if err != nil {
			return err
		}
		r.Modules = append(r.Modules, d)
	}
	vs, err := vmVariants(p.raw, o.Only)
	if err != nil {
		return err
	}
	for _, v := range vs {
		r.Variants = append(r.Variants, variantInfo{ID: v.ID, Name: v.Name})
	}
	host := filepath.Join(o.Root, "bench", "vm", "host.mjs")
	for _, c := range [][2]int{{vmRequests, 0}, {vmEvictRequests, vmEvictKiB}} {
		r.Commands = append(r.Commands, fmt.Sprintf("taskset -c %d node bench/vm/host.mjs <module> <bench/raw/vm-*.json> <warm|cold> %d %d", o.EnvoyCPU, c[0], c[1]))
	}
	logf("VM benchmark: %d variants × %d modules, caches warm and evicted, %d rounds in Node %s", len(vs), len(modules), vmRounds, r.Node)
	for _, evict := range []int{0, vmEvictKiB} {
		if err := runVMRounds(ctx, o, r, node, host, p.minWasm, modules, vs, evict); err != nil {
			return err
		}
	}
	r.Duration = time.Since(start)
	return writeOutputs(o, p.raw, "vm.json", r, "VM.md", renderVM(r), r.Duration, logf)
}

// runVMRounds runs every variant on every module for vmRounds rounds, the
// order reversed every other round.
func runVMRounds(ctx context.Context, o Options, r *vmResults, node, host, minWasm string, modules []string, vs []vmVariant, evict int) error {
	for round := range vmRounds {
		order := slices.Clone(vs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			for mi, m := range modules {
				if v.allot == 0 && mi > 0 {
					continue // E is the same module for both
				}
				wasm := m
				if v.allot == 0 {
					wasm = minWasm
				}
				run, err := runHost(ctx, o, node, host, wasm, v, evict)
				if err != nil {
					return fmt.Errorf("variant %s, round %d: %w", v.ID, round+1, err)
				}
				run.Module, run.Round = mi, round+1
				r.Runs = append(r.Runs, run)
			}
		}
	}
	return nil
}

// vmVariants returns E and the Allot variants F–J (only those in only, when
// set) with their expectations, and writes their configurations under raw.
func vmVariants(raw, only string) ([]vmVariant, error) {
	configs := map[string][]byte{"vm-1.json": filterConfigJSON(1), "vm-50.json": filterConfigJSON(50), "vm-50-lean.json": leanConfigJSON(50)}
	for name, b := range configs {
		if err := os.WriteFile(filepath.Join(raw, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	var out []vmVariant
	for _, v := range variants() {
		if !strings.Contains("EFGHIJ", v.ID) || (only != "" && v.ID != "E" && !strings.Contains(only, v.ID)) {
			continue
		}
		v, err := withExpect(v)
		if err != nil {
			return nil, err
		}
		config := "-"
		switch {
		case v.allot == 1:
			config = "vm-1.json"
		case v.lean:
			config = "vm-50-lean.json"
		case v.allot == 50:
			config = "vm-50.json"
		}
		if config != "-" {
			config = filepath.Join(raw, config)
		}
		out = append(out, vmVariant{variant: v, config: config})
	}
	return out, nil
}

// runHost runs one slice under Node, pinned where Envoy would be, and checks
// the probe request's writes against the engine's assignment.
func runHost(ctx context.Context, o Options, node, host, wasm string, v vmVariant, evict int) (vmRun, error) {
	mode, n := "warm", vmRequests
	if v.cold {
		mode = "cold"
	}
	if evict > 0 {
		n = vmEvictRequests
	}
	cmd := exec.CommandContext(ctx, "taskset", "-c", strconv.Itoa(o.EnvoyCPU), node, "--no-warnings", host, wasm, v.config, mode, strconv.Itoa(n), strconv.Itoa(evict))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return vmRun{}, fmt.Errorf("node %s: %w\n%s", filepath.Base(host), err, stderr.String())
	}
	var res struct {
		NS    float64            `json:"ns"`
		Calls map[string]float64 `json:"calls"`
		Probe [][2]string        `json:"probe"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return vmRun{}, fmt.Errorf("host output %q: %w", out, err)
	}
	if err := checkProbe(v.variant, res.Probe); err != nil {
		return vmRun{}, fmt.Errorf("%s: %w", filepath.Base(wasm), err)
	}
	return vmRun{Variant: v.ID, Evict: evict, NS: res.NS, Calls: res.Calls}, nil
}

// checkProbe compares the probe request's writes (x-user-id "user-0") with
// what the variant must add.
func checkProbe(v variant, written [][2]string) error {
	const id = "user-0"
	want, err := v.expect(id)
	if err != nil {
		return err
	}
	name := benchHeader
	if v.lean {
		name = dictHeader
	}
	got, found := "", false
	for _, kv := range written {
		if kv[0] == name {
			got, found = kv[1], true
		}
	}
	if v.lean {
		got = dictMember(got, "bench")
	}
	if !found || got != want {
		return fmt.Errorf("probe for x-user-id %q: %s %q (written: %v), want %q", id, name, got, found, want)
	}
	return nil
}

// renderVM writes the VM benchmark's report.
func renderVM(r *vmResults) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	title := "Allot's work inside V8, without Envoy"
	if r.Base != "" {
		title += ": this tree against " + r.Base
	}
	p("# %s\n\nGenerated by `make bench-vm` (bench/cmd/allot-bench -vm) on %s in %v. Raw data: `bench/raw/vm.json`.\n\n",
		title, r.Started.UTC().Format(time.RFC3339), r.Duration.Round(time.Second))
	p("Machine: %d CPUs, %s, kernel %s, Node %s, %s.\n\n", r.Machine.NProc, r.Machine.CPU, r.Machine.Kernel, r.Node, r.Machine.Go)
	for i, m := range r.Modules {
		which := "this tree (" + r.Tree + ")"
		if i == 1 {
			which = "base " + r.Base + " (" + r.BaseRev + ")"
		}
		p("- module of %s: %d bytes, sha256 %s\n", which, m.Bytes, m.SHA256)
	}
	p("\nEach module runs in Node's V8 under a proxy-wasm host in JavaScript (bench/vm/host.mjs) whose side of every call "+
		"costs next to nothing, pinned to one CPU: the figures are the module's own work per request (the callbacks "+
		"`proxy_on_context_create`, `proxy_on_request_headers` and `proxy_on_delete`, a tick every 20,000 requests), which "+
		"in Envoy adds to Envoy's charge for the same callbacks and writes. %d rounds, every other in reverse order; a probe "+
		"request's header is checked against the engine first. Medians over the rounds; a difference is the median of "+
		"per-round differences, with a 95%% bootstrap interval.\n",
		vmRounds)
	for _, evict := range []int{0, vmEvictKiB} {
		if evict == 0 {
			p("\n## Caches warm\n\nEach slice is %d requests after 20,000 to warm up, timed as a whole: the module's data "+
				"stays in the CPU's caches between requests, as it does not in Envoy.\n\n", vmRequests)
		} else {
			p("\n## Caches evicted\n\nBefore each request the host writes to every cache line of %d KiB, as Envoy's own work on "+
				"a request does, and only the callbacks are timed: the module's data comes from memory. Each slice is %d "+
				"requests after 2,000 to warm up.\n\n", evict, vmEvictRequests)
		}
		renderVMTable(p, r, evict)
	}
	p("\n## Commands\n\n```sh\n%s\n```\n", strings.Join(r.Commands, "\n"))
	return b.String()
}

// renderVMTable writes the table of one mode (evict KiB between requests).
func renderVMTable(p func(string, ...any), r *vmResults, evict int) {
	ns := func(id string, mod int) []float64 {
		var out []float64
		for _, run := range r.Runs {
			if run.Variant == id && run.Evict == evict && (run.Module == mod || id == "E") {
				out = append(out, run.NS)
			}
		}
		return out
	}
	diff := func(x, y []float64) []float64 {
		d, _ := stats.RoundDiffs(x, y) // every variant runs in every round
		return d
	}
	us := func(v float64) string { return strconv.FormatFloat(v/1000, 'f', 2, 64) }
	if r.Base == "" {
		p("| variant | µs per request | − E (µs) | host calls per request |\n|---|---:|---:|---|\n")
	} else {
		p("| variant | this tree, µs per request | − E | base, µs per request | this tree − base (µs) | 95%% interval | result |\n|---|---:|---:|---:|---:|---:|---|\n")
	}
	e := ns("E", 0)
	for _, v := range r.Variants {
		this := ns(v.ID, 0)
		row := fmt.Sprintf("| %s: %s | %s | ", v.ID, v.Name, us(stats.Median(this)))
		if v.ID == "E" {
			row += "– |"
		} else {
			row += us(stats.Median(diff(this, e))) + " |"
		}
		if r.Base == "" {
			row += " " + callsText(r.Runs, v.ID, evict) + " |"
		} else if v.ID == "E" {
			row += " | | | |"
		} else {
			base := ns(v.ID, 1)
			d := diff(this, base)
			lo, hi := stats.BootstrapMedian(d)
			verdict := stats.Unresolved
			if dir := stats.Direction(lo, hi); dir != "" {
				verdict = "**" + dir + "**"
			}
			row += fmt.Sprintf(" %s | %s | %s … %s | %s |", us(stats.Median(base)), us(stats.Median(d)), us(lo), us(hi), verdict)
		}
		p("%s\n", row)
	}
}

// callsText lists a variant's host calls per request (this tree's module).
func callsText(runs []vmRun, id string, evict int) string {
	for _, run := range runs {
		if run.Variant == id && run.Module == 0 && run.Evict == evict {
			names := make([]string, 0, len(run.Calls))
			for name := range run.Calls {
				names = append(names, name)
			}
			slices.Sort(names)
			parts := make([]string, len(names))
			for i, name := range names {
				parts[i] = fmt.Sprintf("%s %.2f", name, run.Calls[name])
			}
			return strings.Join(parts, ", ")
		}
	}
	return ""
}
