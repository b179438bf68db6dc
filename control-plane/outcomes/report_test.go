package outcomes

import (
	"testing"
	"time"

	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/allotmesh/allot/filter/wire"
)

// TestSeries: a report's series has one entry per minute of the window
// since the revision, oldest first, each at its minute's start, every
// variation in each (an empty minute with zero requests), with the
// minute's requests, error rate and latency; the window is its sum.
func TestSeries(t *testing.T) {
	f := newFixture(t, checkout) // since 00:00:30
	f.add(t, "p1", counter(name(0, "2xx"), 30), counter(name(1, "5xx"), 5), counter(name(1, "2xx"), 15), histogram(latency(0), 30, 0, 0))
	f.clock.Add(2 * time.Minute) // 00:01 has nothing
	f.add(t, "p1", counter(name(0, "2xx"), 4), counter(name(0, "aborted"), 1), histogram(latency(0), 0, 0, 4))

	minute := func(m int) time.Time { return time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC) }
	type point struct {
		requests int64
		errors   float64
		p95      float64 // 0: no latency
	}
	for _, tt := range []struct {
		name    string
		minutes int
		first   int // the first entry's minute
		want    [][2]point
	}{
		// p95 interpolates within the bucket: 30 samples in (5, 10] ms
		// give 5 + 5×28.5/30 = 9.75; 4 in (100, 250] give
		// 100 + 150×3.8/4 = 242.5. The window reaches before the
		// revision: the series starts at since's minute.
		// The aborted request is a request, not an error.
		{"since the revision", 5, 0, [][2]point{{{30, 0, 9.75}, {20, 0.25, 0}}, {}, {{5, 0, 242.5}, {}}}},
		{"the last two minutes", 2, 1, [][2]point{{}, {{5, 0, 242.5}, {}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.report(t, "checkout", tt.minutes)
			if len(r.Series) != len(tt.want) {
				t.Fatalf("%d minutes in the series, want %d: %v", len(r.Series), len(tt.want), r.Series)
			}
			var sum [2]int64
			for i, m := range r.Series {
				if got, want := m.GetStart().AsTime(), minute(tt.first+i); !got.Equal(want) {
					t.Errorf("minute %d starts at %v, want %v", i, got, want)
				}
				if len(m.Variations) != 2 {
					t.Fatalf("minute %d: %d variations, want 2", i, len(m.Variations))
				}
				for v, o := range m.Variations {
					w := tt.want[i][v]
					p95 := 0.0
					if o.LatencyMs != nil {
						p95 = o.LatencyMs.P95
					}
					if o.Variation != int32(v) || o.Requests != w.requests || o.ErrorRate != w.errors || p95 != w.p95 {
						t.Errorf("minute %d variation %d: %d requests, error rate %v, p95 %v; want %+v", i, v, o.Requests, o.ErrorRate, p95, w)
					}
					sum[v] += o.Requests
				}
			}
			for v := range 2 {
				if r.Window[v].Requests != sum[v] {
					t.Errorf("variation %d: window %d requests, the series' sum %d", v, r.Window[v].Requests, sum[v])
				}
			}
		})
	}
}

// many is an observed experiment of 64 variations, the most one can have.
var many = func() string {
	spec := `{"key":"many","observe":true,"variations":[`
	for i := range 64 {
		if i > 0 {
			spec += ","
		}
		spec += `"v` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `"`
	}
	return spec + `],"assignmentRevision":1}`
}()

// TestSeriesBounded: after longer than the ring of minutes, a report of
// MaxWindowMinutes has exactly MaxWindowMinutes minutes of 64 variations,
// the current one last, and no minute of the ring's previous turn.
func TestSeriesBounded(t *testing.T) {
	f := newFixture(t, many)
	f.add(t, "p1", counter("wasmcustom."+wire.OutcomeMetric("many", 1, 3, wire.Class2xx), 7)) // at 00:00, the slot of 01:01
	f.clock.Add(61 * time.Minute)
	r := f.report(t, "many", MaxWindowMinutes)
	if len(r.Series) != MaxWindowMinutes {
		t.Fatalf("%d minutes, want %d", len(r.Series), MaxWindowMinutes)
	}
	last := r.Series[len(r.Series)-1]
	if got, want := last.GetStart().AsTime(), time.Date(2026, 1, 1, 1, 1, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("the last minute starts at %v, want %v (the current one)", got, want)
	}
	for _, m := range r.Series {
		if len(m.Variations) != 64 {
			t.Fatalf("%v: %d variations, want 64", m.GetStart().AsTime(), len(m.Variations))
		}
		if m.Variations[3].Requests != 0 {
			t.Errorf("%v: %d requests of 61 minutes ago", m.GetStart().AsTime(), m.Variations[3].Requests)
		}
	}
	if r.Total[3].Requests != 7 || r.Window[3].Requests != 0 {
		t.Errorf("total %d, window %d, want 7, 0", r.Total[3].Requests, r.Window[3].Requests)
	}
}

// BenchmarkReportSeries: the largest report (MaxWindowMinutes minutes of
// 64 variations, each with responses and latency), which holds the
// aggregation lock while it is built.
func BenchmarkReportSeries(b *testing.B) {
	f := newFixture(b, many)
	for range MaxWindowMinutes {
		for v := range 64 {
			f.a.Add(b.Context(), "p1", "", []*metricsv1.Metric{
				counter("wasmcustom."+wire.OutcomeMetric("many", 1, v, wire.Class2xx), 10),
				histogram("wasmcustom."+wire.OutcomeMetric("many", 1, v, wire.Latency), 5, 4, 1)})
		}
		f.clock.Add(time.Minute)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.a.Report(b.Context(), "many", MaxWindowMinutes); err != nil {
			b.Fatal(err)
		}
	}
}
