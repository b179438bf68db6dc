package report

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/allotmesh/allot/bench/stats"
	"github.com/allotmesh/allot/bench/variant"
)

// ratioVerdict is an at-most ratio target's result: met or missed by the
// median ratio pt, marked undecided when the run's 95% interval [lo, hi]
// includes the limit.
func ratioVerdict(pt, lo, hi, limit float64) string {
	v := metMissed(pt <= limit)
	if lo <= limit && limit < hi {
		v += undecided
	}
	return v
}

// atLeastVerdict is ratioVerdict for an at-least target (pt ≥ limit).
func atLeastVerdict(pt, lo, hi, limit float64) string {
	v := metMissed(pt >= limit)
	if lo < limit && limit <= hi {
		v += undecided
	}
	return v
}

const undecided = " (undecided: the 95% interval includes the limit)"

// ratioRange formats a ratio interval.
func ratioRange(lo, hi float64) string {
	f := func(x float64) string {
		if math.IsInf(x, 0) {
			return "unbounded"
		}
		return fmt.Sprintf("%.2f", x)
	}
	return f(lo) + "–" + f(hi) + " ×"
}

func metMissed(ok bool) string {
	if ok {
		return "**met**"
	}
	return "**missed**"
}

// The targets. Each is checked on the figures of the interleaved section
// (the memory ones on the extras'), and a variant the run did not measure
// leaves its row out.
var (
	// throughputTargets: X's closed-loop throughput ≥ limit × Ref's.
	// Floor is the floor the row shows beside X: N, the minimal Go
	// dynamic module (one header, none of Allot's work). A target N misses
	// too lies below the floor of any Go filter on the native host.
	throughputTargets = []struct {
		what, x, ref, floor string
		limit               float64
	}{
		{"Allot native, 50 experiments, warm cache (Q): max throughput ≥ 0.70 × no filter (A)", "Q", "A", "N", 0.70},
		{"… and ≥ the Lua filter's (C)", "Q", "C", "N", 1},
		{"Allot native, 50 experiments, cold cache (R): max throughput ≥ 0.65 × no filter (A)", "R", "A", "N", 0.65},
		{"Allot native, 50 experiments, warm cache, lean (S): max throughput ≥ the Lua filter's (C), one header from a hand-written script", "S", "C", "N", 1},
	}
	// writesTargets: X's CPU added over A ≤ limit × Floor's, the floor of
	// X's writes made by Envoy's native header_mutation (b). ABI is the
	// floor the row shows beside it: the same writes made through X's
	// host ABI with none of X's work (o: the C dynamic module making Q's
	// writes with the warm path's callbacks). A target ABI misses too lies
	// below the floor of any filter on that ABI.
	writesTargets = []struct {
		what, x, floor, abi string
		limit               float64
	}{
		{"Allot native, 50 experiments, warm cache, every header (Q): CPU added per request ≤ 1.5 × that of header_mutation adding the same headers (b)", "Q", "b", "o", 1.5},
	}
	// noWorseTargets: X's closed-loop throughput no worse than Ref's
	// within noise — met unless the 95% interval of the per-round ratio
	// X/Ref lies wholly below 1, i.e. unless the run shows X slower.
	noWorseTargets = []struct {
		what, x, ref string
	}{
		{"Allot native, cold cache (R, warm path on): no worse than with the warm path off (r), within noise", "R", "r"},
	}
	// ownTargets: X − Floor, the Wasm filter's own work above Envoy's
	// charge for its writes, ≤ limit × E's addition.
	ownTargets = []struct {
		what, x, floor string
		limit          float64
	}{
		{"Wasm, warm cache: G − K ≤ 0.25 × E's CPU per request", "G", "K", 0.25},
		{"Wasm, cold cache: H − K ≤ 0.6 × E's CPU per request", "H", "K", 0.6},
	}
	// p99Targets: X's added p99 at the fixed rate ≤ limit × Ref's (D, the
	// ext_authz sidecar call).
	p99Targets = []struct {
		what, x, ref string
		limit        float64
	}{
		{"Allot native's (Q) added p99 at the fixed rate ≤ 1/20 of the ext_authz call's (D)", "Q", "D", 1.0 / 20},
		{"Allot Wasm's (G) added p99 at the fixed rate ≤ 1/5 of D's", "G", "D", 1.0 / 5},
	}
)

// rssLimitNative and rssLimitWasm are the memory targets: Envoy's RSS with
// 1,000 experiments and every cache full at --concurrency 2 over A's
// (native: the warm path on, its C caches full as well as Go's; #37).
const (
	rssLimitNative = 24 // MiB
	rssLimitWasm   = 96 // MiB
)

