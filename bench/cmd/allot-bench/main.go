// Command allot-bench is `make bench`: it benchmarks Allot, as a Wasm
// module and as a native dynamic module, against the alternatives (no
// filter, header_mutation, Lua, ext_authz, minimal Go and C filters) in real
// Envoy and writes bench/REPORT.md. See bench/README.md.
//
// It pins itself (the load generator) to one CPU and Envoy to another, by
// re-executing itself under taskset.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/allotmesh/allot/bench/suite"
	"github.com/allotmesh/allot/internal/command"
)

func main() { command.Main("allot-bench", run) }

// pinnedEnv marks the re-executed, pinned process.
const pinnedEnv = "ALLOT_BENCH_PINNED"

func run(ctx context.Context, args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	if os.Getenv(pinnedEnv) == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		taskset := "/usr/bin/taskset"
		if _, err := os.Stat(taskset); err != nil {
			return fmt.Errorf("taskset (util-linux) is required: %w", err)
		}
		argv := append([]string{"taskset", "-c", strconv.Itoa(o.LoadCPU), self}, args...)
		return syscall.Exec(taskset, argv, append(os.Environ(), pinnedEnv+"=1"))
	}
	if o.Root, err = filepath.Abs(o.Root); err != nil {
		return err
	}
	if !filepath.IsAbs(o.Envoy) {
		o.Envoy = filepath.Join(o.Root, o.Envoy)
	}
	o.Command = "allot-bench " + strings.Join(args, " ")
	return suite.Run(ctx, o)
}

// parse reads the command line into the suite's options and refuses what
// no run could honour.
func parse(args []string) (suite.Options, error) {
	fs := flag.NewFlagSet("allot-bench", flag.ContinueOnError)
	o := suite.Options{Log: os.Stderr, Go: "go"}
	fs.StringVar(&o.Root, "root", ".", "repository root")
	fs.StringVar(&o.Envoy, "envoy", envOr("ENVOY_BIN", ".venv/bin/envoy"), "Envoy 1.40 binary")
	fs.IntVar(&o.Rounds, "rounds", 2, "rounds of fresh Envoys (0: only the extra sections)")
	fs.IntVar(&o.PairedRounds, "paired-rounds", 0, "rounds of the interleaved CPU measurement, every Envoy up at once (0: 10, or 20 with -base; -vm keeps its own)")
	fs.DurationVar(&o.Throughput, "throughput", 5*time.Second, "max-throughput run per variant per round")
	fs.DurationVar(&o.Latency, "latency", 4*time.Second, "fixed-rate run per variant per round")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "warm-up per variant per round")
	fs.Float64Var(&o.Rate, "rate", 2000, "fixed rate (requests/s) every variant must sustain")
	fs.IntVar(&o.Conns, "conns", 8, "connections of the max-throughput run")
	fs.IntVar(&o.RateConns, "rate-conns", 32, "connections of the fixed-rate run")
	fs.IntVar(&o.EnvoyCPU, "envoy-cpu", 0, "CPU Envoy is pinned to")
	fs.IntVar(&o.LoadCPU, "load-cpu", 1, "CPU the load generator (and the ext_authz service) is pinned to")
	fs.StringVar(&o.Only, "only", "", "variant letters to run besides A (e.g. EFG; default all)")
	fs.BoolVar(&o.SkipExtras, "skip-extras", false, "skip micro-benchmarks, load time, memory and propagation")
	fs.StringVar(&o.Base, "base", "", "instead of the report, compare bin/allot.wasm with the filter built from this git revision, "+
		"side by side (-only picks the Allot variants, default GHIJ); writes bench/raw/COMPARE.md")
	fs.BoolVar(&o.Floors, "floors", false, "instead of the report, measure the floors K and L and K's native counterpart M "+
		"beside E and G–J in the interleaved section only (-only picks them, default EGHIJKLM); writes bench/raw/FLOORS.md")
	fs.BoolVar(&o.VM, "vm", false, "instead of the report, time the modules' own work per request in Node's V8 without Envoy "+
		"(with -base, beside that revision's filter; -only picks among F–J); writes bench/raw/VM.md")
	fs.BoolVar(&o.Replicas, "replicas", false, "instead of the report, measure only write → all-ACK latency with 3 allotd replicas on a 3-member etcd cluster "+
		"and simulated xDS clients spread over them (`make bench` runs it too); writes bench/raw/REPLICAS.md")
	fs.Func("replica-clients", "comma-separated fleet sizes of the replicas section (default 1000,10000,30000)", func(v string) error {
		o.ReplicaClients = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 3 {
				return fmt.Errorf("%q: want a number of clients, at least 3 (one per replica)", f)
			}
			o.ReplicaClients = append(o.ReplicaClients, n)
		}
		return nil
	})
	fs.BoolVar(&o.Render, "render", false, "measure nothing: render bench/REPORT.md again from bench/raw/results.json (after a change to the report's format)")
	fs.DurationVar(&o.ReplicaProfile, "replica-profile", 0, "with -replicas: take CPU profiles this long of every allotd replica, etcd member and the floor, and allocation profiles of the replicas, from each fleet's first write on, into bench/raw/replicas-<clients>/profiles/")
	fs.StringVar(&o.Allotd, "allotd", "", "with -replicas: run this allotd binary instead of one built from the tree (to compare builds)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.PairedRounds != 0 && o.PairedRounds < 3 {
		return o, fmt.Errorf("-paired-rounds %d: the report's medians need at least 3 rounds", o.PairedRounds)
	}
	return o, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
