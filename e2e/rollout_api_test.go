//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// rolloutJSON is the admin API's Rollout in proto3 JSON.
type rolloutJSON struct {
	Result  string         `json:"result"`
	Error   string         `json:"error"`
	Counts  map[string]int `json:"counts"`
	Proxies []struct {
		Replica         string `json:"replica"`
		NodeID          string `json:"nodeId"`
		Cluster         string `json:"cluster"`
		State           string `json:"state"`
		TargetVersion   string `json:"targetVersion"`
		AckedVersion    string `json:"ackedVersion"`
		RejectedVersion string `json:"rejectedVersion"`
		RejectionError  string `json:"rejectionError"`
		Pushes          int    `json:"pushes"`
	} `json:"proxies"`
}

// appliedBy reports whether r, a waited write's rollout, is applied by n
// proxies: all counted applied, none listed (a waited write lists only the
// proxies that did not apply).
func (r rolloutJSON) appliedBy(n int) bool {
	return r.Result == "applied" && r.Counts["applied"] == n && len(r.Counts) <= 1 && len(r.Proxies) == 0
}

// waitedWrite is the body of a write made with ?wait=.
type waitedWrite struct {
	Experiment map[string]any `json:"experiment"`
	Rollout    rolloutJSON    `json:"rollout"`
}

