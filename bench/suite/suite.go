// Package suite is `make bench`: Run either runs one section alone (the
// replicas, the VM benchmark, a comparison of two builds, the floors; each
// in package scenario) or the whole benchmark — the rounds of every
// variant, each checked by its header before it is timed, the interleaved
// rounds (A B C … A B C …), the engine micro-benchmarks, configuration,
// memory, propagation and replicas measurements — and writes bench/REPORT.md
// (package report) with the raw data under bench/raw/. It is the top of
// the benchmark's packages: suite → scenario → report → variant.
//
// Every process it starts is stopped before Run returns (and killed by the
// kernel if the suite dies first); all traffic stays on 127.0.0.1.
package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/scenario"
	"github.com/allotmesh/allot/bench/variant"
)

// Options configures a run (variant.Options, the lowest package that
// every part of the benchmark reads it from).
type Options = variant.Options

// Run runs the whole suite and writes the report; -replicas, -vm, -base
// and -floors run their own section instead.
func Run(ctx context.Context, o variant.Options) error {
	p := variant.NewPaths(o.Root)
	if err := os.MkdirAll(filepath.Join(p.Raw, "bin"), 0o755); err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, "bench: "+format+"\n", args...) }
	if o.Render {
		return rerender(o, p, logf)
	}
	if o.Replicas { // allotd is only told the filter's path
		return scenario.RunReplicas(ctx, o, p, logf)
	}
	if _, err := os.Stat(p.AllotWasm); err != nil {
		return fmt.Errorf("allot filter not built (%v): run `make build-filter`", err)
	}
	if o.VM {
		return scenario.RunVM(ctx, o, p, logf)
	}
	if err := scenario.CheckTools(o); err != nil {
		return err
	}
	switch {
	case o.Base != "":
		return scenario.RunCompare(ctx, o, p, logf)
	case o.Floors:
		return scenario.RunFloors(ctx, o, p, logf)
	}
	return runReport(ctx, o, p, logf)
}

// runReport is make bench: the rounds, the interleaved section, the
// extra sections, then bench/REPORT.md and bench/raw/results.json.
func runReport(ctx context.Context, o variant.Options, p *variant.Paths, logf func(string, ...any)) error {
	res := &report.Results{Started: time.Now(), Options: o, LoadBefore: scenario.Loadavg(), Machine: scenario.DescribeMachine(o), Commands: []string{o.Command}}
	vs, az, err := scenario.Prepare(ctx, o, p, res)
	if err != nil {
		return err
	}
	if err := scenario.MeasureRounds(ctx, o, p, vs, az, res, logf); err != nil {
		return err
	}
	if o.Rounds > 0 {
		if err := scenario.MeasureInterleaved(ctx, o, p, vs, az, res, logf); err != nil {
			return err
		}
	}
	if err := measureExtras(ctx, o, p, res, logf); err != nil {
		return err
	}
	res.LoadAfter = scenario.Loadavg()
	res.Duration = time.Since(res.Started)
	return writeReport(o, p, res, logf)
}

// rerender renders bench/REPORT.md from bench/raw/results.json as it is.
func rerender(o variant.Options, p *variant.Paths, logf func(string, ...any)) error {
	b, err := os.ReadFile(filepath.Join(p.Raw, "results.json"))
	if err != nil {
		return err
	}
	var res report.Results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(p.Raw, "results.json"), err)
	}
	md, err := report.RenderReport(&res)
	if err != nil {
		return err
	}
	path := filepath.Join(o.Root, "bench", "REPORT.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		return err
	}
	logf("rendered %s from %s", path, filepath.Join(p.Raw, "results.json"))
	return nil
}

// writeReport writes res to bench/raw/results.json and renders
// bench/REPORT.md from it.
func writeReport(o variant.Options, p *variant.Paths, res *report.Results, logf func(string, ...any)) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p.Raw, "results.json"), b, 0o644); err != nil {
		return err
	}
	report, err := report.RenderReport(res)
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
func measureExtras(ctx context.Context, o variant.Options, p *variant.Paths, res *report.Results, logf func(string, ...any)) error {
	if o.SkipExtras {
		res.Propagate = report.Propagation{NotMeasured: "skipped (-skip-extras)"}
		return nil
	}
	onlyPropagation := os.Getenv("ALLOT_BENCH_ONLY_PROPAGATION") != ""
	if !onlyPropagation {
		logf("engine micro-benchmarks and ParseConfig")
		m, err := scenario.RunMicro(ctx, o, p)
		if err != nil {
			return err
		}
		res.Micro = m
		res.Commands = append(res.Commands, m.Command)
		logf("configuration load time in Envoy")
		if res.LoadTime, err = scenario.MeasureLoadTime(ctx, o, p); err != nil {
			return err
		}
		logf("memory at --concurrency 2")
		if res.Memory, err = scenario.MeasureMemory(ctx, o, p); err != nil {
			return err
		}
		logf("the native module's C cache hits (its allotfault build)")
		cmd, err := scenario.CountServedInC(ctx, o, p, res.Memory)
		if err != nil {
			return err
		}
		res.Commands = append(res.Commands, cmd)
	}
	res.Propagate = scenario.MeasurePropagation(ctx, o, p, logf)
	res.Commands = append(res.Commands,
		"bench/raw/bin/allotd -admin-addr 127.0.0.1:<port> -xds-addr 127.0.0.1:<port> -db bench/raw/propagation.db -tokens envoy-configs/dev-tokens.json -wasm-path bin/allot.wasm",
		fmt.Sprintf("taskset -c %d bench/raw/bin/allot-xdsload -addr 127.0.0.1:<xds port> -clients %d -conns 50 -cluster sim", o.LoadCPU, scenario.PropSimulated),
		"curl -X POST -H 'Authorization: Bearer <admin token>' '127.0.0.1:<port>/v1/experiments?wait=30s' -d '{\"key\":\"prop-…\",…}'   # timed, 20 times")
	if !onlyPropagation {
		rep, cmds := scenario.MeasureReplicas(ctx, o, p, scenario.ReplicaFleets(o.ReplicaClients), logf)
		res.Replicas = &rep
		res.Commands = append(res.Commands, cmds...)
	}
	return nil
}
