//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// TestConsoleGuardrails: the console's experiment page shows an
// experiment's guardrails, its ramp at the step allotd reached and a
// rollback allotd recorded; Start is disabled while the rollback is not
// acknowledged, and "Acknowledge and start" restarts it, recording alice.
// The form offers guardrails and ramp as JSON, never the state. The state
// is written into allotd's bbolt file while allotd is stopped, through
// admin.Service.WriteState as the controller (not yet implemented) will.
func TestConsoleGuardrails(t *testing.T) {
	s := startSystem(t)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "guarded", "owner": "team-a", "services": []string{"shop"}, "variations": []string{"classic", "one-page"}, "observe": true,
		"guardrails": []map[string]any{{"metric": "errorRate", "maxIncrease": 0.01}, {"metric": "latencyP95", "maxRatio": 1.2, "minRequests": "5000"}},
		"ramp":       map[string]any{"steps": []map[string]any{{"coverage": 0.01, "minHold": "3600s"}, {"coverage": 0.05, "minHold": "86400s"}, {"coverage": 0.5}}},
	}, nil)

	// What allotd's controller will write: the ramp at its second step,
	// then a rollback that paused the experiment.
	s.allotd.MustTerminate(t)
	db, err := bolt.Open(s.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	svc := admin.NewService(db, nil)
	_, err = svc.WriteState(context.Background(), "guarded", 0, "allotd", func(x *experimentv1.Experiment) {
		c := 0.05
		x.Coverage = &c
		x.RampState = &experimentv1.RampState{Step: 1, StepStartTime: timestamppb.New(at)}
	})
	if err == nil {
		_, err = svc.WriteState(context.Background(), "guarded", 0, "allotd", func(x *experimentv1.Experiment) {
			x.Status = experiment.StatusPaused
			x.Rollback = &experimentv1.Rollback{Guardrail: 0, Metric: experiment.MetricErrorRate, Variation: 1, ControlValue: 0.002, TreatmentValue: 0.04,
				ControlRequests: 6000, TreatmentRequests: 5900, Statistic: 14.1, PValue: 1e-9, Time: timestamppb.New(at), Revision: 3, Applied: 2, Proxies: 2}
		})
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	s.startAllotd()

	br := startBrowser(t, s.adminURL)
	br.signIn(ownerToken, "alice · owner of team-a")
	br.open("#/experiments/guarded")
	br.waitFor("#guards", 10*time.Second)
	if n := br.count("#guards tr[id^=guardrail-]"); n != 2 {
		t.Errorf("%d guardrail rows, want 2", n)
	}
	for sel, want := range map[string]string{
		"#guardrail-0 td[data-label=Metric]": "errorRate",
		"#guardrail-0":                       "≤ +1.0 pt",
		"#guardrail-1":                       "≤ ×1.2",
		"#ramp-where":                        "step 2 of 3, coverage 5%",
		".ramp-current":                      "5% (hold 1d)",
		"#rollback":                          "one-page's errorRate was 4.0% against control classic's 0.2% (5,900 and 6,000 requests",
		"#rollback .rollback-line":           "Rolled back by guardrail 0 (errorRate): waiting for the proxies.",
	} {
		if got := br.text(sel); !strings.Contains(got, want) {
			t.Errorf("%s shows %q, want %q in it", sel, got, want)
		}
	}
	br.waitText("#guardrail-1", "5,000", 5*time.Second)
	br.waitText("#rollback", "Not acknowledged", 5*time.Second)
	if off, why := br.disabled("#action-start"); !off || !strings.Contains(why, "acknowledge the rollback") {
		t.Errorf("Start while the rollback is pending: disabled %v (%q), want disabled naming the acknowledgement", off, why)
	}
	br.narrow("")

	br.click("#action-acknowledge")
	br.waitText("#outcome", "now running", 15*time.Second)
	br.waitText("#rollback", "Acknowledged by alice", 10*time.Second)
	if br.count("#action-acknowledge") != 0 {
		t.Error("the acknowledge button stays after the acknowledgement")
	}
	var got struct {
		Status   string `json:"status"`
		Rollback struct {
			AcknowledgedBy string `json:"acknowledgedBy"`
		} `json:"rollback"`
	}
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/guarded", nil, &got)
	if got.Status != experiment.StatusRunning || got.Rollback.AcknowledgedBy != "alice" {
		t.Errorf("after the console's acknowledgement the API has %+v, want running, acknowledged by alice", got)
	}

	br.open("#/experiments/guarded/edit")
	br.waitFor("#f-rest", 10*time.Second)
	rest := br.eval(`document.querySelector('#f-rest').value`)
	if !strings.Contains(rest, `"guardrails"`) || !strings.Contains(rest, `"ramp"`) || strings.Contains(rest, "rollback") || strings.Contains(rest, "rampState") {
		t.Errorf("the form's other fields: %s\nwant guardrails and ramp, no rollback or rampState", rest)
	}
}

// TestConsoleGuardrailTests: real allotd (its guardian checking every
// second) and two real Envoys reporting their outcomes. Experiment "bad"
// has a ramp held an hour at its first step, a guardrail on the error rate
// and one on the p95 whose minimum cannot be met; the echo upstream fails a
// third of the requests of variation b until the guardian rolls it back.
// The outcomes panel's Guardrails table shows what GET …/outcomes returns
// (the guardrail and threshold, both values, the estimate, the p-value and
// the state: b breached and rolled back, c holding, the p95 collecting),
// the ramp line its step and hold, the rollback line the proxies' n/m; a
// ramp at its last step says so.
func TestConsoleGuardrailTests(t *testing.T) {
	s := startSystemFor(t, wasmArtifact, "-guardian-interval", "1s")
	proxies := []*proxy{s.startSinkSidecar("console-guard-1", "shop"), s.startSinkSidecar("console-guard-2", "shop")}
	s.waitConnected("console-guard-1", "console-guard-2")
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", map[string]any{
		"key": "bad", "services": []string{"shop"}, "variations": []string{"a", "b", "c"}, "observe": true,
		"description": "A checkout whose variation b fails a third of its requests.",
		"guardrails": []map[string]any{{"metric": "errorRate", "maxIncrease": 0.01, "minRequests": 100},
			{"metric": "latencyP95", "maxRatio": 1.2, "minRequests": 10000000}},
		"ramp": map[string]any{"steps": []map[string]any{{"coverage": 0.9, "minHold": "3600s"}, {"coverage": 1}}},
	}, &w)
	if !w.Rollout.appliedBy(2) {
		t.Fatalf("create: %+v", w.Rollout)
	}
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{"key": "done", "services": []string{"elsewhere"}, "variations": []string{"a", "b"},
		"ramp": map[string]any{"steps": []map[string]any{{"coverage": 0.5}, {"coverage": 1}}}}, nil)

	br := startBrowser(t, s.adminURL)
	br.signIn(adminToken, "e2e · admin")
	// The guardian starts the ramp at its first step; the page follows.
	br.open("#/experiments/bad")
	br.waitText("#ramp-where", "step 1 of 2, coverage 90%", 15*time.Second)
	br.waitText("#ramp-where", "of 1h.", 5*time.Second)
	if got := br.text("#ramp .ramp-current"); got != "90% (hold 1h)" {
		t.Errorf("the current step shows %q, want %q", got, "90% (hold 1h)")
	}

	e, sent := failUntilRolledBack(t, s, proxies, "bad")
	t.Logf("rolled back after %d requests", sent)
	if e.Rollback.Variation != 1 || e.Rollback.Applied != 2 || e.Rollback.Proxies != 2 {
		t.Fatalf("rollback %+v, want variation 1 applied by 2/2", *e.Rollback)
	}
	appliedAt, err := time.Parse(time.RFC3339Nano, e.Rollback.AppliedTime)
	if err != nil {
		t.Fatal(err)
	}
	br.waitText("#rollback .rollback-line", "Rolled back by guardrail 0 (errorRate): applied by 2/2 proxies at "+appliedAt.Local().Format(time.DateTime)+".", 10*time.Second)
	br.waitText("h1", "paused", 5*time.Second)

	// The table is the API's: every status, each cell as the API has it.
	harness.MustEventually(t, 20*time.Second, func() error { return guardrailTableShowsAPI(s, br, "bad", []string{"a", "b", "c"}) })
	for sel, want := range map[string]string{
		`tr[data-guardrail="0"][data-variation="1"]`: "breached",
		`tr[data-guardrail="0"][data-variation="2"]`: "holding",
		`tr[data-guardrail="1"][data-variation="1"]`: "collecting",
		`tr[data-guardrail="1"][data-variation="2"]`: "collecting",
	} {
		if got := br.eval(`document.querySelector('#outcomes table.guardrail-status ` + sel + `')?.dataset.state || 'missing'`); got != want {
			t.Errorf("%s: state %s, want %s", sel, got, want)
		}
	}
	if got := br.eval(`getComputedStyle(document.querySelector('#outcomes tr.guard-breached td')).backgroundColor`); got != "rgb(255, 235, 233)" {
		t.Errorf("the breached row's background: %s, want highlighted", got)
	}

	// The ramp line: the step allotd holds, since when, how long of its
	// minHold.
	var st struct {
		RampState struct {
			Step          int       `json:"step"`
			StepStartTime time.Time `json:"stepStartTime"`
		} `json:"rampState"`
	}
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/bad", nil, &st)
	if st.RampState.Step != 0 || st.RampState.StepStartTime.IsZero() {
		t.Fatalf("ramp state %+v, want step 0 with its start", st.RampState)
	}
	got := br.text("#ramp-where")
	held := time.Since(st.RampState.StepStartTime).Truncate(time.Second)
	if want := "step 1 of 2, coverage 90%, held since " + st.RampState.StepStartTime.Local().Format(time.DateTime) + "; held "; !strings.Contains(got, want) || !strings.HasSuffix(got, " of 1h.") {
		t.Errorf("the ramp shows %q, want %q… of 1h (held about %v)", got, want, held)
	}
	br.screenshot("guardrails")
	br.narrow("guardrails-narrow")

	// A ramp at its last step.
	harness.MustEventually(t, 15*time.Second, func() error {
		var d experimentJSON
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/done", nil, &d)
		if d.RampState == nil || d.RampState.Step != 1 {
			return fmt.Errorf("experiment done: ramp %+v", d.RampState)
		}
		return nil
	})
	br.open("#/experiments/done")
	if got := br.waitText("#ramp-where", "final step", 10*time.Second); !strings.Contains(got, "step 2 of 2, coverage 100%") {
		t.Errorf("the last step shows %q", got)
	}
}

