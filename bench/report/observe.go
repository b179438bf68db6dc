package report

import (
	"strconv"
	"strings"

	"github.com/allotmesh/allot/bench/variant"
)

// The observe rows (#35): what `observe: true` costs per request, in each
// artifact — G's 50 experiments with 5 of them observed (Z, z), each set
// against G's configuration with none observed (G, Q) in the same
// interleaved rounds. The baseline is the configuration of experiments
// that do not ask, so the rows are also how a mesh reads "no cost for
// experiments that do not ask" (bench/README.md).

// ObservedStats are what an Allot variant's Envoy lists of outcomes:
// the proof that an observe row measured its scenario and its baseline
// none.
type ObservedStats struct {
	// Sent is how many requests the variant was sent in the section,
	// pre-flight and warm-up included.
	Sent int64 `json:"sent"`
	// Stats is how many outcome counters Envoy lists.
	Stats int `json:"stats"`
	// Responses[key] are the responses counted over experiment key's
	// variations and classes; OK those counted 2xx.
	Responses map[string]int64 `json:"responses,omitempty"`
	OK        int64            `json:"ok"`
	// Unrecorded is allot.outcomes_unrecorded; HasUnrecorded says Envoy
	// lists it (defined only with an observed experiment).
	Unrecorded    int64 `json:"unrecorded"`
	HasUnrecorded bool  `json:"has_unrecorded"`
}

// Total is every response counted, over the observed experiments.
func (o ObservedStats) Total() int64 {
	var n int64
	for _, v := range o.Responses {
		n += v
	}
	return n
}

// observeRows are what observing outcomes costs each artifact (#35): the
// variant with 5 of its 50 experiments observed against G's configuration,
// where none is, in the same interleaved rounds. The requirement
// is that experiments that do not ask cost nothing: the baseline is that
// configuration, and the rows are reported, not judged.
var observeRows = []costSpec{
	{"Wasm", "5 of the 50 experiments observed: a clock read at the request, then at the response a `:status` read, a clock read and a histogram sample per observed assignment (Z against G)", "Z", "G"},
	{"native", "the same configuration: the observed stat ids copied into the stream's C state (one cgo call, one malloc) at the request, the response counted and timed in C (z against Q)", "z", "Q"},
}

// observeRow is one of observeRows, measured.
type observeRow struct {
	costRow
	// HasStats: the run read the variant's and the baseline's outcome
	// stats at the end of the section.
	HasStats bool
	// PerSent is observedKey's responses per request sent to the variant
	// (every request is in it: 1.00 when every outcome was counted);
	// PerRequest the observed outcomes per request, over the five; OK the
	// share of them that were 2xx.
	PerSent, PerRequest, OK float64
	Stats, BaseStats        int
	Unrecorded              int64
}

// observe are the observe rows the run measured.
func (v *reportView) observe() {
	for _, t := range observeRows {
		c, ok := v.costRow(t)
		if !ok || c.Base == "" {
			continue
		}
		row := observeRow{costRow: c}
		x, okX := v.Paired.Observed[t.x]
		b, okB := v.Paired.Observed[t.base]
		if okX && okB && x.Sent > 0 {
			row.HasStats = true
			row.PerSent = float64(x.Responses[variant.ObservedKey]) / float64(x.Sent)
			row.PerRequest = float64(x.Total()) / float64(x.Sent)
			if n := x.Total(); n > 0 {
				row.OK = float64(x.OK) / float64(n)
			}
			row.Stats, row.BaseStats, row.Unrecorded = x.Stats, b.Stats, x.Unrecorded
		}
		v.Observe = append(v.Observe, row)
	}
}

// observedNames are the observed experiments as the report lists them.
func observedNames() string {
	var q []string
	for _, k := range variant.ObservedKeys {
		q = append(q, strconv.Quote(k))
	}
	return strings.Join(q, ", ")
}
