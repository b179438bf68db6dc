//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// TestOutcomesReachAllotd: two real Envoys (the sidecar bootstrap with its
// OpenTelemetry stat sink, flushing every second) send the outcome stats of an
// observed experiment to allotd, which sums them: GET …/outcomes and
// `allotctl outcomes` show each variation's requests and error rate as the
// load generator counted them (the echo upstream answers 503 to every
// request of variation b after the first pass), restarting one Envoy
// neither counts its earlier figures twice nor loses them, and new weights
// (a new assignment revision) start new figures.
func TestOutcomesReachAllotd(t *testing.T) { forArtifacts(t, testOutcomesReachAllotd) }

func testOutcomesReachAllotd(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	sidecar := func(node string) *proxy { return s.startSinkSidecar(node, "shop") }
	proxies := []*proxy{sidecar("sink-1"), sidecar("sink-2")}
	s.waitConnected("sink-1")
	s.waitConnected("sink-2")
	createSunk(t, s, 2)

	g := newLoadGen(t)
	g.load(proxies, 3) // the first round learns each unit's variation
	sent, failed := g.sent, g.failed
	if failed["a"] != 0 || failed["b"] == 0 {
		t.Fatalf("503s %v of %v", failed, sent)
	}
	rep := wantCounts(t, s, sent, failed)

	// allotd's /metrics has the same counts, under the current revision; and what the sinks cost:
	// the bootstrap's matcher leaves only Allot's outcome stats in an export, no stat of Envoy's own.
	for i, v := range []string{"a", "b"} {
		series := fmt.Sprintf(`allot_outcome_requests_total{class="5xx",experiment="sunk",revision="%s",variation="%d"}`, rep.GetRevision(), i)
		if got := metricValue(t, s, series); !within(int64(got), failed[v]) {
			t.Errorf("%s = %v, want %d", series, got, failed[v])
		}
	}
	msgs := metricValue(t, s, "allot_outcomes_messages_total")
	others := metricValue(t, s, `allot_outcomes_dropped_total{reason="other_stat"}`)
	t.Logf("sink cost: %.0f exports, %.0f bytes each, %.0f data points of other stats", msgs,
		metricValue(t, s, "allot_outcomes_received_bytes_total")/msgs, others)
	if others != 0 {
		t.Errorf("the sinks exported %.0f data points of stats that are not Allot's outcome stats: the bootstrap's matcher lets them through", others)
	}

	// allotctl shows the same figures.
	wantCtlCounts(t, s, sent, failed)

	// Restart sink-2 (its figures are all in allotd: wantCounts waited):
	// the new process's deltas start over, nothing is counted twice.
	proxies[1].MustTerminate(t)
	proxies[1] = sidecar("sink-2")
	harness.MustEventually(t, 15*time.Second, func() error {
		var ro rolloutJSON
		s.mustAPI(http.StatusOK, "GET", "/v1/rollout", nil, &ro)
		if ro.Counts["applied"] != 2 || len(ro.Counts) != 1 {
			return fmt.Errorf("rollout %+v", ro)
		}
		return nil
	})
	g.load(proxies, 2)
	wantCounts(t, s, sent, failed)

	// New weights: a new assignment revision, whose figures start from
	// zero and count only the requests after it (wantCounts refuses more
	// than was sent).
	var cur struct {
		Revision string `json:"revision"`
	}
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/sunk", nil, &cur)
	var w waitedWrite
	s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/sunk?wait=10s", map[string]any{"variations": []string{"a", "b"},
		"weights": []float64{0.3, 0.7}, "observe": true, "revision": cur.Revision}, &w)
	if !w.Rollout.appliedBy(2) {
		t.Fatalf("new weights: %+v", w.Rollout)
	}
	g2 := newLoadGen(t)
	g2.load(proxies, 3)
	if rep2 := wantCounts(t, s, g2.sent, g2.failed); rep2.GetRevision() == rep.GetRevision() {
		t.Errorf("after new weights the report's revision is still %s", rep.GetRevision())
	}
}

// createSunk creates the observed experiment "sunk" (variations a and b)
// through s, waiting until n proxies applied it.
func createSunk(t *testing.T, s *system, n int) {
	t.Helper()
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s",
		map[string]any{"key": "sunk", "variations": []string{"a", "b"}, "observe": true}, &w)
	if !w.Rollout.appliedBy(n) {
		t.Fatalf("create: %+v", w.Rollout)
	}
}

// loadGen sends requests of 60 units through proxies and counts them by
// their variation of "sunk": sent[v] the requests, failed[v] the 503s
// among them (the echo upstream answers 503 to every request of a unit of
// variation b after its first).
type loadGen struct {
	t             *testing.T
	sent, failed  map[string]int64
	unitVariation map[string]string
}

func newLoadGen(t *testing.T) *loadGen {
	return &loadGen{t: t, sent: map[string]int64{}, failed: map[string]int64{}, unitVariation: map[string]string{}}
}