// targetRow is one target. Kind picks the template: "throughput", "own",
// "writes", "noworse", "p99", "rss", "replicas", "replicas-floor" or
// "unmeasured".
type targetRow struct {
	Kind, What, Result string
	X, Ref             string
	// The ratio, its 95% interval and its limit; Figure and RefFigure the
	// two figures it relates (req/s; µs of CPU or of p99).
	Ratio, Lo, Hi, Limit float64
	Figure, RefFigure    float64
	// Fresh is the rounds' median ratio (throughput; 0 none).
	Fresh float64
	// p99: the p50 additions, the rounds, and the pooled figures.
	X50, Ref50            float64
	PoolA, PoolX, PoolRef float64
	// own and writes: the floor. throughput: the floor's ratio, its
	// interval, and whether even the floor misses the limit (the target
	// lies below it).
	Floor                        string
	FloorRatio, FloorLo, FloorHi float64
	BelowFloor                   bool
	// writes: the floor of X's writes through its ABI, its addition over
	// A, and in FloorRatio, FloorLo and FloorHi its ratio to Floor's.
	ABI    string
	ABIAdd float64
	// noworse: X − Ref's CPU per request per round, median and 95%
	// interval.
	Diff, DiffLo, DiffHi float64
	// rss: the baseline and the variant in MiB.
	Base, RSS float64
	// replicas: the fleet's waited writes. replicas-floor: the replicated
	// floor's p99 as a ratio to the floor's (FloorRatio) with its
	// interval, and Allot's p99 as a ratio to the replicated floor's.
	Fleet                            *ReplicaSpread
	ReplLo, ReplHi                   float64
	OverRepl, OverReplLo, OverReplHi float64
	Reason                           string
}

func (v *reportView) targets() {
	pr := v.Paired
	// The native module's: throughput, memory, latency.
	if pr != nil {
		fresh := collect(v.Results, func(r Run) float64 { return r.MaxRPS })
		for _, t := range throughputTargets {
			r, ok := stats.Ratios(pr.RPS[t.x], pr.RPS[t.ref])
			if !ok {
				continue
			}
			lo, hi := stats.BootstrapMedian(r)
			row := targetRow{Kind: "throughput", What: t.what, X: t.x, Ref: t.ref, Ratio: stats.Median(r), Lo: lo, Hi: hi,
				Limit: t.limit, Figure: stats.Median(pr.RPS[t.x]), RefFigure: stats.Median(pr.RPS[t.ref])}
			if fr, ok := stats.Ratios(fresh[t.x].vals, fresh[t.ref].vals); ok {
				row.Fresh = stats.Median(fr)
			}
			row.Result = atLeastVerdict(row.Ratio, lo, hi, t.limit)
			if fr, ok := stats.Ratios(pr.RPS[t.floor], pr.RPS[t.ref]); ok {
				row.Floor = t.floor
				row.FloorRatio = stats.Median(fr)
				row.FloorLo, row.FloorHi = stats.BootstrapMedian(fr)
				row.BelowFloor = row.Ratio < t.limit && row.FloorHi < t.limit
			}
			v.Targets = append(v.Targets, row)
		}
		v.writesTargets()
		v.noWorseTargets()
	}
	m := v.Memory
	switch {
	case m == nil:
		v.Targets = append(v.Targets, unmeasured(rssWhat("Allot native", "liballot.so, warm path on", rssLimitNative), "run without -skip-extras"))
	case m.NativeRSS == 0:
		v.Targets = append(v.Targets, unmeasured(rssWhat("Allot native", "liballot.so, warm path on", rssLimitNative), "this run has no native figure"))
	default:
		v.Targets = append(v.Targets, rssRow(rssWhat("Allot native", "liballot.so, warm path on", rssLimitNative), m.BaseRSS, m.NativeRSS, rssLimitNative))
	}
	if pr != nil {
		for _, t := range p99Targets[:1] {
			if r, ok := v.p99Row(t.what, t.x, t.ref, t.limit); ok {
				v.Targets = append(v.Targets, r)
			}
		}
	}
	// The Wasm module's: its own work above its floor, latency, memory.
	if pr != nil {
		e, okE := pr.diffs("E")
		for _, t := range ownTargets {
			own, ok := pr.between(t.x, t.floor)
			if !ok || !okE || stats.Median(e) <= 0 {
				continue
			}
			lo, hi := stats.BootstrapRatio(own, e)
			ratio := stats.Median(own) / stats.Median(e)
			v.Targets = append(v.Targets, targetRow{Kind: "own", What: t.what, X: t.x, Floor: t.floor, Ref: "E",
				Figure: stats.Median(own), RefFigure: stats.Median(e), Ratio: ratio, Lo: lo, Hi: hi, Limit: t.limit,
				Result: ratioVerdict(ratio, lo, hi, t.limit)})
		}
		for _, t := range p99Targets[1:] {
			if r, ok := v.p99Row(t.what, t.x, t.ref, t.limit); ok {
				v.Targets = append(v.Targets, r)
			}
		}
	}
	if m == nil {
		v.Targets = append(v.Targets, unmeasured(rssWhat("Allot", "Wasm", rssLimitWasm), "run without -skip-extras"))
	} else {
		v.Targets = append(v.Targets, rssRow(rssWhat("Allot", "Wasm", rssLimitWasm), m.BaseRSS, m.AllotRSS, rssLimitWasm))
	}
	v.Targets = append(v.Targets, replicaRows(v.Replicas)...)
}

