package plugin_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/wire"
)

// observedConfig has an observed experiment that serves every unit
// variation 1 and an experiment that does not observe.
const observedConfig = `{"experiments": [
	{"key": "watched", "variations": ["a", "b"], "force": 1, "observe": true, "assignmentRevision": 3},
	{"key": "plain", "variations": ["x", "y"], "force": 0}]}`

// TestOutcomesPerVariation: each response to a request an observed
// experiment assigned is counted once in its variation's class — 2xx, 3xx,
// 4xx, 5xx by :status, other for anything else, aborted for a stream that
// ended without response headers — and each response's milliseconds from
// request to response headers are one histogram sample. The experiment
// that does not observe has no outcome stats.
func TestOutcomesPerVariation(t *testing.T) {
	h, p, root := start(t, observedConfig)
	h.Clock = 1_000_000_000
	h.BeforeResponse = func() { h.Clock += 7_000_000 } // 7 ms
	req := [][2]string{{":path", "/"}, {"x-user-id", "u1"}}
	statuses := []string{"200", "204", "302", "404", "503", "502", "101"}
	for _, s := range statuses {
		if _, _, err := h.Exchange(p, root, req, [][2]string{{":status", s}}); err != nil {
			t.Fatal(err)
		}
	}
	h.Reset(p, root, req)
	p.OnTick(root)

	want := map[string]int64{"2xx": 2, "3xx": 1, "4xx": 1, "5xx": 2, "other": 1, "aborted": 1}
	for class := range wire.NumClasses {
		name := wire.OutcomeMetric("watched", 3, 1, class)
		m, ok := h.Metrics[name]
		if !ok || m.Type != abi.MetricCounter {
			t.Fatalf("%s: not defined as a counter (%+v)", name, m)
		}
		if m.Value != want[wire.ClassName(class)] {
			t.Errorf("%s = %d, want %d", name, m.Value, want[wire.ClassName(class)])
		}
		if v := h.Counter(wire.OutcomeMetric("watched", 3, 0, class)); v != 0 {
			t.Errorf("%s = %d, want 0 (no unit in variation 0)", wire.OutcomeMetric("watched", 3, 0, class), v)
		}
	}
	lat := h.Metrics[wire.OutcomeMetric("watched", 3, 1, wire.Latency)]
	if lat == nil || lat.Type != abi.MetricHistogram {
		t.Fatalf("%s: not defined as a histogram (%+v)", wire.OutcomeMetric("watched", 3, 1, wire.Latency), lat)
	}
	if wantSamples := slices.Repeat([]uint64{7}, len(statuses)); !slices.Equal(lat.Samples, wantSamples) {
		t.Errorf("latency samples %v, want %v (one per response, none for the aborted request)", lat.Samples, wantSamples)
	}
	for name := range h.Metrics {
		if strings.HasPrefix(name, "allot.experiment.plain.") && strings.Contains(name, "response") {
			t.Errorf("%s defined for an experiment that does not observe", name)
		}
	}
	if n := p.Waiting(); n != 0 {
		t.Errorf("%d streams still observed after they ended", n)
	}
}

// TestNothingObservedCostsNothing: without an observed experiment a
// stream's response makes no host call and no outcome stat exists.
func TestNothingObservedCostsNothing(t *testing.T) {
	h, p, root := start(t, strings.Replace(observedConfig, `"observe": true`, `"observe": false`, 1))
	h.Trace = true
	if _, _, err := h.Exchange(p, root, [][2]string{{"x-user-id", "u1"}}, [][2]string{{":status", "503"}}); err != nil {
		t.Fatal(err)
	}
	h.Reset(p, root, [][2]string{{"x-user-id", "u1"}})
	for _, c := range h.Calls {
		switch c {
		case "proxy_get_header_map_value", "proxy_get_current_time_nanoseconds", "proxy_record_metric":
			t.Errorf("%s called without an observed experiment (calls %v)", c, h.Calls)
		}
	}
	for name := range h.Metrics {
		if strings.Contains(name, ".response") {
			t.Errorf("%s defined without an observed experiment", name)
		}
	}
}

