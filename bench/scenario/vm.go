package scenario

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

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
)

// vmVariant is a benchmark variant as the VM benchmark runs it.
type vmVariant struct {
	variant.Variant
	config string // plugin configuration file, "-" for none
}

// RunVM measures E and Allot's variants F–J in V8 without Envoy, and with
// o.Base the base revision's filter beside this tree's, and writes
// bench/raw/VM.md.
func RunVM(ctx context.Context, o variant.Options, p *variant.Paths, logf func(string, ...any)) error {
	start := time.Now()
	node, err := exec.LookPath("node")
	if err != nil {
		return errors.New("node (Node.js ≥ 20) is required for the VM benchmark: it runs the modules in V8")
	}
	version, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return fmt.Errorf("node --version: %w", err)
	}
	r := &report.VMResults{Started: start, Machine: DescribeMachine(o), Node: strings.TrimSpace(string(version)),
		Tree: describeTree(o.Root), Commands: []string{o.Command}}
	cmd := "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o bench/raw/bin/minwasm.wasm ./bench/minwasm"
	if err := goBuild(ctx, o.Root, p.MinWasm, "./bench/minwasm", true); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	r.Commands = append(r.Commands, cmd)
	modules := []string{p.AllotWasm}
	if o.Base != "" {
		rev, cmds, err := buildBase(ctx, o, p.Raw, o.Base, p.BaseWasm, "")
		if err != nil {
			return err
		}
		r.Base, r.BaseRev = o.Base, rev
		r.Commands = append(r.Commands, cmds...)
		modules = append(modules, p.BaseWasm)
	}
	for _, m := range modules {
		d, err := describeModule(m)
		if err != nil {
			return err
		}
		r.Modules = append(r.Modules, d)
	}
	vs, err := vmVariants(p.Raw, o.Only)
	if err != nil {
		return err
	}
	for _, v := range vs {
		r.Variants = append(r.Variants, variant.Info{ID: v.ID, Name: v.Name})
	}
	host := filepath.Join(o.Root, "bench", "vm", "host.mjs")
	for _, c := range [][2]int{{report.VMRequests, 0}, {report.VMEvictRequests, report.VMEvictKiB}} {
		r.Commands = append(r.Commands, fmt.Sprintf("taskset -c %d node bench/vm/host.mjs <module> <bench/raw/vm-*.json> <warm|cold> %d %d", o.EnvoyCPU, c[0], c[1]))
	}
	logf("VM benchmark: %d variants × %d modules, caches warm and evicted, %d rounds in Node %s", len(vs), len(modules), report.VMRounds, r.Node)
	for _, evict := range []int{0, report.VMEvictKiB} {
		if err := runVMRounds(ctx, o, r, node, host, p.MinWasm, modules, vs, evict); err != nil {
			return err
		}
	}
	r.Duration = time.Since(start)
	return writeOutputs(o, p.Raw, "vm.json", r, "VM.md", report.RenderVM(r), r.Duration, logf)
}

// runVMRounds runs every variant on every module for vmRounds rounds, the
// order reversed every other round.
func runVMRounds(ctx context.Context, o variant.Options, r *report.VMResults, node, host, minWasm string, modules []string, vs []vmVariant, evict int) error {
	for round := range report.VMRounds {
		order := slices.Clone(vs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range order {
			for mi, m := range modules {
				if v.Allot == 0 && mi > 0 {
					continue // E is the same module for both
				}
				wasm := m
				if v.Allot == 0 {
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
	configs := map[string][]byte{"vm-1.json": variant.FilterConfigJSON(1), "vm-50.json": variant.FilterConfigJSON(50), "vm-50-lean.json": variant.LeanConfigJSON(50)}
	for name, b := range configs {
		if err := os.WriteFile(filepath.Join(raw, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	var out []vmVariant
	for _, v := range variant.All() {
		if !strings.Contains("EFGHIJ", v.ID) || (only != "" && v.ID != "E" && !strings.Contains(only, v.ID)) {
			continue
		}
		v, err := variant.WithExpect(v)
		if err != nil {
			return nil, err
		}
		config := "-"
		switch {
		case v.Allot == 1:
			config = "vm-1.json"
		case v.Lean:
			config = "vm-50-lean.json"
		case v.Allot == 50:
			config = "vm-50.json"
		}
		if config != "-" {
			config = filepath.Join(raw, config)
		}
		out = append(out, vmVariant{Variant: v, config: config})
	}
	return out, nil
}

// runHost runs one slice under Node, pinned where Envoy would be, and checks
// the probe request's writes against the engine's assignment.
func runHost(ctx context.Context, o variant.Options, node, host, wasm string, v vmVariant, evict int) (report.VMRun, error) {
	mode, n := "warm", report.VMRequests
	if v.Cold {
		mode = "cold"
	}
	if evict > 0 {
		n = report.VMEvictRequests
	}
	cmd := exec.CommandContext(ctx, "taskset", "-c", strconv.Itoa(o.EnvoyCPU), node, "--no-warnings", host, wasm, v.config, mode, strconv.Itoa(n), strconv.Itoa(evict))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return report.VMRun{}, fmt.Errorf("node %s: %w\n%s", filepath.Base(host), err, stderr.String())
	}
	var res struct {
		NS    float64            `json:"ns"`
		Calls map[string]float64 `json:"calls"`
		Probe [][2]string        `json:"probe"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return report.VMRun{}, fmt.Errorf("host output %q: %w", out, err)
	}
	if err := checkProbe(v.Variant, res.Probe); err != nil {
		return report.VMRun{}, fmt.Errorf("%s: %w", filepath.Base(wasm), err)
	}
	return report.VMRun{Variant: v.ID, Evict: evict, NS: res.NS, Calls: res.Calls}, nil
}

// checkProbe compares the probe request's writes (x-user-id "user-0") with
// what the variant must add.
func checkProbe(v variant.Variant, written [][2]string) error {
	const id = "user-0"
	want, err := v.Expect(id)
	if err != nil {
		return err
	}
	name := variant.BenchHeader
	if v.Lean {
		name = variant.DictHeader
	}
	got, found := "", false
	for _, kv := range written {
		if kv[0] == name {
			got, found = kv[1], true
		}
	}
	if v.Lean {
		got = dictMember(got, "bench")
	}
	if !found || got != want {
		return fmt.Errorf("probe for x-user-id %q: %s %q (written: %v), want %q", id, name, got, found, want)
	}
	return nil
}
