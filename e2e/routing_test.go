//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
)

// The experiment, header and clusters of the routing gateway
// (envoy-configs/gateway-routing.yaml and gateway-routing-native.yaml).
const (
	routingKey       = "checkout-redesign"
	routingHeader    = "x-experiment-" + routingKey
	routingControl   = "checkout"           // control, and every request without the treatment
	routingTreatment = "checkout-treatment" // the treatment only
	routingUnits     = 2000
)

// TestRouting sends every one of 2,000 units through the routing gateway,
// twice: once as it is, once with a forged assignment header naming the
// other variation. Each request must reach the treatment cluster exactly
// when the engine assigns its unit the treatment, and the control cluster
// otherwise; the upstreams say which of them answered, and Envoy's cluster
// stats count the same.
func TestRouting(t *testing.T) { forArtifacts(t, testRouting) }

func testRouting(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	treatmentAddr := harness.MustStartEcho(t)
	upstream := map[string]string{s.echoAddr: routingControl, treatmentAddr: routingTreatment}
	_, controlPort, _ := splitHostPort(s.echoAddr)
	_, treatmentPort, _ := splitHostPort(treatmentAddr)
	g := startEnvoy(t, a.routing, s.xdsPort, s.filter(), a.env(), "routing-gateway-1", "gateway", map[string]string{
		"port_value: 8081": "port_value: " + controlPort,
		"port_value: 8082": "port_value: " + treatmentPort,
	})

	// 80% coverage: a fifth of the units are in no variation, and carry no
	// header, so they take the default route.
	def := map[string]any{"key": routingKey, "variations": []string{"control", "treatment"},
		"weights": []float64{0.5, 0.5}, "coverage": 0.8}
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", def, nil)
	units := userIDs(routingUnits)
	want := routingOracle(t, def, units) // "treatment", "control" or "" (not in it)
	wantCluster := func(u string) string {
		if want[u] == "treatment" {
			return routingTreatment
		}
		return routingControl
	}
	var probe string
	for _, u := range units {
		if want[u] == "treatment" {
			probe = u
			break
		}
	}
	harness.MustEventually(t, 10*time.Second, func() error {
		r, err := g.get(map[string][]string{"x-user-id": {probe}})
		if err != nil {
			return err
		}
		if got := upstream[r.Server]; got != routingTreatment {
			return fmt.Errorf("%s (treatment) reached %q (%s)", probe, got, r.Server)
		}
		return nil
	})
	before := g.MustStats(t)

	// Every unit twice, 8 requests at a time on keep-alive connections.
	type result struct {
		unit, forged, cluster string
		seen                  []string // the routing header as the upstream saw it
		err                   error
	}
	results := make([]result, 2*len(units))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				u := units[i/2]
				h := map[string][]string{"x-user-id": {u}}
				res := result{unit: u}
				if i%2 == 1 { // the other variation, forged
					res.forged = "treatment"
					if want[u] == "treatment" {
						res.forged = "control"
					}
					h[routingHeader] = []string{res.forged}
				}
				r, err := g.get(h)
				res.err, res.cluster, res.seen = err, upstream[r.Server], r.Header(routingHeader)
				results[i] = res
			}
		}()
	}
	start := time.Now()
	for i := range results {
		next <- i
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)

	counts := map[string]int64{}
	mismatches := 0
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("%s (forged %q): %v", r.unit, r.forged, r.err)
		}
		counts[r.cluster]++
		wantSeen := []string{want[r.unit]}
		if want[r.unit] == "" {
			wantSeen = nil
		}
		if r.cluster != wantCluster(r.unit) || strings.Join(r.seen, ",") != strings.Join(wantSeen, ",") {
			mismatches++
			if mismatches <= 10 {
				t.Errorf("%s (assigned %q, forged %q): reached %q with %s %q, want %q with %q",
					r.unit, want[r.unit], r.forged, r.cluster, routingHeader, r.seen, wantCluster(r.unit), wantSeen)
			}
		}
	}
	if mismatches > 0 {
		t.Fatalf("%d of %d requests mismatched", mismatches, len(results))
	}
	var wantTreatment int64
	for _, u := range units {
		if want[u] == "treatment" {
			wantTreatment += 2
		}
	}
	if wantTreatment == 0 || wantTreatment == int64(len(results)) {
		t.Fatalf("%d of %d requests due at the treatment: the test needs both clusters", wantTreatment, len(results))
	}
	if counts[routingTreatment] != wantTreatment || counts[routingControl] != int64(len(results))-wantTreatment {
		t.Fatalf("per upstream %v, want %s %d", counts, routingTreatment, wantTreatment)
	}
	// Envoy's own count per cluster agrees with the upstreams'.
	harness.MustEventually(t, 5*time.Second, func() error {
		after := g.MustStats(t)
		for cluster, n := range counts {
			stat := "cluster." + cluster + ".upstream_rq_total"
			if got := after[stat] - before[stat]; got != n {
				return fmt.Errorf("%s grew by %d, want %d", stat, got, n)
			}
		}
		return nil
	})
	t.Logf("%d units, %d requests in %v: %v, 0 mismatches", len(units), len(results),
		elapsed.Round(time.Millisecond), counts)

	t.Run("a forged header never steers: no unit id, outside the experiment, copies, casing", func(t *testing.T) {
		first := func(variation string) string {
			for _, u := range units {
				if want[u] == variation {
					return u
				}
			}
			t.Fatalf("no unit assigned %q", variation)
			return ""
		}
		control, outside := first("control"), first("")
		for _, tc := range []struct {
			name  string
			lines []string
			seen  string // the routing header the control upstream must see ("": none)
		}{
			{"no unit id", []string{routingHeader + ": treatment"}, ""},
			{"outside the experiment", []string{"x-user-id: " + outside, routingHeader + ": treatment"}, ""},
			{"two copies", []string{"x-user-id: " + control, routingHeader + ": treatment", routingHeader + ": treatment"}, "control"},
			{"upper case", []string{"x-user-id: " + control, strings.ToUpper(routingHeader) + ": treatment"}, "control"},
		} {
			code, body := rawRequest(t, g.URL, tc.lines)
			var r echo.Response
			if err := json.Unmarshal([]byte(body), &r); code != http.StatusOK || err != nil {
				t.Fatalf("%s: status %d, %v: %.300s", tc.name, code, err, body)
			}
			seen := strings.Join(r.Header(routingHeader), ",")
			if got := upstream[r.Server]; got != routingControl || seen != tc.seen {
				t.Errorf("%s: reached %q with %s %q, want %s with %q", tc.name, got, routingHeader, seen, routingControl, tc.seen)
			}
		}
	})
}

