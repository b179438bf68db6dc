// Package report is what the benchmark measured and how it reads: the
// results every scenario fills in (Results, Run, Paired, Memory,
// ReplicasResult, Comparison, VMResults, ...), the statistics on them
// (medians, paired differences with bootstrap intervals, verdicts against
// the targets), and their rendering: bench/REPORT.md from report.md.tmpl
// (RenderReport), and the sections that are written alone (RenderFloors,
// RenderReplicas, RenderCompare, RenderVM).
//
// It starts nothing and measures nothing; it imports variant (what a
// variant is) and bench/stats, never scenario.
package report

import (
	"bytes"
	"cmp"
	_ "embed"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/allotmesh/allot/bench/stats"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/markdown"
)

// The report's prose and layout live in report.md.tmpl; this file computes
// the figures it shows (reportView) and nothing it says.

//go:embed report.md.tmpl
var reportTemplate string

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"mib":   mib,
	"rr":    ratioRange,
	"join":  strings.Join,
	"utc":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"sec":   func(d time.Duration) time.Duration { return d.Round(time.Second) },
	"med":   stats.Median,
	"ops":   MedianOps,
	"ms":    func(ns float64) float64 { return ns / 1e6 },
	"add":   func(a, b float64) float64 { return a + b },
	"sub":   func(a, b float64) float64 { return a - b },
	"mul":   func(a, b float64) float64 { return a * b },
	"minus": func(a, b int64) int64 { return a - b },
	"int64": func(n int) int64 { return int64(n) },
	"int":   func(n int64) int { return int(n) },
	"div":   func(a, b float64) float64 { return a / b },
	"ints":  func(xs []int) string { return variant.JoinInts(xs, " / ") },
	"floats": func(xs []float64) string {
		var parts []string
		for _, x := range xs {
			parts = append(parts, fmt.Sprintf("%.0f", x))
		}
		return strings.Join(parts, " / ")
	},
	"int64s": func(xs []int64) string {
		var parts []string
		for _, x := range xs {
			parts = append(parts, strconv.FormatInt(x, 10))
		}
		return strings.Join(parts, " / ")
	},
	"commas": variant.Thousands,
	// per10k is bytes per 10,000 of n, in MiB.
	"per10k": func(b int64, n int) string { return fmt.Sprintf("%.0f", mib(b)*10000/float64(max(n, 1))) },
}).Parse(reportTemplate))

// RenderReport is bench/REPORT.md.
func RenderReport(res *Results) (string, error) { return fit(renderReport(res)) }

// renderReport is bench/REPORT.md before fit: its tables whole, for tests
// to find a target's row in.
func renderReport(res *Results) (string, error) { return execute("report", newReportView(res)) }

// RenderReplicas is bench/raw/REPLICAS.md, the replicas section alone.
func RenderReplicas(res *Results) (string, error) { return fit(renderReplicas(res)) }

// renderReplicas is bench/raw/REPLICAS.md before fit.
func renderReplicas(res *Results) (string, error) {
	v := &reportView{Results: res}
	v.Targets = replicaRows(res.Replicas)
	return execute("replicas-report", v)
}

// RenderFloors is bench/raw/FLOORS.md, the floors diagnostic's report.
func RenderFloors(res *Results) (string, error) {
	v := newReportView(res)
	v.Diagnostic = true
	return fit(execute("floors-report", v))
}

// blankLines are the runs of blank lines an optional section leaves behind.
var blankLines = regexp.MustCompile(`\n{3,}`)

func execute(name string, data any) (string, error) {
	var b bytes.Buffer
	if err := reportTmpl.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("render %s: %w", name, err)
	}
	return blankLines.ReplaceAllString(b.String(), "\n\n"), nil
}

// fit is a rendered report as written: prose wrapped, wide tables as lists.
func fit(md string, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return markdown.Fit(md, width, maxLine), nil
}

// A report's prose wraps at width; a table with a row over maxLine (make
// lint's bound on a Markdown line) is rendered as a list.
const width, maxLine = 118, 300

// stat collects one figure of one variant across rounds, raw and against
// the baseline (variant A) of the same round.
type stat struct{ vals, ratio, diff []float64 }