// guardrailTableShowsAPI compares the outcomes panel's Guardrails table
// with GET /v1/experiments/{key}/outcomes: a row per status, in its order,
// each cell the API's value as the console renders it (rates in %, p95s in
// ms, the estimate in points or as a ratio, the p-value to two significant
// digits), the state from evaluated, breached and reason.
func guardrailTableShowsAPI(s *system, br *browser, key string, names []string) error {
	var raw json.RawMessage
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/"+key+"/outcomes", nil, &raw)
	var o adminv1.Outcomes
	if err := protojson.Unmarshal(raw, &o); err != nil {
		return err
	}
	// While a rolled-back experiment is paused, the page shows the tests of
	// the revision that broke the guardrail (the evidence); else the
	// current revision's.
	var e experimentJSON
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/"+key, nil, &e)
	statuses := o.Guardrails
	if e.Rollback != nil && e.Status != "running" && e.Status != "" {
		for _, r := range o.GetEarlier() {
			if r.GetRevision() == e.Rollback.AssignmentRevision {
				statuses = r.GetGuardrails()
			}
		}
	}
	var rows []map[string]string
	page := br.eval(`JSON.stringify([...document.querySelectorAll('#outcomes table.guardrail-status tbody tr')].map((tr) =>
		Object.fromEntries([['row', tr.dataset.guardrail + '/' + tr.dataset.variation], ...[...tr.cells].map((td) => [td.dataset.label, td.innerText])])))`)
	if err := json.Unmarshal([]byte(page), &rows); err != nil {
		return fmt.Errorf("the table %s: %w", page, err)
	}
	if len(statuses) == 0 || len(rows) != len(statuses) {
		return fmt.Errorf("the table has %d rows, the API %d statuses; the outcomes panel shows:\n%s", len(rows), len(statuses), br.text("#outcomes"))
	}
	for i, g := range statuses {
		r := rows[i]
		value := func(v float64) string {
			if v == 0 { // proto3 JSON leaves a zero out: the page shows none
				return "—"
			}
			return fmt.Sprintf("%.1f ms", v)
		}
		limit := fmt.Sprintf("latencyP95 ≤ ×%v", g.Threshold)
		estimate := fmt.Sprintf("×%.2f", g.Estimate)
		if g.Metric == "errorRate" {
			value = func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
			limit = fmt.Sprintf("errorRate ≤ +%.1f pt", 100*g.Threshold)
			estimate = fmt.Sprintf("+%.1f pt", 100*g.Estimate)
			if g.Estimate < 0 {
				estimate = fmt.Sprintf("−%.1f pt", -100*g.Estimate)
			}
		}
		state, p := "collecting ("+g.Reason+")", "—"
		switch {
		case g.Breached:
			state = "breached — rolled back"
		case g.Evaluated:
			state = "holding"
		}
		if !g.Evaluated {
			estimate = "—"
		}
		want := map[string]string{
			"row":             fmt.Sprintf("%d/%d", g.Guardrail, g.Variation),
			"guardrail":       limit,
			"treatment":       names[g.Variation] + " against " + names[g.Control],
			"control value":   value(g.ControlValue),
			"treatment value": value(g.TreatmentValue),
			"estimate":        estimate,
			"state":           state,
		}
		for col, w := range want {
			if r[col] != w {
				return fmt.Errorf("row %d %s: the table shows %q, the API %q (%v)", i, col, r[col], w, g)
			}
		}
		// The p-value, to two significant digits.
		if !g.Evaluated {
			if r["p-value"] != p {
				return fmt.Errorf("row %d p-value: %q, want %q before the test runs", i, r["p-value"], p)
			}
			continue
		}
		shown, err := strconv.ParseFloat(r["p-value"], 64)
		if err != nil || math.Abs(shown-g.PValue) > 0.051*g.PValue {
			return fmt.Errorf("row %d p-value: the table shows %q, the API %v", i, r["p-value"], g.PValue)
		}
	}
	return nil
}