// TestOutcomesHostFailures: a failure to read the response's status or the
// clock costs only the class (other) or the latency sample; a request
// that failed open is not observed.
func TestOutcomesHostFailures(t *testing.T) {
	h, p, root := start(t, observedConfig)
	req := [][2]string{{"x-user-id", "u1"}}
	h.Inject(fakehost.Fault{Call: "proxy_get_header_map_value"})
	h.Exchange(p, root, req, [][2]string{{":status", "200"}})
	h.Inject(fakehost.Fault{Call: "proxy_get_current_time_nanoseconds", Panic: true})
	h.Exchange(p, root, req, [][2]string{{":status", "200"}})
	h.Inject(fakehost.Fault{Call: "proxy_add_header_map_value"}) // the request fails open
	h.Exchange(p, root, req, [][2]string{{":status", "200"}})
	h.Fail = nil
	p.OnTick(root)
	if got := h.Counter(wire.OutcomeMetric("watched", 3, 1, wire.ClassOther)); got != 1 {
		t.Errorf("other = %d, want 1 (the status read failed)", got)
	}
	if got := h.Counter(wire.OutcomeMetric("watched", 3, 1, wire.Class2xx)); got != 1 {
		t.Errorf("2xx = %d, want 1 (the clock failed, the class did not; the failed-open request is not observed)", got)
	}
	if n := len(h.Metrics[wire.OutcomeMetric("watched", 3, 1, wire.Latency)].Samples); n != 1 {
		t.Errorf("%d latency samples, want 1 (only the response whose clock reads succeeded)", n)
	}
}

// TestOutcomesCountInTheirRevision: outcome stats carry the assignment
// revision (modulo wire.RevisionSlots), and a response to a request assigned
// before its root was reconfigured to another revision counts in the
// stats of the revision that assigned it, at once.
func TestOutcomesCountInTheirRevision(t *testing.T) {
	if got, want := wire.OutcomeMetric("k", 35, 1, wire.Class5xx), "allot.experiment.k.rev.3.variation.1.response.5xx"; got != want {
		t.Errorf("wire.OutcomeMetric(rev 35) = %q, want %q", got, want)
	}
	if got, want := wire.OutcomeMetric("k", 2, 0, wire.Latency), "allot.experiment.k.rev.2.variation.0.response_time_ms"; got != want {
		t.Errorf("latency stat = %q, want %q", got, want)
	}
	h, p, root := start(t, observedConfig)
	next := strings.Replace(observedConfig, `"assignmentRevision": 3`, `"assignmentRevision": 4`, 1)
	h.Clock = 1_000_000_000
	h.BeforeResponse = func() {
		h.Clock += 9_000_000
		if !h.Configure(p, root, []byte(next)) {
			t.Fatalf("reconfiguration refused: %v", h.Logs)
		}
	}
	req := [][2]string{{"x-user-id", "u1"}}
	if _, _, err := h.Exchange(p, root, req, [][2]string{{":status", "503"}}); err != nil {
		t.Fatal(err)
	}
	h.BeforeResponse = nil
	if _, _, err := h.Exchange(p, root, req, [][2]string{{":status", "200"}}); err != nil {
		t.Fatal(err)
	}
	p.OnTick(root)
	for _, c := range []struct {
		rev   int64
		class int
		want  int64
	}{{3, wire.Class5xx, 1}, {3, wire.Class2xx, 0}, {4, wire.Class5xx, 0}, {4, wire.Class2xx, 1}} {
		if got := h.Counter(wire.OutcomeMetric("watched", c.rev, 1, c.class)); got != c.want {
			t.Errorf("revision %d %s = %d, want %d", c.rev, wire.ClassName(c.class), got, c.want)
		}
	}
	if lat := h.Metrics[wire.OutcomeMetric("watched", 3, 1, wire.Latency)]; lat == nil || !slices.Equal(lat.Samples, []uint64{9}) {
		t.Errorf("revision 3 latency %+v, want the one 9 ms sample of the request it assigned", lat)
	}
}
