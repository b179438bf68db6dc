package scenario

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/allotmesh/allot/bench/load"
	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/stats"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
)

// allotCounters are Allot's counters the interleaved section reads at its
// end (a native worker flushes on a request a second after its last flush,
// so its last second's counts may be missing: the report uses shares).
var allotCounters = []string{wire.MetricCacheHits, wire.MetricCacheMisses, wire.MetricStickyWritten, wire.MetricStickyInvalid}

const (
	pairedRounds    = 10
	pairedRequests  = 15000
	pairedRateSlice = 1500 * time.Millisecond
)

// pairedPlan shapes an interleaved measurement.
type pairedPlan struct {
	rounds int
	// alternate takes the variants in reverse order every other round, so
	// that neither of two neighbours always goes first.
	alternate bool
	// latency follows each closed-loop slice with a slice at the fixed
	// rate.
	latency bool
}

// MeasureInterleaved is make bench's interleaved section (measurePaired,
// every other round in reverse order, with latency slices), the targets'
// figures.
func MeasureInterleaved(ctx context.Context, o variant.Options, p *variant.Paths, vs []variant.Variant, az AuthzService, res *report.Results, logf func(string, ...any)) error {
	rounds := cmp.Or(o.PairedRounds, pairedRounds)
	logf("interleaved CPU: %d rounds of %d requests per variant, every Envoy up at once", rounds, pairedRequests)
	pr, err := measurePaired(ctx, o, p, vs, az, pairedPlan{rounds: rounds, alternate: true, latency: true})
	if err != nil {
		return fmt.Errorf("interleaved CPU: %w", err)
	}
	res.Paired = pr
	for _, v := range vs {
		if a, ok := pr.Add(v.ID); ok {
			logf("interleaved %s: adds %.1f µs CPU per request", v.ID, a)
		}
	}
	return nil
}

// running is one variant's Envoy in the interleaved section.
type running struct {
	v    variant.Variant
	e    *envoy
	up   *harness.Process // the proxied variants' upstream (nil: none)
	req  load.RequestFunc
	next uint64          // the next request's index
	sent int64           // requests sent, pre-flight and warm-up included
	lat  []time.Duration // the latencies of its fixed-rate slices
}

