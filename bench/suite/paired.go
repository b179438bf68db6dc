package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/allotmesh/allot/bench/load"
	"github.com/allotmesh/allot/bench/stats"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/internal/harness"
)

// paired is the CPU cost per request measured with every variant's Envoy
// running at once (all pinned to the Envoy CPU, idle when not loaded) and
// load sent to them in turn, a short slice each, for many rounds. A drift
// of the shared VM's speed then hits every variant alike, and each
// variant's addition is the median of its per-slice differences to A's
// slice of the same round: far steadier than whole runs on fresh Envoys,
// whose per-request CPU swings by ±15% between rounds here.
//
// Each round also gives every variant a slice at the fixed rate. A
// variant's added latency quantile is, like its CPU, the median of its
// per-slice differences to A's slice of the same round: a hiccup of the VM
// decides the p99 of the slice it lands in, and the median sets that round
// aside. The latencies are also pooled per variant, for the tables.
type paired struct {
	Rounds   int `json:"rounds"`
	Requests int `json:"requests_per_slice"`
	// Alternate: every other round took the variants in reverse order.
	Alternate bool `json:"alternate,omitempty"`
	// CPU[v] are variant v's Envoy CPU µs per request, one per round.
	CPU map[string][]float64 `json:"cpu_us_per_req"`
	// RPS[v] are variant v's closed-loop requests per second, one per
	// round: its maximum throughput over the slice.
	RPS map[string][]float64 `json:"rps"`
	// Rate and RateSlice are the fixed rate and each latency slice's length.
	Rate      float64       `json:"rate"`
	RateSlice time.Duration `json:"rate_slice"`
	// Latency[v][q] is the quantile q (p50, p99, …) in µs of variant v's
	// latencies pooled over every round; Samples[v] how many there were.
	Latency map[string]map[string]float64 `json:"latency_us"`
	Samples map[string]int                `json:"latency_samples"`
	// SliceLatency[v][i][q] is the quantile q in µs of variant v's slice in
	// round i.
	SliceLatency map[string][]map[string]float64 `json:"slice_latency_us"`
	// Late counts requests the schedule asked for that did not complete.
	Late map[string]uint64 `json:"late,omitempty"`
	// Counters[v] are Allot variant v's counters (allotCounters, without
	// the "allot." prefix) after its last slice, its pre-flight and
	// warm-up included: what its requests did (cache hits, cookies set).
	Counters map[string]map[string]int64 `json:"counters,omitempty"`
}

// allotCounters are Allot's counters the interleaved section reads at its
// end (a native worker flushes on a request a second after its last flush,
// so its last second's counts may be missing: the report uses shares).
var allotCounters = []string{plugin.MetricCacheHits, plugin.MetricCacheMisses, plugin.MetricStickyWritten, plugin.MetricStickyInvalid}

// add is variant id's CPU addition over A: the median of per-round
// differences.
func (p *paired) add(id string) (float64, bool) {
	d, ok := p.diffs(id)
	if !ok {
		return 0, false
	}
	return stats.Median(d), true
}

// diffs are variant id's per-round CPU differences to A.
func (p *paired) diffs(id string) ([]float64, bool) { return p.between(id, "A") }

// between are the per-round CPU differences of variant x to variant y.
func (p *paired) between(x, y string) ([]float64, bool) { return stats.RoundDiffs(p.CPU[x], p.CPU[y]) }

// ratioCI is the 95% bootstrap interval of add(x) / add(y) (see
// bootstrapRatio). Without an interleaved measurement (p nil) there is none.
func (p *paired) ratioCI(x, y string) (lo, hi float64, ok bool) {
	if p == nil {
		return 0, 0, false
	}
	dx, okX := p.diffs(x)
	dy, okY := p.diffs(y)
	if !okX || !okY {
		return 0, 0, false
	}
	lo, hi = stats.BootstrapRatio(dx, dy)
	return lo, hi, true
}

// latAdd is variant id's addition to latency quantile q over A: the median
// of per-round differences.
func (p *paired) latAdd(id, q string) (float64, bool) {
	d, ok := p.latDiffs(id, q)
	if !ok {
		return 0, false
	}
	return stats.Median(d), true
}

// latDiffs are variant id's per-round differences of latency quantile q to
// A's.
func (p *paired) latDiffs(id, q string) ([]float64, bool) {
	a, v := p.SliceLatency["A"], p.SliceLatency[id]
	if len(a) == 0 || len(v) != len(a) {
		return nil, false
	}
	d := make([]float64, len(v))
	for i := range v {
		d[i] = v[i][q] - a[i][q]
	}
	return d, true
}

// spread is the interquartile range of variant id's per-round additions.
func (p *paired) spread(id string) (lo, hi float64) {
	d, _ := p.diffs(id)
	slices.Sort(d)
	return d[len(d)/4], d[(3*len(d))/4]
}

