//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
)

// TestOutcomesPerVariation: through real allotd and Envoy, an experiment
// with observe: true gets, per variation, Envoy counters of its responses
// by class and a latency histogram — with either artifact. The echo
// upstream answers 503 to some of one variation's requests and 404 to some
// of the other's, and holds a few unanswered until the client gives up
// (aborted); Envoy's counters then equal exactly what the test sent, the
// histogram's sample count equals the responses (aborted requests have
// none), and
// the experiment beside it that does not observe has no outcome stats.
func TestOutcomesPerVariation(t *testing.T) { forArtifacts(t, testOutcomesPerVariation) }

func testOutcomesPerVariation(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	p := s.startSidecar("outcomes-1", "checkout")
	s.waitConnected("outcomes-1")
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s",
		map[string]any{"key": "watched", "variations": []string{"a", "b"}, "observe": true}, &w)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s",
		map[string]any{"key": "plain", "variations": []string{"x", "y"}}, &w)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("create: %+v", w.Rollout)
	}

	// sent[variation][class] is what the test sent.
	sent := map[string]map[int]int64{"a": {}, "b": {}}
	units := map[string][]string{}
	for i := range 40 {
		unit := "user-" + strconv.Itoa(i)
		r, err := p.get(map[string][]string{"x-user-id": {unit}})
		if err != nil {
			t.Fatal(err)
		}
		v := strings.Join(r.Header("x-experiment-watched"), ",")
		if sent[v] == nil {
			t.Fatalf("unit %s: x-experiment-watched %q", unit, v)
		}
		sent[v][wire.Class2xx]++
		units[v] = append(units[v], unit)
	}
	if len(units["a"]) < 4 || len(units["b"]) < 4 {
		t.Fatalf("units per variation %v: too few to test with", units)
	}
	fault := func(unit string, status int) {
		t.Helper()
		r, err := p.get(map[string][]string{"x-user-id": {unit}, echo.StatusHeader: {strconv.Itoa(status)}})
		if r.StatusCode != status {
			t.Fatalf("unit %s with %s %d: status %d (%v)", unit, echo.StatusHeader, status, r.StatusCode, err)
		}
	}
	for _, unit := range units["b"] {
		fault(unit, 503)
		sent["b"][wire.Class5xx]++
	}
	for _, unit := range units["a"][:3] {
		fault(unit, 404)
		sent["a"][wire.Class4xx]++
	}
	// Aborted: the upstream holds the request, the client gives up.
	impatient := &http.Client{Timeout: 300 * time.Millisecond}
	for _, unit := range units["b"][:2] {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
		req.Header.Set("x-user-id", unit)
		req.Header.Set(echo.HangHeader, "1")
		if resp, err := impatient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("a held request was answered %d", resp.StatusCode)
		}
		sent["b"][wire.ClassAborted]++
	}

	stat := func(v string, class int) string {
		return "wasmcustom." + wire.OutcomeMetric("watched", 1, variationIndex(v), class)
	}
	harness.MustEventually(t, 15*time.Second, func() error {
		stats := p.MustStats(t)
		for v, byClass := range sent {
			for class := range wire.NumClasses {
				got, ok := stats[stat(v, class)]
				if !ok {
					return fmt.Errorf("%s: no such stat", stat(v, class))
				}
				if got != byClass[class] {
					return fmt.Errorf("%s = %d, want %d", stat(v, class), got, byClass[class])
				}
			}
		}
		return nil
	})
	// Histograms reach the admin endpoint on Envoy's stats flush (5 s).
	harness.MustEventually(t, 20*time.Second, func() error {
		counts := promValues(p.MustAdmin(t, http.MethodGet, "/stats/prometheus"))
		for v, byClass := range sent {
			responses := byClass[wire.Class2xx] + byClass[wire.Class4xx] + byClass[wire.Class5xx]
			// Envoy strips the custom-stats namespace of Wasm stats from
			// Prometheus names, not of a dynamic module's.
			name := promName(wire.OutcomeMetric("watched", 1, variationIndex(v), wire.Latency), a)
			got, ok := counts[name+"_count"]
			if !ok {
				var seen []string
				for n := range counts {
					if strings.Contains(n, "response_time") {
						seen = append(seen, n)
					}
				}
				return fmt.Errorf("%s: no such histogram (histograms %q)", name, seen)
			}
			if got != responses {
				return fmt.Errorf("%s_count = %d, want %d (the responses)", name, got, responses)
			}
			for class := range wire.NumClasses { // the counters, as Prometheus scrapes them
				c := promName(wire.OutcomeMetric("watched", 1, variationIndex(v), class), a)
				if counts[c] != byClass[class] {
					return fmt.Errorf("%s = %d, want %d", c, counts[c], byClass[class])
				}
			}
		}
		return nil
	})
	for name := range p.MustStats(t) {
		if strings.Contains(name, "experiment.plain.") && strings.Contains(name, "response") {
			t.Errorf("%s: an outcome stat of an experiment that does not observe", name)
		}
	}
	if bytes.Contains(p.MustAdmin(t, http.MethodGet, "/stats/prometheus"), []byte("experiment_plain_rev_1_variation_0_response")) {
		t.Errorf("a histogram of an experiment that does not observe")
	}
}

// variationIndex is the index of watched's variation v.
func variationIndex(v string) int {
	if v == "b" {
		return 1
	}
	return 0
}

// promName is the Prometheus name Envoy's /stats/prometheus gives the
// filter's stat named stat with artifact a: Wasm stats lose their
// wasmcustom namespace there, the native module's keep it (its
// metrics_namespace), after Envoy's envoy_ prefix.
func promName(stat string, a artifact) string {
	name := strings.NewReplacer(".", "_", "-", "_").Replace(stat)
	if a.native {
		return "envoy_wasmcustom_" + name
	}
	return name
}

// promValues reads every sample of Envoy's /stats/prometheus text, by
// name without labels (a histogram's sample count is <name>_count).
func promValues(text []byte) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		if n, err := strconv.ParseInt(value, 10, 64); err == nil {
			out[name] += n
		}
	}
	return out
}