func (g *loadGen) send(p *proxy, unit string) {
	g.t.Helper()
	h := map[string][]string{"x-user-id": {unit}}
	if g.unitVariation[unit] == "b" {
		h[echo.StatusHeader] = []string{"503"}
	}
	r, err := p.get(h) // an error for any status but 200, with the response
	if err != nil && r.StatusCode != 503 {
		g.t.Fatal(err)
	}
	v := strings.Join(r.Header("x-experiment-sunk"), ",")
	if r.StatusCode == 503 { // a b unit's: the echo's body (and its headers) only with 200
		v = g.unitVariation[unit]
	}
	if v != "a" && v != "b" {
		g.t.Fatalf("unit %s: x-experiment-sunk %q", unit, v)
	}
	g.unitVariation[unit] = v
	g.sent[v]++
	if r.StatusCode == 503 {
		g.failed[v]++
	}
}

// load sends rounds rounds of the 60 units' requests, spread over ps.
func (g *loadGen) load(ps []*proxy, rounds int) {
	g.t.Helper()
	for round := range rounds {
		for i := range 60 {
			g.send(ps[(i+round)%len(ps)], "user-"+strconv.Itoa(i))
		}
	}
}

// wantCtlCounts checks that allotctl outcomes against s shows each
// variation's requests as sent and its error rate.
func wantCtlCounts(t *testing.T, s *system, sent, failed map[string]int64) {
	t.Helper()
	ctl := harness.MustBuild(t, "./control-plane/cmd/allotctl")
	cmd := exec.Command(ctl, "outcomes", "sunk", "--minutes", "5")
	cmd.Env = append(os.Environ(), "ALLOT_SERVER="+s.adminURL, "ALLOT_TOKEN="+adminToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("allotctl outcomes: %v\n%s", err, out)
	}
	for i, v := range []string{"a", "b"} {
		rate := fmt.Sprintf("%.1f%%", 100*float64(failed[v])/float64(sent[v]))
		row := regexpRow(string(out), i)
		if !strings.Contains(row, " "+strconv.FormatInt(sent[v], 10)+" ") || !strings.Contains(row, rate) {
			t.Errorf("allotctl outcomes against %s: variation %d row %q, want %d requests and %s errors\n%s", s.adminURL, i, row, sent[v], rate, out)
		}
	}
}

// startSinkSidecar is startSidecar with the bootstrap's OpenTelemetry stat
// sink flushing every second instead of 5 (sinkEverySecond).
func (s *system) startSinkSidecar(node, cluster string) *proxy {
	s.t.Helper()
	_, echoPort, _ := splitHostPort(s.echoAddr)
	replace := sinkEverySecond()
	replace["port_value: 8081"] = "port_value: " + echoPort
	return startEnvoy(s.t, s.art.sidecar, s.xdsPort, s.filter(), s.art.env(), node, cluster, replace)
}

// sinkEverySecond are the replacements in a bootstrap of envoy-configs/
// that make its OpenTelemetry stat sink flush every second instead of 5.
func sinkEverySecond() map[string]string {
	return map[string]string{"stats_flush_interval: 5s": "stats_flush_interval: 1s"}
}

// wantCounts waits until allotd's outcomes of "sunk" equal what was sent,
// each variation's requests and error rate within 5% (and every response
// timed).
func wantCounts(t *testing.T, s *system, sent, failed map[string]int64) *adminv1.Outcomes {
	t.Helper()
	last := &adminv1.Outcomes{}
	harness.MustEventually(t, 20*time.Second, func() error {
		var raw json.RawMessage
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/sunk/outcomes", nil, &raw)
		if err := protojson.Unmarshal(raw, last); err != nil {
			return err
		}
		if len(last.GetTotal()) != 2 {
			return fmt.Errorf("report %s", raw)
		}
		for i, v := range []string{"a", "b"} {
			got := last.GetTotal()[i]
			if !within(got.GetRequests(), sent[v]) || !within(got.GetResponses()["5xx"], failed[v]) || !within(got.GetTimed(), sent[v]) {
				return fmt.Errorf("variation %s: %d requests, %d 5xx, %d timed; sent %d, %d 503s", v, got.GetRequests(), got.GetResponses()["5xx"], got.GetTimed(), sent[v], failed[v])
			}
			if got.GetLatencyMs() == nil {
				return fmt.Errorf("variation %s: no latency", v)
			}
		}
		return nil
	})
	// Deltas are exact: more than sent is a double count.
	for i, v := range []string{"a", "b"} {
		if got := last.GetTotal()[i].GetRequests(); got > sent[v] {
			t.Errorf("variation %s: %d requests counted, %d sent", v, got, sent[v])
		}
	}
	return last
}

// within: got is within 5% of want.
func within(got, want int64) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	return float64(d) <= 0.05*float64(want)
}

// regexpRow is the line of allotctl outcomes' table for variation i.
func regexpRow(out string, i int) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == strconv.Itoa(i) {
			return " " + strings.Join(f, " ") + " "
		}
	}
	return ""
}
