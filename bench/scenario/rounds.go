package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/allotmesh/allot/bench/load"
	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/harness"
)

// AuthzService is variant D's ext_authz service: its binary and the FilterConfig
// it serves.
type AuthzService struct{ bin, config string }

// Prepare builds what the variants need (the minimal Wasm filter, the
// ext_authz service, the dynamic modules), profiles Allot's host calls,
// selects the variants -only names and writes the ext_authz service's
// configuration, recording the commands in res.
func Prepare(ctx context.Context, o variant.Options, p *variant.Paths, res *report.Results) ([]variant.Variant, AuthzService, error) {
	az := AuthzService{bin: filepath.Join(p.Raw, "bin", "allot-authz"), config: filepath.Join(p.Raw, "authz-config.json")}
	for _, b := range []struct {
		wasm     bool
		out, pkg string
		cmd      string
	}{
		{true, p.MinWasm, "./bench/minwasm", "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o bench/raw/bin/minwasm.wasm ./bench/minwasm"},
		{false, az.bin, "./bench/cmd/allot-authz", "go build -trimpath -o bench/raw/bin/allot-authz ./bench/cmd/allot-authz"},
	} {
		if err := goBuild(ctx, o.Root, b.out, b.pkg, b.wasm); err != nil {
			return nil, az, fmt.Errorf("%s: %w", b.cmd, err)
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
			return nil, az, err
		}
		res.Profiles = append(res.Profiles, hp)
	}
	vs, err := variant.SelectVariants(o.Only, false)
	if err != nil {
		return nil, az, err
	}
	for _, v := range vs {
		res.Variants = append(res.Variants, v.Info())
	}
	cmds, err := buildFor(ctx, o, p, vs)
	if err != nil {
		return nil, az, err
	}
	res.Commands = append(append(res.Commands, cmds...),
		fmt.Sprintf("[%s=<module's directory>] taskset -c %d %s -c bench/raw/<variant>.json --concurrency 1 --disable-hot-restart --use-dynamic-base-id --admin-address-path bench/raw/<variant>.admin -l warning --drain-time-s 0 --drain-strategy immediate", variant.ModuleSearchPathEnv, o.EnvoyCPU, o.Envoy),
		fmt.Sprintf("taskset -c %d bench/raw/bin/allot-authz -addr 127.0.0.1:<port> -config bench/raw/authz-config.json   # variant D only", o.LoadCPU))
	if err := os.WriteFile(az.config, variant.FilterConfigJSON(50), 0o644); err != nil {
		return nil, az, err
	}
	return vs, az, nil
}

// MeasureRounds runs o.Rounds rounds of every variant but those measured
// in the interleaved section only, each on a fresh Envoy (runVariant).
func MeasureRounds(ctx context.Context, o variant.Options, p *variant.Paths, vs []variant.Variant, az AuthzService, res *report.Results, logf func(string, ...any)) error {
	seq := uint64(0)
	for round := 1; round <= o.Rounds; round++ {
		for _, v := range vs {
			if err := ctx.Err(); err != nil {
				return err
			}
			if v.InterleavedOnly() {
				continue
			}
			seq++
			r, err := runVariant(ctx, o, p, v, round, seq, az)
			if err != nil {
				return fmt.Errorf("round %d, variant %s: %w", round, v.ID, err)
			}
			logf("round %d %s: max %.0f req/s, %.1f µs CPU/req; at %.0f req/s p50 %.0f µs p99 %.0f µs (pacer lag %.0f µs); RSS %.1f MiB",
				round, v.ID, r.MaxRPS, r.CPUPerReq, r.Rate, r.Quantiles["p50"], r.Quantiles["p99"], r.PacerLag, float64(r.RSS)/(1<<20))
			res.Runs = append(res.Runs, r)
		}
	}
	return nil
}

