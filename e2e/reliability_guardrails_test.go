//go:build e2e && reliability

package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// TestReliabilityRollbackRestart: real allotd (checking every second) and
// Envoy, on both artifacts. A treatment failing a third of its requests is
// rolled back; the fault is fixed, the owner acknowledges the rollback and
// starts the experiment, and under healthy traffic it keeps running for
// more than two guardian checks and three stats flushes: the requests
// served before the rollback count in their own revision, not in the one
// started again, whose outcomes start from zero.
func TestReliabilityRollbackRestart(t *testing.T) {
	forEachArtifact(t, reliabilityArtifacts, testRollbackRestart)
}

func testRollbackRestart(t *testing.T, a artifact) {
	s, p := startGuarded(t, a, "bad", map[string]any{"metric": "errorRate", "maxIncrease": 0.01, "minRequests": 200})
	e, sent := failUntilRolledBack(t, s, []*proxy{p}, "bad")
	t.Logf("rolled back after %d requests: %+v", sent, *e.Rollback)

	// The fault is fixed (no more 503s); the owner acknowledges and starts.
	s.mustAPI(http.StatusOK, "POST", "/v1/experiments/bad:start", map[string]any{"acknowledgeRollback": true}, &e)
	if e.Status != "running" {
		t.Fatalf("after the acknowledged start: status %s", e.Status)
	}
	harness.MustEventually(t, 10*time.Second, func() error { // the start reaches the proxy
		r, err := p.get(map[string][]string{"x-user-id": {"user-1"}})
		if err != nil {
			return err
		}
		if len(r.Header("x-experiment-bad")) == 0 {
			return errors.New("no x-experiment-bad yet")
		}
		return nil
	})
	checks := metricValue(t, s, "allot_guardian_checks_total")
	exports := metricValue(t, s, "allot_outcomes_messages_total")
	healthy := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		for i := range 50 {
			if _, err := p.get(map[string][]string{"x-user-id": {"user-" + strconv.Itoa(i)}}); err != nil {
				t.Fatal(err)
			}
			healthy++
		}
		var now experimentJSON
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/bad", nil, &now)
		if now.Status != "running" && now.Status != "" {
			t.Fatalf("rolled back again under healthy traffic after %d requests: status %s, rollback %+v", healthy, now.Status, now.Rollback)
		}
		// Three flushes (one a second) and two checks since the start, with
		// the restarted revision's outcomes past the guardrail's minimum.
		rep := outcomesOf(t, s, "bad")
		if metricValue(t, s, "allot_outcomes_messages_total") >= exports+3 && metricValue(t, s, "allot_guardian_checks_total") >= checks+2 &&
			rep.GetTotal()[0].GetRequests() >= 200 && rep.GetTotal()[1].GetRequests() >= 200 {
			// Created at assignment revision 1, paused (2), started (3).
			if rep.GetRevision() != "3" || now.AssignmentRevision != "3" || rep.GetTotal()[1].GetErrorRate() != 0 {
				t.Errorf("the restarted experiment's outcomes: revision %s (the experiment's %s), treatment error rate %v; want revision 3 without the errors before the rollback",
					rep.GetRevision(), now.AssignmentRevision, rep.GetTotal()[1].GetErrorRate())
			}
			t.Logf("running after %d healthy requests: revision %s, %v", healthy, rep.GetRevision(), rep.GetGuardrails())
			report(t, "guardrails", "rollback, fix, acknowledged start, healthy traffic: still running after 2 guardian checks and 3 stats flushes",
				fmt.Sprintf("running after %d healthy requests; the restarted revision %s counts none of the %d requests before the rollback", healthy, rep.GetRevision(), sent), 0)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no three flushes and two checks with 200 requests a variation within 60 s (%d healthy requests)", healthy)
		}
	}
}

// TestReliabilityHostileAborts: one user in the treatment of a healthy
// experiment with an error-rate guardrail sends 150 requests and abandons
// each after 200 ms, among about 9,000 healthy requests per variation. The
// abandoned requests are counted apart (aborted), are no errors, and the
// treatment is not rolled back, through more than two guardian checks and
// three stats flushes after them.
func TestReliabilityHostileAborts(t *testing.T) {
	forEachArtifact(t, reliabilityArtifacts, testHostileAborts)
}