const (
	pairedRounds    = 10
	pairedRequests  = 15000
	pairedWarmup    = 5000
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

// measurePaired starts every variant's Envoy (and D's ext_authz service, on
// the load generator's CPU as in the rounds), checks each again, and
// measures them in turn as plan says.
func measurePaired(ctx context.Context, o Options, p *paths, vs []variant, authzBin, authzConfig string, plan pairedPlan) (*paired, error) {
	res := &paired{Rounds: plan.rounds, Alternate: plan.alternate, Requests: pairedRequests, CPU: map[string][]float64{}, RPS: map[string][]float64{},
		Rate: o.Rate, RateSlice: pairedRateSlice, Latency: map[string]map[string]float64{},
		Samples: map[string]int{}, Late: map[string]uint64{}, SliceLatency: map[string][]map[string]float64{}}
	type running struct {
		v    variant
		e    *envoy
		req  load.RequestFunc
		next uint64
		lat  []time.Duration
	}
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
		name := "paired-" + v.ID
		port := 0
		if v.authz {
			authz, ap, err := startAuthz(o, p, "paired-authz", authzBin, authzConfig)
			if err != nil {
				return nil, err
			}
			procs, port = append(procs, authz), ap
		}
		filters, err := v.filters(p)
		if err != nil {
			return nil, err
		}
		boot, err := bootstrap(filters, port)
		if err != nil {
			return nil, err
		}
		bootPath := filepath.Join(p.raw, name+".json")
		if err := os.WriteFile(bootPath, boot, 0o644); err != nil {
			return nil, err
		}
		e, err := startEnvoy(ctx, o.Envoy, p.raw, name, bootPath, 1, o.EnvoyCPU, moduleEnv(v, p))
		if err != nil {
			return nil, err
		}
		r := &running{v: v, e: e}
		rs = append(rs, r)
		seq := uint64(1000 + i)
		if err := preflight(e.listener, v, checkIDs(v, 4, 131, "paired", seq)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if r.req, err = v.request(seq); err != nil {
			return nil, err
		}
		if _, err := load.MaxThroughput(ctx, e.listener, o.Conns, o.Throughput, pairedWarmup, r.req, 0); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", name, err)
		}
		r.next = pairedWarmup
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
			c0, err := harness.CPUNanos(r.e.Pid())
			if err != nil {
				return nil, err
			}
			out, err := load.MaxThroughput(ctx, r.e.listener, o.Conns, 10*o.Throughput, pairedRequests, r.req, r.next)
			if err != nil {
				return nil, fmt.Errorf("paired-%s: %w", r.v.ID, err)
			}
			c1, err := harness.CPUNanos(r.e.Pid())
			if err != nil {
				return nil, err
			}
			r.next += pairedRequests
			if out.Errors > 0 || out.Requests == 0 {
				return nil, fmt.Errorf("paired-%s: %d errors in %d requests", r.v.ID, out.Errors, out.Requests)
			}
			res.CPU[r.v.ID] = append(res.CPU[r.v.ID], float64(c1-c0)/1e3/float64(out.Requests))
			res.RPS[r.v.ID] = append(res.RPS[r.v.ID], out.RPS())
			// The floors and their native counterpart are there for their
			// CPU; skipping their latency slices keeps make bench within
			// its 20 minutes.
			if !plan.latency || r.v.interleavedOnly() {
				continue
			}

			fr, err := load.FixedRate(ctx, r.e.listener, o.RateConns, o.Rate, pairedRateSlice, r.req, r.next)
			if err != nil {
				return nil, fmt.Errorf("paired-%s fixed rate: %w", r.v.ID, err)
			}
			r.next += fr.Intended
			r.lat = append(r.lat, fr.Latencies...)
			slice := load.Result{Latencies: slices.Clone(fr.Latencies)}
			slices.Sort(slice.Latencies)
			qs := map[string]float64{}
			for _, q := range quantiles {
				qs[q.name] = float64(slice.Quantile(q.q).Nanoseconds()) / 1e3
			}
			res.SliceLatency[r.v.ID] = append(res.SliceLatency[r.v.ID], qs)
			res.Late[r.v.ID] += fr.Intended - fr.Requests
		}
	}
	if slices.ContainsFunc(rs, func(r *running) bool { return r.v.allot > 0 && !r.v.authz }) {
		time.Sleep(1100 * time.Millisecond) // counters flush once a second
		res.Counters = map[string]map[string]int64{}
		for _, r := range rs {
			if r.v.allot == 0 || r.v.authz {
				continue
			}
			res.Counters[r.v.ID] = map[string]int64{}
			for _, name := range allotCounters {
				res.Counters[r.v.ID][strings.TrimPrefix(name, "allot.")] = r.e.stat(metricsNamespace + "." + name)
			}
		}
	}
	if !plan.latency {
		return res, nil
	}
	for _, r := range rs {
		if len(r.lat) == 0 {
			continue
		}
		slices.Sort(r.lat)
		pooled := load.Result{Latencies: r.lat}
		res.Latency[r.v.ID] = map[string]float64{}
		for _, q := range quantiles {
			res.Latency[r.v.ID][q.name] = float64(pooled.Quantile(q.q).Nanoseconds()) / 1e3
		}
		res.Samples[r.v.ID] = len(r.lat)
	}
	return res, nil
}