// writesTargets are writesTargets measured: X's addition over A to its
// floor's, with the 95% interval of that ratio over the same rounds.
func (v *reportView) writesTargets() {
	pr := v.Paired
	for _, t := range writesTargets {
		x, okX := pr.Add(t.x)
		f, okF := pr.Add(t.floor)
		lo, hi, okI := pr.ratioCI(t.x, t.floor)
		if !okX || !okF || !okI || f <= 0 {
			continue
		}
		ratio := x / f
		row := targetRow{Kind: "writes", What: t.what, X: t.x, Floor: t.floor, Figure: x, RefFigure: f,
			Ratio: ratio, Lo: lo, Hi: hi, Limit: t.limit, Result: ratioVerdict(ratio, lo, hi, t.limit)}
		if a, ok := pr.Add(t.abi); ok {
			alo, ahi, _ := pr.ratioCI(t.abi, t.floor)
			row.ABI, row.ABIAdd = t.abi, a
			row.FloorRatio, row.FloorLo, row.FloorHi = a/f, alo, ahi
			// As the throughput targets: a missed limit the floor's whole
			// interval misses too.
			row.BelowFloor = ratio > t.limit && alo > t.limit
		}
		v.Targets = append(v.Targets, row)
	}
}

// noWorseTargets are noWorseTargets measured: the per-round throughput
// ratio X/Ref with its 95% interval, and the CPU difference X − Ref with
// its own.
func (v *reportView) noWorseTargets() {
	pr := v.Paired
	for _, t := range noWorseTargets {
		r, okR := stats.Ratios(pr.RPS[t.x], pr.RPS[t.ref])
		d, okD := pr.between(t.x, t.ref)
		if !okR || !okD {
			continue
		}
		lo, hi := stats.BootstrapMedian(r)
		dlo, dhi := stats.BootstrapMedian(d)
		v.Targets = append(v.Targets, targetRow{Kind: "noworse", What: t.what, X: t.x, Ref: t.ref, Ratio: stats.Median(r), Lo: lo, Hi: hi,
			Limit: 1, Figure: stats.Median(pr.RPS[t.x]), RefFigure: stats.Median(pr.RPS[t.ref]),
			Diff: stats.Median(d), DiffLo: dlo, DiffHi: dhi, Result: metMissed(hi >= 1)})
	}
}

// replicaRows are the replicas section's targets: for each fleet of
// ReplicaFleets, the p99 of its waited writes against its limit, and
// against the floor's p99 in the same run.
func replicaRows(r *ReplicasResult) []targetRow {
	var rows []targetRow
	for _, f := range ReplicaFleets {
		fleet := fmt.Sprintf("%d allotd replicas on %d etcd members, %s simulated xDS clients spread over them",
			ReplicaCount, ReplicaCount, variant.Thousands(f.Clients))
		whats := []string{fmt.Sprintf("%s: write → all-ACK p99 ≤ %s", fleet, limitText(f.TargetP99))}
		if f.TargetRatio > 0 {
			whats = append(whats, fmt.Sprintf("%s: write → all-ACK p99 ≤ %.2f × the bare go-control-plane push's (the floor)", fleet, f.TargetRatio))
		}
		i := -1
		if r != nil {
			i = slices.IndexFunc(r.Fleets, func(s ReplicaSpread) bool { return s.Proxies == f.Clients })
		}
		for k, what := range whats {
			switch {
			case i >= 0 && k == 0:
				s := &r.Fleets[i]
				row := targetRow{Kind: "replicas", What: what, Fleet: s, Limit: s.TargetP99, Result: metMissed(s.P99 <= s.TargetP99)}
				// The floor's own p99 above the limit: no server built on
				// go-control-plane meets it on this machine.
				row.BelowFloor = s.Floor != nil && s.P99 > s.TargetP99 && s.Floor.P99 > s.TargetP99
				rows = append(rows, row)
			case i >= 0 && r.Fleets[i].Floor == nil:
				rows = append(rows, unmeasured(what, "this run has no floor figures"))
			case i >= 0:
				rows = append(rows, replicaFloorRow(what, &r.Fleets[i], f.TargetRatio))
			case r == nil:
				rows = append(rows, unmeasured(what, "run without -skip-extras (or `make bench-replicas`)"))
			case r.NotMeasured != "":
				rows = append(rows, unmeasured(what, r.NotMeasured))
			default:
				rows = append(rows, unmeasured(what, "not among -replica-clients"))
			}
		}
	}
	return rows
}