// routingOracle is the engine's assignment of def for each unit: the
// variation, or "" for a unit it leaves out of the experiment.
func routingOracle(t *testing.T, def map[string]any, units []string) map[string]string {
	t.Helper()
	set := compile(t, def)
	out := make(map[string]string, len(units))
	for _, u := range units {
		if a := set.Assign(nil, engine.Attributes{"id": u})[0]; a.InExperiment {
			out[u] = a.Value
		}
	}
	return out
}

// TestRoutingFailOpen: a request the filter fails open on reaches the
// control cluster, even when its unit is assigned the treatment and the
// client forged the treatment header. It runs the native module's allotfault
// build (a panic in the host call x-allot-test-fault names), on each of its
// request paths (nativeArtifacts; each case a new unit, which C sends to
// Go), configured by
// gateway-routing-native.yaml's default_config, with no allotd: the Wasm
// module's failure path is the same plugin code, and Envoy clears the route
// after each of its header changes by itself.
func TestRoutingFailOpen(t *testing.T) { forEachArtifact(t, nativeArtifacts, testRoutingFailOpen) }

func testRoutingFailOpen(t *testing.T, a artifact) {
	so := harness.MustBuildNative(t, "./filter/native", "liballot.so", "allotfault")
	control, treatment := harness.MustStartEcho(t), harness.MustStartEcho(t)
	upstream := map[string]string{control: routingControl, treatment: routingTreatment}
	_, controlPort, _ := splitHostPort(control)
	_, treatmentPort, _ := splitHostPort(treatment)
	// Every unit is assigned the treatment.
	config := `{"version": "fail-open", "experiments": [{"key": "` + routingKey +
		`", "variations": ["control", "treatment"], "weights": [0, 1]}]}`
	g := startEnvoy(t, a.routing, harness.MustFreePort(t), so, a.env(), "routing-fail-open", "gateway", map[string]string{
		"port_value: 8081": "port_value: " + controlPort,
		"port_value: 8082": "port_value: " + treatmentPort,
		"value: {}":        "value: " + config,
	})
	r, err := g.get(map[string][]string{"x-user-id": {"u-ok"}, routingHeader: {"control"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := upstream[r.Server]; got != routingTreatment {
		t.Fatalf("without a failure the unit reached %q, want %s", got, routingTreatment)
	}
	cases := []struct {
		call   string
		forged map[string][]string
	}{
		{"read", nil},
		{"remove", nil},
		{"add", nil},
		{"set", manyForged()},
		{"state", nil},
	}
	for _, tc := range cases {
		h := map[string][]string{"x-user-id": {"u-" + tc.call}, "x-allot-test-fault": {tc.call}, routingHeader: {"treatment"}}
		for k, v := range tc.forged {
			h[k] = v
		}
		r, err := g.get(h)
		if err != nil {
			t.Fatalf("panic in %s: %v", tc.call, err)
		}
		if got := upstream[r.Server]; got != routingControl || r.Header(routingHeader) != nil {
			t.Errorf("panic in %s: reached %q with %s %q, want %s without it", tc.call, got, routingHeader, r.Header(routingHeader), routingControl)
		}
	}
	harness.MustEventually(t, 5*time.Second, func() error {
		if got, want := g.MustStats(t)["wasmcustom."+wire.MetricFailOpen], int64(len(cases)); got != want {
			return fmt.Errorf("fail_open %d, want %d (one per injected panic)", got, want)
		}
		return nil
	})
}