// measurePaired starts every variant's Envoy (and D's ext_authz service, on
// the load generator's CPU as in the rounds), checks each again, and
// measures them in turn as plan says.
func measurePaired(ctx context.Context, o variant.Options, p *variant.Paths, vs []variant.Variant, az AuthzService, plan pairedPlan) (*report.Paired, error) {
	res := &report.Paired{Rounds: plan.rounds, Alternate: plan.alternate, Requests: pairedRequests, CPU: map[string][]float64{}, RPS: map[string][]float64{},
		UpstreamCPU: map[string][]float64{},
		Rate:        o.Rate, RateSlice: pairedRateSlice, Latency: map[string]map[string]float64{},
		Samples: map[string]int{}, Late: map[string]uint64{}, SliceLatency: map[string][]map[string]float64{}}
	var rs []*running
	var procs []*harness.Process
	defer func() {
		for _, r := range rs {
			r.e.Terminate()
		}
		for _, pr := range procs {
			pr.Terminate()
		}
	}()
	for i, v := range vs {
		r, started, err := startRunning(ctx, o, p, v, uint64(1000+i), az)
		procs = append(procs, started...)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	for round := range plan.rounds {
		order := rs
		if plan.alternate && round%2 == 1 {
			order = slices.Clone(rs)
			slices.Reverse(order)
		}
		for _, r := range order {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			// The floors and their native counterpart are there for their
			// CPU; skipping their latency slices keeps make bench within
			// its 20 minutes.
			if err := r.slice(ctx, o, plan.latency && !r.v.InterleavedOnly(), res); err != nil {
				return nil, err
			}
		}
	}
	if err := readCounters(rs, res); err != nil {
		return nil, err
	}
	if plan.latency {
		poolLatencies(rs, res)
	}
	return res, nil
}

// startRunning starts variant v's Envoy (with D's ext_authz service or a
// proxied variant's upstream, which it returns for the caller to stop even
// on error), runs the pre-flight with ids of run seq and warms it up.
func startRunning(ctx context.Context, o variant.Options, p *variant.Paths, v variant.Variant, seq uint64, az AuthzService) (*running, []*harness.Process, error) {
	name := "paired-" + v.ID
	var procs []*harness.Process
	authzPort, upstreamPort := 0, 0
	if v.Authz {
		authz, port, err := startAuthz(o, p, "paired-authz", az)
		if err != nil {
			return nil, nil, err
		}
		procs, authzPort = append(procs, authz), port
	}
	var up *harness.Process
	if v.Upstream {
		var err error
		if up, upstreamPort, err = startUpstream(o, p, name+"-upstream"); err != nil {
			return nil, procs, err
		}
		procs = append(procs, up)
	}
	bootPath, err := variant.WriteBootstrap(p, name, v.Filters, authzPort, upstreamPort)
	if err != nil {
		return nil, procs, err
	}
	e, err := startEnvoy(ctx, o.Envoy, p.Raw, name, bootPath, 1, o.EnvoyCPU, variant.ModuleEnv(v, p))
	if err != nil {
		return nil, procs, err
	}
	r := &running{v: v, e: e, up: up}
	ids := variant.CheckIDs(v, 4, 131, "paired", seq)
	if err := preflight(e.listener, v, ids); err != nil {
		e.Terminate()
		return nil, procs, fmt.Errorf("%s: %w", name, err)
	}
	r.sent = int64(len(ids))
	if err := checkOutcomes(e, v, r.sent); err != nil {
		e.Terminate()
		return nil, procs, fmt.Errorf("%s: %w", name, err)
	}
	if r.req, err = v.Request(seq); err != nil {
		e.Terminate()
		return nil, procs, err
	}
	warm, err := load.MaxThroughput(ctx, e.listener, o.Conns, o.Throughput, report.PairedWarmup, r.req, 0)
	if err != nil {
		e.Terminate()
		return nil, procs, fmt.Errorf("%s warm-up: %w", name, err)
	}
	r.next = report.PairedWarmup
	r.sent += int64(warm.Requests + warm.Errors)
	return r, procs, nil
}

// slice loads r for one round: pairedRequests closed loop, its Envoy's CPU
// time read around them, then, with latency, a slice at the fixed rate.
func (r *running) slice(ctx context.Context, o variant.Options, latency bool, res *report.Paired) error {
	u0, err := r.upstreamNanos()
	if err != nil {
		return err
	}
	c0, err := harness.CPUNanos(r.e.Pid())
	if err != nil {
		return err
	}
	out, err := load.MaxThroughput(ctx, r.e.listener, o.Conns, 10*o.Throughput, pairedRequests, r.req, r.next)
	if err != nil {
		return fmt.Errorf("paired-%s: %w", r.v.ID, err)
	}
	c1, err := harness.CPUNanos(r.e.Pid())
	if err != nil {
		return err
	}
	u1, err := r.upstreamNanos()
	if err != nil {
		return err
	}
	r.next += pairedRequests
	r.sent += int64(out.Requests + out.Errors)
	if out.Errors > 0 || out.Requests == 0 {
		return fmt.Errorf("paired-%s: %d errors in %d requests", r.v.ID, out.Errors, out.Requests)
	}
	res.CPU[r.v.ID] = append(res.CPU[r.v.ID], float64(c1-c0)/1e3/float64(out.Requests))
	res.RPS[r.v.ID] = append(res.RPS[r.v.ID], out.RPS())
	if r.up != nil {
		res.UpstreamCPU[r.v.ID] = append(res.UpstreamCPU[r.v.ID], float64(u1-u0)/1e3/float64(out.Requests))
	}
	if !latency {
		return nil
	}
	fr, err := load.FixedRate(ctx, r.e.listener, o.RateConns, o.Rate, pairedRateSlice, r.req, r.next)
	if err != nil {
		return fmt.Errorf("paired-%s fixed rate: %w", r.v.ID, err)
	}
	r.next += fr.Intended
	r.sent += int64(fr.Requests)
	r.lat = append(r.lat, fr.Latencies...)
	res.SliceLatency[r.v.ID] = append(res.SliceLatency[r.v.ID], latencyQuantiles(slices.Sorted(slices.Values(fr.Latencies))))
	res.Late[r.v.ID] += fr.Intended - fr.Requests
	return nil
}

// upstreamNanos is the CPU time r's upstream has used (0 without one).
func (r *running) upstreamNanos() (int64, error) {
	if r.up == nil {
		return 0, nil
	}
	return harness.CPUNanos(r.up.Pid())
}

// readCounters reads Allot's counters (allotCounters) and outcome stats
// (readObserved) of every Allot variant but D, after a second for the
// counters to flush.
func readCounters(rs []*running, res *report.Paired) error {
	if !slices.ContainsFunc(rs, func(r *running) bool { return r.v.Allot > 0 && !r.v.Authz }) {
		return nil
	}
	time.Sleep(1100 * time.Millisecond) // counters flush once a second
	res.Counters = map[string]map[string]int64{}
	res.Observed = map[string]report.ObservedStats{}
	for _, r := range rs {
		if r.v.Allot == 0 || r.v.Authz {
			continue
		}
		res.Counters[r.v.ID] = map[string]int64{}
		for _, name := range allotCounters {
			res.Counters[r.v.ID][strings.TrimPrefix(name, "allot.")] = r.e.stat(variant.MetricsNamespace + "." + name)
		}
		o, err := readObserved(r.e, r.sent)
		if err != nil {
			return fmt.Errorf("paired-%s: %w", r.v.ID, err)
		}
		res.Observed[r.v.ID] = o
	}
	return nil
}

// poolLatencies sets each variant's latency quantiles over all its slices.
func poolLatencies(rs []*running, res *report.Paired) {
	for _, r := range rs {
		if len(r.lat) == 0 {
			continue
		}
		slices.Sort(r.lat)
		res.Latency[r.v.ID] = latencyQuantiles(r.lat)
		res.Samples[r.v.ID] = len(r.lat)
	}
}

// latencyQuantiles are the quantiles (in µs) of sorted latencies.
func latencyQuantiles(sorted []time.Duration) map[string]float64 {
	qs := map[string]float64{}
	for _, q := range report.Quantiles {
		qs[q.Name] = float64(stats.Quantile(sorted, q.Q).Nanoseconds()) / 1e3
	}
	return qs
}
