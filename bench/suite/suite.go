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
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allotmesh/allot/bench/load"
	"github.com/allotmesh/allot/internal/harness"
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

// run is one variant in one round.
type run struct {
	Variant   string  `json:"variant"`
	Round     int     `json:"round"`
	MaxRPS    float64 `json:"max_rps"`
	MaxErrors uint64  `json:"max_errors"`
	CPUPerReq float64 `json:"cpu_us_per_req"` // Envoy, max-throughput run
	AuthzCPU  float64 `json:"authz_cpu_us_per_req,omitempty"`
	// Fixed-rate run.
	Rate         float64            `json:"rate"`
	RateAchieved float64            `json:"rate_achieved"`
	RateErrors   uint64             `json:"rate_errors"`
	RateCPU      float64            `json:"rate_cpu_us_per_req"`
	Quantiles    map[string]float64 `json:"latency_us"`
	PacerLag     float64            `json:"pacer_lag_us"`
	RSS          int64              `json:"rss_bytes"`
	CacheHits    int64              `json:"cache_hits,omitempty"`
	CacheMisses  int64              `json:"cache_misses,omitempty"`
}

var quantiles = []struct {
	name string
	q    float64
}{{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}, {"p99.9", 0.999}}

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
	// Cost marks a variant of the stickiness rows.
	Cost bool `json:",omitempty"`
}

// interleavedOnly says whether the variant was measured in the interleaved
// section only (see variant.interleavedOnly).
func (v variantInfo) interleavedOnly() bool {
	return v.FloorOf != "" || v.NativeOf != "" || v.Probe || v.Cost
}