func testHostileAborts(t *testing.T, a artifact) {
	s, p := startGuarded(t, a, "guarded", map[string]any{"metric": "errorRate", "maxIncrease": 0.01})
	// Healthy traffic: 18,000 requests of 1,000 units, 8 at a time.
	const healthy = 18000
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= healthy; i = next.Add(1) {
				if _, err := p.get(map[string][]string{"x-user-id": {"user-" + strconv.FormatInt(i%1000, 10)}}); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d healthy requests failed", n)
	}
	// The attacker: a treatment unit abandoning 150 requests after 200 ms.
	attacker := ""
	for i := 0; attacker == ""; i++ {
		unit := "attacker-" + strconv.Itoa(i)
		r, err := p.get(map[string][]string{"x-user-id": {unit}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(r.Header("x-experiment-guarded"), ",") == "b" {
			attacker = unit
		}
	}
	impatient := &http.Client{Timeout: 200 * time.Millisecond}
	for range 150 {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/", nil)
		req.Header.Set("x-user-id", attacker)
		req.Header.Set(echo.HangHeader, "1")
		if resp, err := impatient.Do(req); err == nil {
			resp.Body.Close()
			t.Fatalf("a held request was answered %d", resp.StatusCode)
		}
	}
	checks := metricValue(t, s, "allot_guardian_checks_total")
	exports := metricValue(t, s, "allot_outcomes_messages_total")
	var rep *adminv1.Outcomes
	harness.MustEventually(t, 30*time.Second, func() error {
		for i := range 20 { // healthy traffic goes on: Envoy's sink exports only what changed
			if _, err := p.get(map[string][]string{"x-user-id": {"user-" + strconv.Itoa(i)}}); err != nil {
				return err
			}
		}
		var e experimentJSON
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/guarded", nil, &e)
		if e.Rollback != nil || (e.Status != "running" && e.Status != "") {
			t.Fatalf("rolled back by a client abandoning its own requests: status %s, rollback %+v", e.Status, e.Rollback)
		}
		rep = outcomesOf(t, s, "guarded")
		if got := rep.GetTotal()[1].GetAborted(); got != 150 {
			return fmt.Errorf("treatment: %d aborted, want 150", got)
		}
		if metricValue(t, s, "allot_outcomes_messages_total") < exports+3 || metricValue(t, s, "allot_guardian_checks_total") < checks+2 {
			return errors.New("fewer than three flushes and two guardian checks since the aborts")
		}
		return nil
	})
	b := rep.GetTotal()[1]
	if b.GetErrorRate() != 0 || b.GetResponses()["aborted"] != 150 || b.GetResponses()["5xx"] != 0 {
		t.Errorf("treatment: error rate %v, responses %v; want 0, 150 aborted and no 5xx", b.GetErrorRate(), b.GetResponses())
	}
	report(t, "guardrails", "hostile: one treatment unit abandons 150 requests after 200 ms among ~9,000 healthy ones per variation",
		fmt.Sprintf("no rollback; %d aborted shown apart, treatment error rate %v over %d requests", b.GetAborted(), b.GetErrorRate(), b.GetRequests()), 0)
}

// startGuarded starts allotd (checking every second) and an Envoy of
// cluster shop flushing every second, with an observed experiment key of
// variations a and b and guardrail, applied.
func startGuarded(t *testing.T, a artifact, key string, guardrail map[string]any) (*system, *proxy) {
	t.Helper()
	s := startSystemFor(t, a, "-guardian-interval", "1s")
	p := s.startSinkSidecar(key+"-1", "shop")
	s.waitConnected(key + "-1")
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", map[string]any{"key": key, "variations": []string{"a", "b"},
		"observe": true, "guardrails": []map[string]any{guardrail}}, &w)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("create %s: %+v", key, w.Rollout)
	}
	return s, p
}