// replicaFloorRow is a fleet's p99 against the floor's: the ratio of the p99s,
// its 95% interval over the paired rounds (write i and push i), and the
// same for the p50s.
func replicaFloorRow(what string, s *ReplicaSpread, limit float64) targetRow {
	row := targetRow{Kind: "replicas-floor", What: what, Fleet: s, Limit: limit, Figure: s.P99, RefFigure: s.Floor.P99}
	if s.Floor.P99 <= 0 || len(s.AllAck) != len(s.Floor.AllAck) {
		return unmeasured(what, "the floor's pushes do not pair with the writes")
	}
	row.Ratio = s.P99 / s.Floor.P99
	row.Lo, row.Hi = stats.BootstrapQuantileRatio(s.AllAck, s.Floor.AllAck, 0.99)
	row.X50, row.Ref50 = s.P50, s.Floor.P50
	row.Fresh = s.P50 / s.Floor.P50
	row.FloorLo, row.FloorHi = stats.BootstrapQuantileRatio(s.AllAck, s.Floor.AllAck, 0.5)
	row.Result = ratioVerdict(row.Ratio, row.Lo, row.Hi, limit)
	// The replicated floor does only what any control plane of replicas
	// on etcd does for a waited write: when its own p99 is above the
	// limit, decidedly, no such design meets it in this run.
	if r := s.Replicated; r != nil && r.P99 > 0 && len(r.AllAck) == len(s.Floor.AllAck) {
		row.FloorRatio = r.P99 / s.Floor.P99
		row.ReplLo, row.ReplHi = stats.BootstrapQuantileRatio(r.AllAck, s.Floor.AllAck, 0.99)
		row.OverRepl = s.P99 / r.P99
		row.OverReplLo, row.OverReplHi = stats.BootstrapQuantileRatio(s.AllAck, r.AllAck, 0.99)
		row.BelowFloor = row.ReplLo > limit
	}
	return row
}

// limitText is a latency limit as the targets state it: 250 ms, 1 s.
func limitText(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

func unmeasured(what, reason string) targetRow {
	return targetRow{Kind: "unmeasured", What: what, Reason: reason}
}

func rssWhat(who, build string, limit float64) string {
	return fmt.Sprintf("RSS with %s (%s), 1,000 experiments, full cache ≤ A + %.0f MiB (`--concurrency 2`)", who, build, limit)
}

func rssRow(what string, base, rss int64, limit float64) targetRow {
	return targetRow{Kind: "rss", What: what, Base: mib(base), RSS: mib(rss), Limit: limit,
		Result: metMissed(mib(rss) <= mib(base)+limit)}
}

// p99Row is a p99 target from the interleaved slices: the median over the
// rounds of each slice's p99 minus A's of the same round, so that a hiccup
// of the VM, which decides the p99 of the slice it lands in, costs one
// round.
func (v *reportView) p99Row(what, x, ref string, limit float64) (targetRow, bool) {
	pr := v.Paired
	if pr.Latency[x] == nil || pr.Latency[ref] == nil || pr.Latency["A"] == nil {
		return targetRow{}, false
	}
	xp, okX := pr.latAdd(x, "p99")
	rp, okR := pr.latAdd(ref, "p99")
	if !okX || !okR {
		return targetRow{}, false
	}
	xd, _ := pr.latDiffs(x, "p99")
	rd, _ := pr.latDiffs(ref, "p99")
	lo, hi := stats.BootstrapRatio(xd, rd)
	x50, _ := pr.latAdd(x, "p50")
	r50, _ := pr.latAdd(ref, "p50")
	ratio := xp / rp
	return targetRow{Kind: "p99", What: what, X: x, Ref: ref, Figure: xp, RefFigure: rp, Ratio: ratio, Lo: lo, Hi: hi,
		Limit: limit, X50: x50, Ref50: r50, PoolA: pr.Latency["A"]["p99"], PoolX: pr.Latency[x]["p99"],
		PoolRef: pr.Latency[ref]["p99"], Result: ratioVerdict(ratio, lo, hi, limit)}, true
}
