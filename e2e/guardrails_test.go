//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
)

// experimentJSON is the part of an experiment the guardrail tests read.
type experimentJSON struct {
	Status   string `json:"status"`
	Revision string `json:"revision"`
	// AssignmentRevision is the experiment's assignment revision.
	AssignmentRevision string   `json:"assignmentRevision"`
	Coverage           *float64 `json:"coverage"`
	RampState          *struct {
		Step int `json:"step"`
	} `json:"rampState"`
	Rollback *struct {
		Guardrail   int     `json:"guardrail"`
		Metric      string  `json:"metric"`
		Variation   int     `json:"variation"`
		PValue      float64 `json:"pValue"`
		Revision    string  `json:"revision"`
		Applied     int     `json:"applied"`
		Proxies     int     `json:"proxies"`
		AppliedTime string  `json:"appliedTime"`
		// AssignmentRevision is the revision whose outcomes broke the
		// guardrail.
		AssignmentRevision string `json:"assignmentRevision"`
	} `json:"rollback"`
}

// TestGuardrailRollback: real allotd (checking every second) and two real
// Envoys reporting their outcomes. Experiment "bad" has a guardrail on the
// error rate and a treatment the echo upstream fails a third of the
// requests of; experiment "good" has the same guardrail and nothing wrong
// (the requests "bad" fails fall on both of its variations alike). Under
// load through both Envoys, the guardrail of "bad" trips: allotd pauses it
// once, records that 2 of 2 proxies applied the pause, the API, allotctl
// and the history show it, and no request gets its treatment afterwards;
// "good" keeps running.
func TestGuardrailRollback(t *testing.T) {
	s := startSystemFor(t, wasmArtifact, "-guardian-interval", "1s")
	proxies := []*proxy{s.startSinkSidecar("guard-1", "shop"), s.startSinkSidecar("guard-2", "shop")}
	s.waitConnected("guard-1", "guard-2")
	for _, key := range []string{"bad", "good"} {
		var w waitedWrite
		s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", map[string]any{"key": key, "variations": []string{"a", "b"},
			"observe": true, "guardrails": []map[string]any{{"metric": "errorRate", "maxIncrease": 0.01, "minRequests": 200}}}, &w)
		if !w.Rollout.appliedBy(2) {
			t.Fatalf("create %s: %+v", key, w.Rollout)
		}
	}

	e, sent := failUntilRolledBack(t, s, proxies, "bad")
	t.Logf("rolled back after %d requests: %+v", sent, *e.Rollback)
	if e.Status != "paused" || e.Rollback.Guardrail != 0 || e.Rollback.Metric != "errorRate" || e.Rollback.Variation != 1 ||
		e.Rollback.Applied != 2 || e.Rollback.Proxies != 2 || e.Rollback.PValue > 0.05 {
		t.Errorf("experiment bad: status %s, rollback %+v; want paused, guardrail 0 on variation 1 applied by 2/2", e.Status, *e.Rollback)
	}

	// The history: one write by allotd's guardian that paused it.
	if n := rollbackWrites(t, s, "bad"); n != 1 {
		t.Errorf("history: %d rollback writes by allotd:guardian, want 1", n)
	}

	// allotctl shows the rollback and its proxies.
	ctl := harness.MustBuild(t, "./control-plane/cmd/allotctl")
	cmd := exec.Command(ctl, "get", "bad")
	cmd.Env = append(os.Environ(), "ALLOT_SERVER="+s.adminURL, "ALLOT_TOKEN="+adminToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("allotctl get: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "rolled back by guardrail 0 (errorRate") || !strings.Contains(string(out), "applied by 2/2 proxies") {
		t.Errorf("allotctl get bad: no rollback line\n%s", out)
	}

	// Afterwards no request gets the treatment of "bad"; "good" runs on.
	for i := range 100 {
		r, err := proxies[i%2].get(map[string][]string{"x-user-id": {"user-" + strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		if v := r.Header("x-experiment-bad"); len(v) > 0 {
			t.Fatalf("after the rollback, user-%d got x-experiment-bad %v", i, v)
		}
	}
	var good experimentJSON
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/good", nil, &good)
	if (good.Status != "running" && good.Status != "") || good.Rollback != nil {
		t.Errorf("experiment good: status %s, rollback %+v; want running, none", good.Status, good.Rollback)
	}
}

// TestGuardrailRamp: an experiment with a ramp of three steps and a
// guardrail, under load through two Envoys: allotd moves it 0.2 → 0.5 →
// 1.0, one audited write per step, and both proxies run the last
// (TestRampWaitsForProxies shows a step waits for every proxy to apply the
// one before). Its third variation has weight 0: no request gets it, and
// the ramp does not wait for its guardrail.
func TestGuardrailRamp(t *testing.T) {
	s := startSystemFor(t, wasmArtifact, "-guardian-interval", "1s")
	proxies := []*proxy{s.startSinkSidecar("ramp-1", "shop"), s.startSinkSidecar("ramp-2", "shop")}
	s.waitConnected("ramp-1", "ramp-2")
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{"key": "ramped", "variations": []string{"a", "b", "retired"},
		"weights": []float64{0.5, 0.5, 0}, "observe": true, "guardrails": []map[string]any{{"metric": "errorRate", "maxIncrease": 0.05, "minRequests": 100}},
		"ramp": map[string]any{"steps": []map[string]any{{"coverage": 0.2}, {"coverage": 0.5, "minHold": "2s"}, {"coverage": 1}}}}, nil)

	n := 0
	var e experimentJSON
	harness.MustEventually(t, 120*time.Second, func() error {
		for range 200 {
			n++
			if _, err := proxies[n%2].get(map[string][]string{"x-user-id": {"user-" + strconv.Itoa(n%1000)}}); err != nil {
				return err
			}
		}
		e = experimentJSON{}
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/ramped", nil, &e)
		if e.RampState == nil || e.RampState.Step != 2 {
			return fmt.Errorf("after %d requests: ramp %+v coverage %v", n, e.RampState, e.Coverage)
		}
		return nil
	})
	if e.Coverage == nil || *e.Coverage != 1 || (e.Status != "running" && e.Status != "") {
		t.Errorf("at the last step: coverage %v status %q", e.Coverage, e.Status)
	}
	var hist struct {
		Changes []struct {
			Actor string         `json:"actor"`
			Time  time.Time      `json:"time"`
			After experimentJSON `json:"after"`
		} `json:"changes"`
	}
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/ramped/history", nil, &hist)
	var steps []float64
	for _, c := range hist.Changes {
		if c.Actor == "allotd:guardian" && c.After.Coverage != nil {
			steps = append(steps, *c.After.Coverage)
		}
	}
	if fmt.Sprint(steps) != "[0.2 0.5 1]" {
		t.Errorf("the guardian's writes set coverage %v, want [0.2 0.5 1]", steps)
	}
	// Both proxies come to run the last step.
	harness.MustEventually(t, 10*time.Second, func() error {
		var ro rolloutJSON
		s.mustAPI(http.StatusOK, "GET", "/v1/rollout", nil, &ro)
		if ro.Counts["applied"] != 2 {
			return fmt.Errorf("rollout %+v", ro)
		}
		return nil
	})
}

// failUntilRolledBack sends requests of 500 units through proxies, failing
// (echo 503) every third request of a unit experiment key assigned "b",
// until s reports key rolled back and its proxies counted.
func failUntilRolledBack(t *testing.T, s *system, proxies []*proxy, key string) (experimentJSON, int) {
	t.Helper()
	var e experimentJSON
	sent, n := 0, 0
	harness.MustEventually(t, 90*time.Second, func() error {
		for range 100 { // a round of requests, then a look
			unit := "user-" + strconv.Itoa(n%500)
			n++
			h := map[string][]string{"x-user-id": {unit}}
			p := proxies[n%len(proxies)]
			// Learn the unit's variation from a request that cannot fail,
			// then fail every third request of a b unit.
			r, err := p.get(h)
			if err != nil {
				return fmt.Errorf("request: %w", err)
			}
			sent++
			if strings.Join(r.Header("x-experiment-"+key), ",") == "b" && n%3 == 0 {
				h[echo.StatusHeader] = []string{"503"}
				p.get(h) // a 503 is an error here, and the point
				sent++
			}
		}
		e = experimentJSON{}
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/"+key, nil, &e)
		if e.Rollback == nil || e.Rollback.AppliedTime == "" {
			return fmt.Errorf("after %d requests: status %s, rollback %+v", sent, e.Status, e.Rollback)
		}
		return nil
	})
	return e, sent
}

// rollbackWrites counts the writes in key's history by allotd's guardian
// that paused it.
func rollbackWrites(t *testing.T, s *system, key string) int {
	t.Helper()
	var hist struct {
		Changes []struct {
			Actor  string         `json:"actor"`
			After  experimentJSON `json:"after"`
			Before experimentJSON `json:"before"`
		} `json:"changes"`
	}
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/"+key+"/history", nil, &hist)
	n := 0
	for _, c := range hist.Changes {
		if c.Actor == "allotd:guardian" && c.After.Status == "paused" && c.Before.Status != "paused" {
			n++
		}
	}
	return n
}

// TestGuardrailRollbackReplicas: 2 allotd replicas on etcd, each checking
// every second on the mesh-wide outcomes, each of 2 Envoys on a different
// replica. Both replicas see the guardrail break; exactly one rollback
// write happens (the history, and the replicas' allot_guardrail_rollbacks_total
// summed), applied by 2 of 2 proxies.
func TestGuardrailRollbackReplicas(t *testing.T) {
	h := startReplicated(t, 2, "-guardian-interval", "1s")
	var proxies []*proxy
	for i := range h.replicas {
		node := fmt.Sprintf("guard-%d", i+1)
		proxies = append(proxies, h.sidecarWith(i, node, "shop", sinkEverySecond()))
		for via := range h.replicas {
			if got := h.replicaOf(via, node); got != replicaID(i) {
				t.Fatalf("replica %s sees Envoy %s on %s, want %s", replicaID(via), node, got, replicaID(i))
			}
		}
	}
	var w waitedWrite
	h.replicas[0].mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", map[string]any{"key": "bad", "variations": []string{"a", "b"},
		"observe": true, "guardrails": []map[string]any{{"metric": "errorRate", "maxIncrease": 0.01, "minRequests": 200}}}, &w)
	if !w.Rollout.appliedBy(2) {
		t.Fatalf("create: %+v", w.Rollout)
	}
	e, sent := failUntilRolledBack(t, h.replicas[1], proxies, "bad")
	t.Logf("rolled back after %d requests: %+v", sent, *e.Rollback)
	if e.Status != "paused" || e.Rollback.Applied != 2 || e.Rollback.Proxies != 2 {
		t.Errorf("status %s, rollback %+v; want paused, applied by 2/2", e.Status, *e.Rollback)
	}
	// Both replicas go on checking, two more times each: still one write.
	for _, s := range h.replicas {
		from := metricValue(t, s, "allot_guardian_checks_total")
		harness.MustEventually(t, 10*time.Second, func() error {
			if n := metricValue(t, s, "allot_guardian_checks_total"); n < from+2 {
				return fmt.Errorf("%v checks since the rollback", n-from)
			}
			return nil
		})
	}
	if n := rollbackWrites(t, h.replicas[0], "bad"); n != 1 {
		t.Errorf("history: %d rollback writes, want exactly 1", n)
	}
	var total float64
	for _, s := range h.replicas {
		total += metricValue(t, s, `allot_guardrail_rollbacks_total{experiment="bad"}`)
	}
	if total != 1 {
		t.Errorf("the replicas' allot_guardrail_rollbacks_total sum to %v, want 1", total)
	}
}