func (s stat) med() float64 { return stats.Median(s.vals) }

func (s stat) ratioM() float64 { return stats.Median(s.ratio) }

func (s stat) diffM() float64 { return stats.Median(s.diff) }

// collect returns, per variant, the statistic f over the rounds.
func collect(res *Results, f func(Run) float64) map[string]stat {
	base := map[int]float64{}
	for _, r := range res.Runs {
		if r.Variant == "A" {
			base[r.Round] = f(r)
		}
	}
	out := map[string]stat{}
	for _, r := range res.Runs {
		s := out[r.Variant]
		v := f(r)
		s.vals = append(s.vals, v)
		if b, ok := base[r.Round]; ok {
			if b != 0 {
				s.ratio = append(s.ratio, v/b)
			}
			s.diff = append(s.diff, v-b)
		}
		out[r.Variant] = s
	}
	return out
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// costSpec is a row of a cost table (stickyRows, observeRows): variant x
// against the baseline base measured in the same interleaved rounds, with
// the same 50 experiments and requests but for what the row changes, on
// one artifact. A row without a baseline states x alone.
type costSpec struct{ artifact, what, x, base string }

// stickyRows are what sticky bucketing costs each artifact (#23). The
// issue sets no limit on them: they are reported, not judged.
var stickyRows = []costSpec{
	{"Wasm", "no sticky cookie: the proxy_on_response_headers export, which every stream crosses (G, the default build, against Y, the same module built without the export)", "G", "Y"},
	{"Wasm", "returning units, warm cache: every request carries its unit's valid cookie (V against G)", "V", "G"},
	{"Wasm", "returning units, cache missing: the cookie verified and decoded and the experiments evaluated sticky on every request (W against H)", "W", "H"},
	{"Wasm", "new units: no cookie, every response sets one (X against H)", "X", "H"},
	{"native", "no sticky cookie: the configuration's streams keep no state, and the response hook is C that returns at once — no stream enters Go for its response; Envoy requires the hook, so there is no build without it (Q, over A)", "Q", ""},
	{"native", "returning units, warm cache (v against Q)", "v", "Q"},
	{"native", "returning units, cache missing (w against R)", "w", "R"},
	{"native", "new units: every response sets a cookie, from the stream's C state (x against R)", "x", "R"},
}

// warmRows are what the native module's warm path (#37) changes: each of
// Q–T, the path on, against the same variant with it off (q–t), in the
// same rounds.
var warmRows = []costSpec{
	{"native", "every header, warm cache (Q against q)", "Q", "q"},
	{"native", "every header, cold cache (R against r)", "R", "r"},
	{"native", "lean, warm cache (S against s)", "S", "s"},
	{"native", "lean, cold cache (T against t)", "T", "t"},
}

// reportView is everything the template shows, computed.
type reportView struct {
	*Results
	Targets []targetRow
	Floors  []floorRow
	// Counterparts compares each floor with its native counterpart (M).
	Counterparts []counterpart
	Twins        []twinRow
	Sticky       []stickyRow
	// Warm are warmRows measured; Proxied is the proxied pair (a, p).
	Warm    []stickyRow
	Proxied *proxiedRow
	Observe []observeRow
	// OFREP are ofrepRows measured.
	OFREP []costRow
	// ObservedKeys are the observe variants' observed experiments.
	ObservedKeys string
	// NativeFloor is N − O: Go's runtime and cgo over C for the same work.
	NativeFloor *twinRow
	Rounds      []roundRow
	AuthzCPU    float64
	Latency     []latencyRow
	Unsustained []string
	PacerLag    float64
	Interleaved []interleavedRow
	Pooled      []pooledRow
	Profiles    []profileRow
	ModuleRatio float64 // Allot's Wasm module's size over E's
	// Resamples, WarmIDs, StickyPool, SecondPass and SecondPassUnits are
	// constants the prose quotes.
	Resamples, WarmIDs, StickyPool, SecondPass, SecondPassUnits int
	// Diagnostic: the floors diagnostic's report, which has no targets.
	Diagnostic bool
}

type floorRow struct {
	// Ref is the minimal filter the floor builds on (E or N): the × column.
	X, Floor, Ref string
	// RPSA is the floor's max throughput × A, with its 95% interval.
	RPSA, RPSALo, RPSAHi     float64
	FloorAdd, FloorE, Lo, Hi float64
	XAdd, XE                 float64
	Own, OwnLo, OwnHi, OwnE  float64
	// Limit is the own-work target's, × E (HasLimit: there is one).
	Limit, E float64
	HasLimit bool
}

type counterpart struct {
	ID, Of                     string
	Add, AddE, AddLo, AddHi    float64
	Wasm, WasmLo, WasmHi       float64
	Excess, ExcessLo, ExcessHi float64
	Resolved                   bool
}

type twinRow struct {
	Wasm, Native         string
	WasmAdd, NatAdd      float64
	Diff, Lo, Hi         float64
	WasmRPS, NatRPS      float64
	NatA, NatALo, NatAHi float64 // native's throughput × A
}

// costRow is a costSpec measured.
type costRow struct {
	Artifact, What, X, Base string
	XAdd, BaseAdd           float64
	// X − Base per round: the median and its 95% interval.
	Diff, Lo, Hi float64
	// X's addition over A to Base's, with its 95% interval (HasRatio:
	// Base adds something).
	Ratio, RatioLo, RatioHi float64
	HasRatio                bool
	// X's closed-loop throughput to Base's, per round: the median and its
	// 95% interval.
	RPS, RPSLo, RPSHi float64
}

// stickyRow is one of stickyRows, measured.
type stickyRow struct {
	costRow
	// Of X's evaluated requests: the share that hit the cache, and the
	// cookies set per request (HasCounters: the run read them).
	Hits, Written float64
	Invalid       int64
	HasCounters   bool
}

type roundRow struct {
	ID                           string
	RPS, RPSA, CPU, Add, XE, RSS float64
	HasXE                        bool
}

type latencyRow struct {
	ID                                             string
	P50, P90, P99, P999, Add50, Add99, Add999, Ach float64
	RateCPU                                        float64
}

type interleavedRow struct {
	ID               string
	CPU, Add, Lo, Hi float64
	XE               string
	Interval         string
	RPS, RPSA        float64
}

type pooledRow struct {
	ID                                        string
	Requests                                  int
	Late                                      uint64
	P50, P90, P99, P999, Add50, Add99, Add999 float64
}

type profileRow struct {
	Experiments    int
	Conf           string
	Headers, Calls float64
	ByCall         string
}

func newReportView(res *Results) *reportView {
	v := &reportView{Results: res, Resamples: stats.Resamples, WarmIDs: variant.WarmIDs, StickyPool: variant.StickyPool, ObservedKeys: observedNames(),
		SecondPass: SecondPass, SecondPassUnits: SecondPassUnits}
	v.targets()
	v.floors()
	v.twins()
	v.sticky()
	v.warm()
	v.proxied()
	v.observe()
	v.ofrep()
	v.rounds()
	v.interleaved()
	for _, hp := range res.Profiles {
		var calls []string
		for _, k := range slices.Sorted(maps.Keys(hp.HostCalls)) {
			calls = append(calls, fmt.Sprintf("%s %.2f", k, hp.HostCalls[k]))
		}
		conf := "default"
		if hp.Lean {
			conf = "lean (I, J)"
		}
		v.Profiles = append(v.Profiles, profileRow{hp.Experiments, conf, hp.HeadersAdded, hp.TotalCalls, strings.Join(calls, ", ")})
	}
	if m := res.Micro; m != nil && m.MinWasmBytes > 0 {
		v.ModuleRatio = float64(m.WasmBytes) / float64(m.MinWasmBytes)
	}
	return v
}

// floors compares each Allot variant with its floor variant (the same
// writes from the minimal filter, none of Allot's work), and each floor
// with its native counterpart.
func (v *reportView) floors() {
	pr := v.Paired
	if pr == nil {
		return
	}
	for _, f := range v.Variants {
		ref := cmp.Or(f.FloorRef, "E")
		e, okE := pr.Add(ref)
		fl, okF := pr.Add(f.ID)
		for _, of := range f.FloorOf {
			id := string(of)
			x, okX := pr.Add(id)
			own, okO := pr.between(id, f.ID)
			if !okE || e <= 0 || !okF || !okX || !okO {
				continue
			}
			lo, hi, _ := pr.ratioCI(f.ID, ref)
			olo, ohi := stats.BootstrapMedian(own)
			row := floorRow{X: id, Floor: f.ID, Ref: ref, FloorAdd: fl, FloorE: fl / e, Lo: lo, Hi: hi, XAdd: x, XE: x / e,
				Own: stats.Median(own), OwnLo: olo, OwnHi: ohi, OwnE: stats.Median(own) / e, E: e}
			if r, ok := stats.Ratios(pr.RPS[f.ID], pr.RPS["A"]); ok {
				row.RPSA = stats.Median(r)
				row.RPSALo, row.RPSAHi = stats.BootstrapMedian(r)
			}
			for _, t := range ownTargets {
				if t.x == id && t.floor == f.ID {
					row.Limit, row.HasLimit = t.limit, true
				}
			}
			v.Floors = append(v.Floors, row)
		}
	}
	e, okE := pr.Add("E")
	if !okE || e <= 0 {
		return
	}
	for _, n := range v.Variants {
		if n.NativeOf == "" {
			continue
		}
		m, okM := pr.diffs(n.ID)
		// Per round: the writes made from Wasm beyond E's one header, and
		// how much more that is than M's native writes.
		wasm, okW := pr.between(n.NativeOf, "E")
		excess, okX := stats.RoundDiffs(wasm, m)
		if !okM || !okW || !okX {
			continue
		}
		c := counterpart{ID: n.ID, Of: n.NativeOf, Add: stats.Median(m), AddE: stats.Median(m) / e, Wasm: stats.Median(wasm), Excess: stats.Median(excess)}
		c.AddLo, c.AddHi = stats.BootstrapMedian(m)
		c.WasmLo, c.WasmHi = stats.BootstrapMedian(wasm)
		c.ExcessLo, c.ExcessHi = stats.BootstrapMedian(excess)
		c.Resolved = c.ExcessLo > 0
		v.Counterparts = append(v.Counterparts, c)
	}
}

// twins compares each dynamic-module variant with the Wasm variant doing
// the same work, and the Go module N with the C one O.
func (v *reportView) twins() {
	pr := v.Paired
	if pr == nil {
		return
	}
	twin := func(wasm, native string) (twinRow, bool) {
		d, ok := pr.between(native, wasm)
		if !ok {
			return twinRow{}, false
		}
		w, _ := pr.Add(wasm)
		n, _ := pr.Add(native)
		lo, hi := stats.BootstrapMedian(d)
		row := twinRow{Wasm: wasm, Native: native, WasmAdd: w, NatAdd: n, Diff: stats.Median(d), Lo: lo, Hi: hi,
			WasmRPS: stats.Median(pr.RPS[wasm]), NatRPS: stats.Median(pr.RPS[native])}
		if r, ok := stats.Ratios(pr.RPS[native], pr.RPS["A"]); ok {
			row.NatA = stats.Median(r)
			row.NatALo, row.NatAHi = stats.BootstrapMedian(r)
		}
		return row, true
	}
	for _, n := range v.Variants {
		if n.WasmTwin == "" {
			continue
		}
		if r, ok := twin(n.WasmTwin, n.ID); ok {
			v.Twins = append(v.Twins, r)
		}
	}
	if r, ok := twin("O", "N"); ok {
		v.NativeFloor = &r
	}
}

// costRow measures t: false unless the run measured its variant (and its
// baseline, when it has one) in the interleaved section.
func (v *reportView) costRow(t costSpec) (costRow, bool) {
	pr := v.Paired
	if pr == nil {
		return costRow{}, false
	}
	x, ok := pr.Add(t.x)
	if !ok || !v.Has(t.x) || t.base != "" && !v.Has(t.base) {
		return costRow{}, false
	}
	row := costRow{Artifact: t.artifact, What: t.what, X: t.x, Base: t.base, XAdd: x}
	if t.base == "" {
		return row, true
	}
	d, ok := pr.between(t.x, t.base)
	if !ok {
		return costRow{}, false
	}
	row.BaseAdd, _ = pr.Add(t.base)
	row.Diff = stats.Median(d)
	row.Lo, row.Hi = stats.BootstrapMedian(d)
	if row.BaseAdd > 0 {
		row.Ratio, row.HasRatio = x/row.BaseAdd, true
		row.RatioLo, row.RatioHi, _ = pr.ratioCI(t.x, t.base)
	}
	if r, ok := stats.Ratios(pr.RPS[t.x], pr.RPS[t.base]); ok {
		row.RPS = stats.Median(r)
		row.RPSLo, row.RPSHi = stats.BootstrapMedian(r)
	}
	return row, true
}

// sticky are the stickiness rows the run measured; none unless it measured
// a variant against its baseline.
func (v *reportView) sticky() { v.Sticky = v.counted(stickyRows) }

// warm are the warm path's rows the run measured; none unless it measured
// a variant against its baseline.
func (v *reportView) warm() { v.Warm = v.counted(warmRows) }

// counted are the rows of specs the run measured, each with Allot's
// counters; none unless it measured a variant against its baseline.
func (v *reportView) counted(specs []costSpec) []stickyRow {
	var rows []stickyRow
	against := false
	for _, t := range specs {
		c, ok := v.costRow(t)
		if !ok {
			continue
		}
		against = against || c.Base != ""
		row := stickyRow{costRow: c}
		cs := v.Paired.Counters[t.x]
		if n := cs["cache_hits"] + cs["cache_misses"]; n > 0 {
			row.HasCounters = true
			row.Hits = float64(cs["cache_hits"]) / float64(n)
			row.Written = float64(cs["sticky_cookie_written"]) / float64(n)
			row.Invalid = cs["sticky_cookie_invalid"]
		}
		rows = append(rows, row)
	}
	if !against {
		return nil
	}
	return rows
}

// proxiedRow is the proxied pair: A and Q routed to an upstream (a, p).
type proxiedRow struct {
	// Bare and Allot are a's and p's Envoy CPU per request (medians),
	// BareUpstream and Upstream their upstreams'; Add is p − a per round
	// (median, 95% interval).
	Bare, Allot, BareUpstream, Upstream, Add, AddLo, AddHi float64
	// ShareEnvoy is Add over p's Envoy CPU, ShareTotal over p's Envoy and
	// upstream CPU together.
	ShareEnvoy, ShareTotal float64
	// BareRPS and AllotRPS are the closed-loop throughputs (medians), RPS
	// p/a per round (median, 95% interval).
	BareRPS, AllotRPS, RPS, RPSLo, RPSHi float64
	// Direct is Q − A per round in the same rounds (HasDirect: both were
	// measured): Allot's addition without an upstream.
	Direct    float64
	HasDirect bool
}

// proxied is the proxied pair, when the run measured both.
func (v *reportView) proxied() {
	pr := v.Paired
	if pr == nil || !v.Has("a") || !v.Has("p") {
		return
	}
	d, okD := pr.between("p", "a")
	r, okR := stats.Ratios(pr.RPS["p"], pr.RPS["a"])
	if !okD || !okR {
		return
	}
	row := &proxiedRow{Bare: stats.Median(pr.CPU["a"]), Allot: stats.Median(pr.CPU["p"]),
		BareUpstream: stats.Median(pr.UpstreamCPU["a"]), Upstream: stats.Median(pr.UpstreamCPU["p"]),
		Add: stats.Median(d), BareRPS: stats.Median(pr.RPS["a"]), AllotRPS: stats.Median(pr.RPS["p"]), RPS: stats.Median(r)}
	row.AddLo, row.AddHi = stats.BootstrapMedian(d)
	row.RPSLo, row.RPSHi = stats.BootstrapMedian(r)
	if row.Allot > 0 {
		row.ShareEnvoy = row.Add / row.Allot
		row.ShareTotal = row.Add / (row.Allot + row.Upstream)
	}
	if q, ok := pr.Add("Q"); ok {
		row.Direct, row.HasDirect = q, true
	}
	v.Proxied = row
}

// rounds are the fresh-Envoy rounds' tables.
func (v *reportView) rounds() {
	res := v.Results
	cpu := collect(res, func(r Run) float64 { return r.CPUPerReq })
	rps := collect(res, func(r Run) float64 { return r.MaxRPS })
	rss := collect(res, func(r Run) float64 { return mib(r.RSS) })
	qs := map[string]map[string]stat{}
	for _, q := range Quantiles {
		qs[q.Name] = collect(res, func(r Run) float64 { return r.Quantiles[q.Name] })
	}
	rateCPU := collect(res, func(r Run) float64 { return r.RateCPU })
	ach := collect(res, func(r Run) float64 { return r.RateAchieved })
	e := cpu["E"].diffM()
	for _, vi := range res.Variants {
		if vi.InterleavedOnly() || len(cpu[vi.ID].vals) == 0 {
			continue
		}
		c := cpu[vi.ID]
		row := roundRow{ID: vi.ID, RPS: rps[vi.ID].med(), RPSA: rps[vi.ID].ratioM(), CPU: c.med(), Add: c.diffM(), RSS: rss[vi.ID].med()}
		if e > 0 && vi.ID != "A" {
			row.XE, row.HasXE = c.diffM()/e, true
		}
		v.Rounds = append(v.Rounds, row)
		v.Latency = append(v.Latency, latencyRow{ID: vi.ID, P50: qs["p50"][vi.ID].med(), P90: qs["p90"][vi.ID].med(),
			P99: qs["p99"][vi.ID].med(), P999: qs["p99.9"][vi.ID].med(), Add50: qs["p50"][vi.ID].diffM(),
			Add99: qs["p99"][vi.ID].diffM(), Add999: qs["p99.9"][vi.ID].diffM(), Ach: ach[vi.ID].med(), RateCPU: rateCPU[vi.ID].med()})
	}
	for _, r := range res.Runs {
		if r.Variant == "D" && r.AuthzCPU > 0 {
			v.AuthzCPU = collect(res, func(r Run) float64 { return r.AuthzCPU })["D"].med()
			break
		}
	}
	for _, r := range res.Runs {
		if r.RateErrors > 0 {
			v.Unsustained = append(v.Unsustained, fmt.Sprintf("%s (round %d: %d requests not completed)", r.Variant, r.Round, r.RateErrors))
		}
	}
	v.PacerLag = collect(res, func(r Run) float64 { return r.PacerLag })["A"].med()
}

// interleaved are the interleaved section's tables.
func (v *reportView) interleaved() {
	pr := v.Paired
	if pr == nil {
		return
	}
	e, _ := pr.Add("E")
	for _, vi := range v.Variants {
		vals, ok := pr.CPU[vi.ID]
		if !ok {
			continue
		}
		x, _ := pr.Add(vi.ID)
		lo, hi := pr.spread(vi.ID)
		row := interleavedRow{ID: vi.ID, CPU: stats.Median(vals), Add: x, Lo: lo, Hi: hi, XE: "–", Interval: "–", RPS: stats.Median(pr.RPS[vi.ID])}
		if r, ok := stats.Ratios(pr.RPS[vi.ID], pr.RPS["A"]); ok {
			row.RPSA = stats.Median(r)
		}
		if vi.ID != "A" && e > 0 {
			row.XE = fmt.Sprintf("%.2f", x/e)
			if rlo, rhi, ok := pr.ratioCI(vi.ID, "E"); ok && vi.ID != "E" {
				row.Interval = ratioRange(rlo, rhi)
			}
		}
		v.Interleaved = append(v.Interleaved, row)
	}
	a := pr.Latency["A"]
	if a == nil {
		return
	}
	for _, vi := range v.Variants {
		l, ok := pr.Latency[vi.ID]
		if !ok {
			continue
		}
		v.Pooled = append(v.Pooled, pooledRow{ID: vi.ID, Requests: pr.Samples[vi.ID], Late: pr.Late[vi.ID],
			P50: l["p50"], P90: l["p90"], P99: l["p99"], P999: l["p99.9"],
			Add50: l["p50"] - a["p50"], Add99: l["p99"] - a["p99"], Add999: l["p99.9"] - a["p99.9"]})
	}
}

// Has says whether the run measured variant id.
func (v *reportView) Has(id string) bool {
	return slices.ContainsFunc(v.Variants, func(x variant.Info) bool { return x.ID == id })
}