// runVariant measures variant v on a fresh Envoy: the pre-flight, the
// warm-up, the max-throughput run and the fixed-rate run.
func runVariant(ctx context.Context, o variant.Options, p *variant.Paths, v variant.Variant, round int, seq uint64, az AuthzService) (r report.Run, err error) {
	r = report.Run{Variant: v.ID, Round: round, Rate: o.Rate}
	var authz *harness.Process
	if v.Authz {
		if authz, p.AuthzPort, err = startAuthz(o, p, "authz", az); err != nil {
			return r, err
		}
		defer authz.Terminate()
	}
	port := 0
	if v.Authz {
		port = p.AuthzPort
	}
	bootPath, err := variant.WriteBootstrap(p, v.ID, v.Filters, port, 0)
	if err != nil {
		return r, err
	}
	e, err := startEnvoy(ctx, o.Envoy, p.Raw, v.ID, bootPath, 1, o.EnvoyCPU, variant.ModuleEnv(v, p))
	if err != nil {
		return r, err
	}
	defer e.Terminate()

	// Correctness first: warm ids and, for cold variants, fresh ones.
	ids := variant.CheckIDs(v, 8, 97, "pre", seq)
	if err := preflight(e.listener, v, ids); err != nil {
		return r, fmt.Errorf("%w\nenvoy log:\n%s", err, e.LogTail(10))
	}
	if err := checkOutcomes(e, v, int64(len(ids))); err != nil {
		return r, err
	}

	req, err := v.Request(seq)
	if err != nil {
		return r, err
	}
	base := seq << 40
	if _, err := load.MaxThroughput(ctx, e.listener, o.Conns, o.Warmup, 0, req, base); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}
	base += 1 << 32

	if err := measureRun(ctx, &r, o, e, authz, req, base); err != nil {
		return r, err
	}
	r.RSS, _ = harness.ReadRSS(e.Pid())
	if v.Allot > 0 {
		time.Sleep(1100 * time.Millisecond) // counters flush once a second
		r.CacheHits = e.stat("wasmcustom.allot.cache_hits")
		r.CacheMisses = e.stat("wasmcustom.allot.cache_misses")
	}
	return r, nil
}

// measureRun runs the timed part of round r on e (and the ext_authz service
// authz, when not nil): the closed-loop max-throughput run with the CPU
// time of both, then the fixed-rate run with its latency quantiles.
func measureRun(ctx context.Context, r *report.Run, o variant.Options, e *envoy, authz *harness.Process, req load.RequestFunc, base uint64) error {
	cpu0, _ := harness.CPUTicks(e.Pid())
	var a0 int64
	if authz != nil {
		a0, _ = harness.CPUTicks(authz.Pid())
	}
	mt, err := load.MaxThroughput(ctx, e.listener, o.Conns, o.Throughput, 0, req, base)
	if err != nil {
		return fmt.Errorf("max throughput: %w", err)
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
		return fmt.Errorf("fixed rate: %w", err)
	}
	cpu1, _ = harness.CPUTicks(e.Pid())
	r.RateAchieved = float64(fr.Requests) / o.Latency.Seconds()
	r.RateErrors = fr.Intended - fr.Requests
	r.RateCPU = perRequest(cpu1-cpu0, fr.Requests)
	r.Quantiles = latencyQuantiles(fr.Latencies) // sorted
	r.PacerLag = float64(fr.PacerLag.Nanoseconds()) / 1e3
	return nil
}

// startAuthz starts variant D's ext_authz service on the load generator's
// CPU and waits until it listens.
func startAuthz(o variant.Options, p *variant.Paths, name string, az AuthzService) (*harness.Process, int, error) {
	return startServer(o, p, name, az.bin, "-config", az.config)
}

// startUpstream starts the proxied variants' upstream
// (bench/cmd/allot-upstream, built into p.upstream) on the load
// generator's CPU and waits until it listens.
func startUpstream(o variant.Options, p *variant.Paths, name string) (*harness.Process, int, error) {
	return startServer(o, p, name, p.Upstream)
}

// startServer starts bin -addr 127.0.0.1:<a free port> args on the load
// generator's CPU, its output in p.raw/name.log, and waits until it
// listens.
func startServer(o variant.Options, p *variant.Paths, name, bin string, args ...string) (*harness.Process, int, error) {
	port, err := harness.FreePort()
	if err != nil {
		return nil, 0, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	proc, err := startProc(name, filepath.Join(p.Raw, name+".log"), o.LoadCPU, nil, bin, append([]string{"-addr", addr}, args...)...)
	if err != nil {
		return nil, 0, err
	}
	if err := proc.WaitTCP(addr, 10*time.Second); err != nil {
		proc.Terminate()
		return nil, 0, err
	}
	return proc, port, nil
}

func perRequest(ticks int64, requests uint64) float64 {
	if requests == 0 {
		return 0
	}
	return float64(ticks) * harness.TickSeconds * 1e6 / float64(requests)
}
