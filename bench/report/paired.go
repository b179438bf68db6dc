package report

import (
	"slices"
	"time"

	"github.com/allotmesh/allot/bench/stats"
)

// Paired is the CPU cost per request measured with every variant's Envoy
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
type Paired struct {
	Rounds   int `json:"rounds"`
	Requests int `json:"requests_per_slice"`
	// Alternate: every other round took the variants in reverse order.
	Alternate bool `json:"alternate,omitempty"`
	// CPU[v] are variant v's Envoy CPU µs per request, one per round.
	CPU map[string][]float64 `json:"cpu_us_per_req"`
	// RPS[v] are variant v's closed-loop requests per second, one per
	// round: its maximum throughput over the slice.
	RPS map[string][]float64 `json:"rps"`
	// UpstreamCPU[v] are the CPU µs per request of the upstream of a
	// proxied variant (a, p), over the same closed-loop slices.
	UpstreamCPU map[string][]float64 `json:"upstream_cpu_us_per_req,omitempty"`
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
	// Observed[v] are Allot variant v's outcome stats (variant.Observe) after
	// its last slice, with the requests it was sent: the observe rows'
	// proof that Z and z observed and G and Q did not.
	Observed map[string]ObservedStats `json:"observed,omitempty"`
}

// Add is variant id's CPU addition over A: the median of per-round
// differences.
func (p *Paired) Add(id string) (float64, bool) {
	d, ok := p.diffs(id)
	if !ok {
		return 0, false
	}
	return stats.Median(d), true
}

// diffs are variant id's per-round CPU differences to A.
func (p *Paired) diffs(id string) ([]float64, bool) { return p.between(id, "A") }

// between are the per-round CPU differences of variant x to variant y.
func (p *Paired) between(x, y string) ([]float64, bool) { return stats.RoundDiffs(p.CPU[x], p.CPU[y]) }

// ratioCI is the 95% bootstrap interval of add(x) / add(y) (see
// bootstrapRatio). Without an interleaved measurement (p nil) there is none.
func (p *Paired) ratioCI(x, y string) (lo, hi float64, ok bool) {
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
func (p *Paired) latAdd(id, q string) (float64, bool) {
	d, ok := p.latDiffs(id, q)
	if !ok {
		return 0, false
	}
	return stats.Median(d), true
}

// latDiffs are variant id's per-round differences of latency quantile q to
// A's.
func (p *Paired) latDiffs(id, q string) ([]float64, bool) {
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
func (p *Paired) spread(id string) (lo, hi float64) {
	d, _ := p.diffs(id)
	slices.Sort(d)
	return d[len(d)/4], d[(3*len(d))/4]
}

// PairedWarmup is the requests each Envoy of the interleaved section
// serves before its first timed slice.
const PairedWarmup = 5000