// TestRolloutThroughAdminAPI: through the real allotd admin API, a write
// with ?wait= returns only after all three Envoys acknowledged it — reading
// headers through each Envoy right after it returns never shows a stale
// assignment (20 ramp steps). A fourth Envoy that rejects the configuration
// is reported as rejected, on that proxy only, by the write and by
// GET /v1/rollout.
func TestRolloutThroughAdminAPI(t *testing.T) {
	s := startSystem(t)
	var proxies []*proxy
	for i := range 3 {
		proxies = append(proxies, s.startSidecar(fmt.Sprintf("api-checkout-%d", i+1), "checkout-svc"))
	}
	s.waitConnected("api-checkout-1", "api-checkout-2", "api-checkout-3")
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", checkoutRamp(0), &w)
	if !w.Rollout.appliedBy(3) {
		t.Fatalf("create with wait: %+v", w.Rollout)
	}

	units := userIDs(2000)
	assign := func(def map[string]any) map[string]string { return assignments(t, def, units) }
	prev := assign(checkoutRamp(0))
	revision := w.Experiment["revision"]
	var slowest time.Duration
	for step := 1; step <= 20; step++ {
		def := checkoutRamp(float64(step) / 20)
		want := assign(def)
		var probe []string // units this step moves
		for _, u := range units {
			if want[u] != prev[u] && len(probe) < 15 {
				probe = append(probe, u)
			}
		}
		def["revision"] = revision
		start := time.Now()
		s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/checkout?wait=10s", def, &w)
		slowest = max(slowest, time.Since(start))
		if !w.Rollout.appliedBy(3) {
			t.Fatalf("step %d: rollout %+v, want applied by 3 proxies", step, w.Rollout)
		}
		revision = w.Experiment["revision"]
		for i, p := range proxies {
			for _, u := range probe {
				r, err := p.get(map[string][]string{"x-user-id": {u}})
				if err != nil {
					t.Fatal(err)
				}
				if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != want[u] {
					t.Fatalf("step %d: proxy %d right after the write returned: %s got %q, want [%s]", step, i+1, u, v, want[u])
				}
			}
		}
		prev = want
	}
	t.Logf("20 writes with ?wait=, each acknowledged by 3 Envoys; slowest %v", slowest.Round(time.Millisecond))

	// A fourth proxy of the same service that cannot apply the filter.
	bad := s.startRejectingSidecar("api-checkout-bad", "checkout-svc")
	s.waitConnected("api-checkout-bad")
	def := checkoutRamp(0.5)
	def["revision"] = revision
	s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/checkout?wait=10s", def, &w)
	if w.Rollout.Result != "rejected" {
		t.Fatalf("write with a rejecting proxy: result %q (%s), want rejected", w.Rollout.Result, w.Rollout.Error)
	}
	if len(w.Rollout.Proxies) != 1 || w.Rollout.Proxies[0].NodeID != "api-checkout-bad" || w.Rollout.Proxies[0].RejectionError == "" ||
		w.Rollout.Counts["applied"] != 3 || w.Rollout.Counts["rejected"] != 1 {
		t.Fatalf("write with a rejecting proxy: %+v, want 3 applied and api-checkout-bad listed, rejected with its reason", w.Rollout)
	}
	var status rolloutJSON
	s.mustAPI(http.StatusOK, "GET", "/v1/rollout", nil, &status)
	states := map[string]string{}
	for _, p := range status.Proxies {
		states[p.NodeID] = p.State
		if p.NodeID == "api-checkout-bad" && (p.RejectionError == "" || p.RejectedVersion != p.TargetVersion) {
			t.Errorf("rejected proxy without its reason: %+v", p)
		}
		if p.NodeID == "api-checkout-bad" && p.Pushes > 3 {
			t.Errorf("rejecting proxy was pushed %d times: a NACK loop", p.Pushes)
		}
	}
	want := map[string]string{"api-checkout-1": "applied", "api-checkout-2": "applied", "api-checkout-3": "applied", "api-checkout-bad": "rejected"}
	for node, st := range want {
		if states[node] != st {
			b, _ := json.MarshalIndent(status, "", "  ")
			t.Fatalf("GET /v1/rollout: %s is %q, want %q\n%s", node, states[node], st, b)
		}
	}
	// The rejecting proxy keeps serving (without assignments).
	if _, err := bad.get(map[string][]string{"x-user-id": {"u"}}); err != nil {
		t.Fatalf("the rejecting proxy stopped serving: %v", err)
	}

	// allotctl shows the same: the rollout table, and apply --wait fails
	// naming the proxy that did not apply the change (which still stands).
	ctl := harness.MustBuild(t, "./control-plane/cmd/allotctl")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(ctl, append(args, "--server", s.adminURL, "--token", adminToken)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("rollout")
	if err != nil {
		t.Fatalf("allotctl rollout: %v\n%s", err, out)
	}
	rows := map[string]string{} // node → state column
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && strings.HasPrefix(f[0], "api-checkout-") {
			rows[f[0]] = f[2]
		}
	}
	for node, st := range want {
		if rows[node] != st {
			t.Fatalf("allotctl rollout shows %s as %q, want %q:\n%s", node, rows[node], st, out)
		}
	}
	if !strings.Contains(out, "(checkout-svc): 3 applied, 0 pending, 1 rejected") {
		t.Fatalf("allotctl rollout has no per-version summary:\n%s", out)
	}
	file := filepath.Join(t.TempDir(), "checkout.json")
	b, _ := json.Marshal(checkoutRamp(0.25))
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run("apply", "-f", file, "--wait", "10s")
	if err == nil || !strings.Contains(out, "experiment/checkout configured") || !strings.Contains(out, "applied by 3/4 proxies") ||
		!strings.Contains(out, "api-checkout-bad") {
		t.Fatalf("allotctl apply --wait with a rejecting proxy: %v\n%s", err, out)
	}
}

// waitConnected polls GET /v1/rollout until allotd lists every node. An
// Envoy is ready before its ECDS stream reaches allotd (it serves its
// default configuration meanwhile), and a write waits only for the proxies
// connected when it is made.
func (s *system) waitConnected(nodes ...string) {
	s.t.Helper()
	harness.MustEventually(s.t, 15*time.Second, func() error {
		var status rolloutJSON
		if code := s.api("GET", "/v1/rollout", nil, &status); code != http.StatusOK {
			return fmt.Errorf("GET /v1/rollout: status %d", code)
		}
		listed := map[string]bool{}
		for _, p := range status.Proxies {
			listed[p.NodeID] = true
		}
		for _, n := range nodes {
			if !listed[n] {
				return fmt.Errorf("allotd does not list %s yet", n)
			}
		}
		return nil
	})
}