// Run runs the whole suite and writes the report.
func Run(ctx context.Context, o Options) error {
	start := time.Now()
	raw := filepath.Join(o.Root, "bench", "raw")
	if err := os.MkdirAll(filepath.Join(raw, "bin"), 0o755); err != nil {
		return err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(o.Log, "bench: "+format+"\n", args...) }

	p := &paths{allotWasm: filepath.Join(o.Root, "bin", "allot.wasm"), raw: raw,
		minWasm: filepath.Join(raw, "bin", "minwasm.wasm"), allotSO: filepath.Join(o.Root, "bin", "liballot.so"),
		minDynmod: filepath.Join(raw, "bin", "libmindynmod.so"), cDynmod: filepath.Join(raw, "bin", "libcdynmod.so"),
		noRespWasm: filepath.Join(raw, "bin", "allot-noresponse.wasm")}
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
	if o.Base != "" {
		return runCompare(ctx, o, p, logf)
	}
	if o.Floors {
		return runFloors(ctx, o, p, logf)
	}
	authzBin := filepath.Join(raw, "bin", "allot-authz")
	res := &results{Started: start, Options: o, LoadBefore: loadavg()}
	res.Machine = describeMachine(o)
	res.Commands = append(res.Commands, o.Command)
	for _, b := range []struct {
		wasm     bool
		out, pkg string
		cmd      string
	}{
		{true, p.minWasm, "./bench/minwasm", "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o bench/raw/bin/minwasm.wasm ./bench/minwasm"},
		{false, authzBin, "./bench/cmd/allot-authz", "go build -trimpath -o bench/raw/bin/allot-authz ./bench/cmd/allot-authz"},
	} {
		if err := goBuild(ctx, o.Root, b.out, b.pkg, b.wasm); err != nil {
			return fmt.Errorf("%s: %w", b.cmd, err)
		}
		res.Commands = append(res.Commands, b.cmd)
	}

	// Allot's per-request host calls, counted natively.
	for _, c := range []struct {
		n    int
		lean bool
	}{{1, false}, {50, false}, {50, true}} {
		hp, err := profileAllot(c.n, c.lean)
		if err != nil {
			return err
		}
		res.Profiles = append(res.Profiles, hp)
	}

	vs, err := selectVariants(o.Only, false)
	if err != nil {
		return err
	}
	for _, v := range vs {
		res.Variants = append(res.Variants, v.info())
	}
	cmds, err := buildFor(ctx, o, p, vs)
	if err != nil {
		return err
	}
	res.Commands = append(res.Commands, cmds...)
	res.Commands = append(res.Commands,
		fmt.Sprintf("[%s=<module's directory>] taskset -c %d %s -c bench/raw/<variant>.json --concurrency 1 --disable-hot-restart --use-dynamic-base-id --admin-address-path bench/raw/<variant>.admin -l warning --drain-time-s 0 --drain-strategy immediate", moduleSearchPathEnv, o.EnvoyCPU, o.Envoy),
		fmt.Sprintf("taskset -c %d bench/raw/bin/allot-authz -addr 127.0.0.1:<port> -config bench/raw/authz-config.json   # variant D only", o.LoadCPU))
	authzConfig := filepath.Join(raw, "authz-config.json")
	if err := os.WriteFile(authzConfig, filterConfigJSON(50), 0o644); err != nil {
		return err
	}

	seq := uint64(0)
	for round := 1; round <= o.Rounds; round++ {
		for _, v := range vs {
			if err := ctx.Err(); err != nil {
				return err
			}
			if v.interleavedOnly() {
				continue
			}
			seq++
			r, err := runVariant(ctx, o, p, v, round, seq, authzBin, authzConfig)
			if err != nil {
				return fmt.Errorf("round %d, variant %s: %w", round, v.ID, err)
			}
			logf("round %d %s: max %.0f req/s, %.1f µs CPU/req; at %.0f req/s p50 %.0f µs p99 %.0f µs (pacer lag %.0f µs); RSS %.1f MiB",
				round, v.ID, r.MaxRPS, r.CPUPerReq, r.Rate, r.Quantiles["p50"], r.Quantiles["p99"], r.PacerLag, float64(r.RSS)/(1<<20))
			res.Runs = append(res.Runs, r)
		}
	}

	if o.Rounds > 0 {
		rounds := cmp.Or(o.PairedRounds, pairedRounds)
		logf("interleaved CPU: %d rounds of %d requests per variant, every Envoy up at once", rounds, pairedRequests)
		pr, err := measurePaired(ctx, o, p, vs, authzBin, authzConfig, pairedPlan{rounds: rounds, alternate: true, latency: true})
		if err != nil {
			return fmt.Errorf("interleaved CPU: %w", err)
		}
		res.Paired = pr
		for _, v := range vs {
			if a, ok := pr.add(v.ID); ok {
				logf("interleaved %s: adds %.1f µs CPU per request", v.ID, a)
			}
		}
	}

	if !o.SkipExtras && os.Getenv("ALLOT_BENCH_ONLY_PROPAGATION") == "" {
		logf("engine micro-benchmarks and ParseConfig")
		m, err := runMicro(ctx, o, p)
		if err != nil {
			return err
		}
		res.Micro = m
		res.Commands = append(res.Commands, m.Command)
		logf("configuration load time in Envoy")
		lt, err := measureLoadTime(ctx, o, p)
		if err != nil {
			return err
		}
		res.LoadTime = lt
		logf("memory at --concurrency 2")
		mem, err := measureMemory(ctx, o, p)
		if err != nil {
			return err
		}
		res.Memory = mem
	}
	if o.SkipExtras {
		res.Propagate = propagation{NotMeasured: "skipped (-skip-extras)"}
	} else {
		res.Propagate = measurePropagation(ctx, o, p, logf)
		res.Commands = append(res.Commands,
			"bench/raw/bin/allotd -admin-addr 127.0.0.1:<port> -xds-addr 127.0.0.1:<port> -db bench/raw/propagation.db -tokens envoy-configs/dev-tokens.json -wasm-path bin/allot.wasm",
			fmt.Sprintf("taskset -c %d bench/raw/bin/allot-xdsload -addr 127.0.0.1:<xds port> -clients %d -conns 50 -cluster sim", o.LoadCPU, propSimulated),
			"curl -X POST -H 'Authorization: Bearer <admin token>' '127.0.0.1:<port>/v1/experiments?wait=30s' -d '{\"key\":\"prop-…\",…}'   # timed, 20 times")
		if os.Getenv("ALLOT_BENCH_ONLY_PROPAGATION") == "" {
			rep, cmds := measureReplicas(ctx, o, p, replicaFleets(o.ReplicaClients), logf)
			res.Replicas = &rep
			res.Commands = append(res.Commands, cmds...)
		}
	}

	res.LoadAfter = loadavg()
	res.Duration = time.Since(start)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(raw, "results.json"), b, 0o644); err != nil {
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

// selectVariants are A and the variants only names (all when empty), each
// with its pre-flight expectation. The diagnostic variants (L, M) are left
// out unless only names them or diagnostic is set.
func selectVariants(only string, diagnostic bool) ([]variant, error) {
	var vs []variant
	for _, v := range variants() {
		named := only != "" && strings.Contains(only, v.ID)
		if v.ID != "A" && (only != "" && !named || v.diagnostic && !named && !diagnostic) {
			continue
		}
		v, err := withExpect(v)
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// buildFor builds what the variants vs load besides bin/allot.wasm and
// the minimal Wasm filter: the dynamic modules (buildModules) and Y's
// module (buildNoResponse). It returns the commands, for the report.
func buildFor(ctx context.Context, o Options, p *paths, vs []variant) ([]string, error) {
	var cmds []string
	if slices.ContainsFunc(vs, func(v variant) bool { return v.module != nil }) {
		c, err := buildModules(ctx, o, p)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, c...)
	}
	if slices.ContainsFunc(vs, func(v variant) bool { return v.noResponse }) {
		c, err := buildNoResponse(ctx, o, p)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return cmds, nil
}

// goBuild builds package pkg of the module in dir into out; with wasm, as
// a proxy-wasm module (wasip1, c-shared), the way `make build-filter` does.
func goBuild(ctx context.Context, dir, out, pkg string, wasm bool) error {
	if wasm {
		return harness.GoBuild(ctx, dir, out, pkg, []string{"-buildmode=c-shared", "-trimpath"}, "GOOS=wasip1", "GOARCH=wasm")
	}
	return harness.GoBuild(ctx, dir, out, pkg, []string{"-trimpath"})
}

// withExpect gives an Allot variant the pre-flight's expectation: the
// engine's assignment of each id and, with a sticky cookie, the cookies
// sent and set (withCookies).
func withExpect(v variant) (variant, error) {
	if v.allot > 0 {
		exp, err := engineExpect(v.allot)
		if err != nil {
			return v, err
		}
		v.expect = exp
	}
	return withCookies(v)
}

func checkTools(o Options) error {
	if _, err := os.Stat(o.Envoy); err != nil {
		return fmt.Errorf("envoy not found at %s (%v): run `make envoy` or set ENVOY_BIN", o.Envoy, err)
	}
	if out, err := exec.Command(o.Envoy, "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("%s --version: %w\n%s", o.Envoy, err, out)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return errors.New("taskset not found (util-linux): it pins Envoy and the load generator to separate CPUs")
	}
	return nil
}

// ids returns the x-user-id generator: warm variants cycle through units
// ids (unitID); cold ones never repeat one (seq makes them unique per run).
func ids(cold bool, units int, seq uint64) func([]byte, uint64) []byte {
	if cold {
		return func(dst []byte, i uint64) []byte {
			dst = append(dst, "cold-"...)
			dst = strconv.AppendUint(dst, seq, 10)
			dst = append(dst, '-')
			return strconv.AppendUint(dst, i, 10)
		}
	}
	n := uint64(units)
	return func(dst []byte, i uint64) []byte { return appendUnitID(dst, i%n) }
}

// appendUnitID appends warm unit n's id, user-<n>.
func appendUnitID(dst []byte, n uint64) []byte {
	return strconv.AppendUint(append(dst, "user-"...), n, 10)
}

// unitID is warm unit n's id.
func unitID(n uint64) string { return string(appendUnitID(nil, n)) }

func runVariant(ctx context.Context, o Options, p *paths, v variant, round int, seq uint64, authzBin, authzConfig string) (r run, err error) {
	r = run{Variant: v.ID, Round: round, Rate: o.Rate}
	var authz *harness.Process
	if v.authz {
		if authz, p.authzPort, err = startAuthz(o, p, "authz", authzBin, authzConfig); err != nil {
			return r, err
		}
		defer authz.Terminate()
	}
	filters, err := v.filters(p)
	if err != nil {
		return r, err
	}
	port := 0
	if v.authz {
		port = p.authzPort
	}
	boot, err := bootstrap(filters, port)
	if err != nil {
		return r, err
	}
	bootPath := filepath.Join(p.raw, v.ID+".json")
	if err := os.WriteFile(bootPath, boot, 0o644); err != nil {
		return r, err
	}
	e, err := startEnvoy(ctx, o.Envoy, p.raw, v.ID, bootPath, 1, o.EnvoyCPU, moduleEnv(v, p))
	if err != nil {
		return r, err
	}
	defer e.Terminate()

	// Correctness first: warm ids and, for cold variants, fresh ones.
	if err := preflight(e.listener, v, checkIDs(v, 8, 97, "pre", seq)); err != nil {
		return r, fmt.Errorf("%w\nenvoy log:\n%s", err, e.LogTail(10))
	}

	req, err := v.request(seq)
	if err != nil {
		return r, err
	}
	base := seq << 40
	if _, err := load.MaxThroughput(ctx, e.listener, o.Conns, o.Warmup, 0, req, base); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	base += 1 << 32

	cpu0, _ := harness.CPUTicks(e.Pid())
	var a0 int64
	if authz != nil {
		a0, _ = harness.CPUTicks(authz.Pid())
	}
	mt, err := load.MaxThroughput(ctx, e.listener, o.Conns, o.Throughput, 0, req, base)
	if err != nil {
		return r, fmt.Errorf("max throughput: %w", err)
	}
	cpu1, _ := harness.CPUTicks(e.Pid())
	base += 1 << 32
	r.MaxRPS, r.MaxErrors = mt.RPS(), mt.Errors
	r.CPUPerReq = perRequest(cpu1-cpu0, mt.Requests)
	if authz != nil {
		a1, _ := harness.CPUTicks(authz.Pid())
		r.AuthzCPU = perRequest(a1-a0, mt.Requests)
	}

	time.Sleep(200 * time.Millisecond)
	cpu0, _ = harness.CPUTicks(e.Pid())
	fr, err := load.FixedRate(ctx, e.listener, o.RateConns, o.Rate, o.Latency, req, base)
	if err != nil {
		return r, fmt.Errorf("fixed rate: %w", err)
	}
	cpu1, _ = harness.CPUTicks(e.Pid())
	r.RateAchieved = float64(fr.Requests) / o.Latency.Seconds()
	r.RateErrors = fr.Intended - fr.Requests
	r.RateCPU = perRequest(cpu1-cpu0, fr.Requests)
	r.Quantiles = map[string]float64{}
	for _, q := range quantiles {
		r.Quantiles[q.name] = float64(fr.Quantile(q.q).Nanoseconds()) / 1e3
	}
	r.PacerLag = float64(fr.PacerLag.Nanoseconds()) / 1e3
	r.RSS, _ = harness.ReadRSS(e.Pid())
	if v.allot > 0 {
		time.Sleep(1100 * time.Millisecond) // counters flush once a second
		r.CacheHits = e.stat("wasmcustom.allot.cache_hits")
		r.CacheMisses = e.stat("wasmcustom.allot.cache_misses")
	}
	return r, nil
}

// startAuthz starts variant D's ext_authz service on the load generator's
// CPU and waits until it listens.
func startAuthz(o Options, p *paths, name, bin, config string) (*harness.Process, int, error) {
	port, err := harness.FreePort()
	if err != nil {
		return nil, 0, err
	}
	authz, err := startProc(name, filepath.Join(p.raw, name+".log"), o.LoadCPU, nil, bin,
		"-addr", "127.0.0.1:"+strconv.Itoa(port), "-config", config)
	if err != nil {
		return nil, 0, err
	}
	if err := authz.WaitTCP("127.0.0.1:"+strconv.Itoa(port), 10*time.Second); err != nil {
		authz.Terminate()
		return nil, 0, err
	}
	return authz, port, nil
}

// checkIDs are the pre-flight's user ids: n of the warm ids (every
// stride-th) and, for a cold variant, n fresh ones named prefix-seq-i.
func checkIDs(v variant, n, stride int, prefix string, seq uint64) []string {
	var ids []string
	for i := range n {
		ids = append(ids, "user-"+strconv.Itoa(i*stride))
		if v.cold {
			ids = append(ids, fmt.Sprintf("%s-%d-%d", prefix, seq, i))
		}
	}
	return ids
}

func perRequest(ticks int64, requests uint64) float64 {
	if requests == 0 {
		return 0
	}
	return float64(ticks) * harness.TickSeconds * 1e6 / float64(requests)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
