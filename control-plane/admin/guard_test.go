package admin_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// guardedDoc is an experiment with guardrails and a ramp, without
// coverage (the API takes the first step's), and with state an owner may
// not write (the API drops it).
const guardedDoc = `{"key": "checkout", "variations": ["control", "treatment"], "observe": true,
  "guardrails": [{"metric": "errorRate", "maxIncrease": 0.01},
                 {"metric": "latencyP95", "maxRatio": 1.2, "minRequests": "5000"}],
  "ramp": {"steps": [{"coverage": 0.01, "minHold": "3600s"}, {"coverage": 0.05, "minHold": "3600s"}, {"coverage": 0.5}]},
  "rampState": {"step": 2}, "rollback": {"guardrail": 1, "acknowledgedBy": "forged"}}`

// getExp reads key over HTTP as the resource.
func (e *env) getExp(key string) *experimentv1.Experiment {
	e.t.Helper()
	code, b := e.do(readerToken, "GET", "/v1/experiments/"+key, "")
	if code != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", key, code, b)
	}
	x := &experimentv1.Experiment{}
	if err := protojson.Unmarshal(b, x); err != nil {
		e.t.Fatalf("decode %s: %v", b, err)
	}
	return x
}

// writeState writes state into the stored experiment key as allotd does
// (admin.Service.WriteState, as actor "allotd").
func (e *env) writeState(key string, set func(x *experimentv1.Experiment)) {
	e.t.Helper()
	if _, err := admin.NewService(e.store, nil).WriteState(context.Background(), key, 0, "allotd", set); err != nil {
		e.t.Fatal(err)
	}
}

// TestGuardrailsAndRampThroughTheAPI: the API takes guardrails and a ramp,
// fills coverage from the ramp's step, returns them on every read and
// transport, and keeps the state allotd wrote whatever an owner's write
// sends.
func TestGuardrailsAndRampThroughTheAPI(t *testing.T) {
	e := newEnv(t, nil)
	e.mustDo(http.StatusCreated, aliceToken, "POST", "/v1/experiments", guardedDoc, nil)
	got := e.getExp("checkout")
	if len(got.Guardrails) != 2 || got.Guardrails[1].GetMaxRatio() != 1.2 || got.Guardrails[1].GetMinRequests() != 5000 ||
		got.Guardrails[0].GetMaxIncrease() != 0.01 || len(got.GetRamp().GetSteps()) != 3 ||
		got.Ramp.Steps[0].GetMinHold().AsDuration() != time.Hour {
		t.Errorf("created: %v, want the guardrails and ramp sent", got)
	}
	if got.Coverage == nil || got.GetCoverage() != 0.01 {
		t.Errorf("coverage %v, want the first step's 0.01", got.Coverage)
	}
	if got.RampState != nil || got.Rollback != nil {
		t.Errorf("an owner's create wrote state: rampState %v, rollback %v", got.RampState, got.Rollback)
	}
	g, err := e.client.GetExperiment(ctx(readerToken), &adminv1.GetExperimentRequest{Key: "checkout"})
	if err != nil || len(g.GetGuardrails()) != 2 || len(g.GetRamp().GetSteps()) != 3 {
		t.Errorf("gRPC get: %v, %v", g, err)
	}

	// allotd advances the ramp.
	e.writeState("checkout", func(x *experimentv1.Experiment) {
		x.RampState = &experimentv1.RampState{Step: 1, StepStartTime: timestamppb.New(e.now)}
		x.Coverage = proto.Float64(0.05)
	})
	got = e.getExp("checkout")

	// An owner's update without coverage and with forged state: the stored
	// state stays, coverage is the current step's.
	forged := strings.Replace(guardedDoc, `"key": "checkout",`, `"key": "checkout", "description": "d2", "revision": "`+strconv.FormatInt(got.Revision, 10)+`",`, 1)
	e.mustDo(http.StatusOK, aliceToken, "PUT", "/v1/experiments/checkout", forged, nil)
	up := e.getExp("checkout")
	if up.GetDescription() != "d2" || up.GetRampState().GetStep() != 1 || !up.GetRampState().GetStepStartTime().AsTime().Equal(e.now) ||
		up.Rollback != nil || up.GetCoverage() != 0.05 {
		t.Errorf("after an owner's update: description %q, rampState %v, rollback %v, coverage %v; want d2, step 1 since %v, no rollback, 0.05",
			up.GetDescription(), up.RampState, up.Rollback, up.GetCoverage(), e.now)
	}

	// A coverage other than the step's is refused, naming it.
	var ae apiError
	bad := strings.Replace(guardedDoc, `"observe": true,`, `"observe": true, "coverage": 0.5, "revision": "`+strconv.FormatInt(up.Revision, 10)+`",`, 1)
	e.mustDo(http.StatusBadRequest, aliceToken, "PUT", "/v1/experiments/checkout", bad, &ae)
	want := "coverage: 0.5, want ramp.steps[1].coverage 0.05 while the ramp is at step 1 (omit coverage to take it)"
	if !slices.Contains(ae.Error.Details, want) {
		t.Errorf("details %q lack %q", ae.Error.Details, want)
	}
}

// TestGuardrailErrorsOverBothTransports: a bad guardrail or ramp is
// invalid input naming every bad field, over HTTP and gRPC alike.
func TestGuardrailErrorsOverBothTransports(t *testing.T) {
	e := newEnv(t, nil)
	doc := `{"key": "checkout", "variations": ["control", "treatment"],
	  "guardrails": [{"metric": "errorRate", "maxIncrease": 0.01}, {"metric": "latencyP95", "maxRatio": 0.9, "control": 2}],
	  "ramp": {"steps": [{"coverage": 0.05}, {"coverage": 0.05, "minHold": "2592001s"}]}}`
	want := []string{
		"guardrails: need observe: true (guardrails are evaluated on the outcomes the proxies observe)",
		"guardrails[1].maxRatio: 0.9, want > 1 and at most 100",
		"guardrails[1].control: 2, want a variation index in [0, 2)",
		"ramp.steps[1].coverage: 0.05, want more than the previous step's 0.05",
		"ramp.steps[1].minHold: 720h0m1s, want 0s to 2592000s (30 days)",
	}
	var ae apiError
	e.mustDo(http.StatusBadRequest, aliceToken, "POST", "/v1/experiments", doc, &ae)
	for _, w := range want {
		if !slices.Contains(ae.Error.Details, w) {
			t.Errorf("HTTP details %q lack %q", ae.Error.Details, w)
		}
	}
	x := &experimentv1.Experiment{}
	if err := protojson.Unmarshal([]byte(doc), x); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.CreateExperiment(ctx(aliceToken), &adminv1.CreateExperimentRequest{Experiment: x})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("gRPC create: %v, want InvalidArgument", err)
	}
	for _, w := range want {
		if !strings.Contains(status.Convert(err).Message(), w) {
			t.Errorf("gRPC message %q lacks %q", status.Convert(err).Message(), w)
		}
	}
}

// TestRollbackAcknowledgedByStart: an experiment allotd rolled back cannot
// be started again — by start or by an update to running — until a start
// acknowledges the rollback, which records who and when in the same write.
func TestRollbackAcknowledgedByStart(t *testing.T) {
	e := newEnv(t, nil)
	e.mustDo(http.StatusCreated, aliceToken, "POST", "/v1/experiments", guardedDoc, nil)
	for i, key := range []string{"checkout", "search"} {
		if i > 0 {
			e.mustDo(http.StatusCreated, aliceToken, "POST", "/v1/experiments", strings.Replace(guardedDoc, `"checkout"`, `"`+key+`"`, 1), nil)
		}
		// allotd rolls it back: paused, with the failed guardrail.
		e.writeState(key, func(x *experimentv1.Experiment) {
			x.Status = experiment.StatusPaused
			x.Rollback = &experimentv1.Rollback{Guardrail: 0, Metric: experiment.MetricErrorRate, Variation: 1, ControlValue: 0.01,
				TreatmentValue: 0.05, Statistic: 4.2, PValue: 1e-5, Time: timestamppb.New(e.now), Applied: 3, Proxies: 3}
		})
	}

	refused := func(what string, code int, body []byte) {
		t.Helper()
		if code != http.StatusConflict || !strings.Contains(string(body), "rolled back by guardrails[0]") || !strings.Contains(string(body), "acknowledgeRollback") {
			t.Errorf("%s of a rolled-back experiment: %d %s, want 409 naming the guardrail and acknowledgeRollback", what, code, body)
		}
	}
	code, b := e.do(aliceToken, "POST", "/v1/experiments/checkout:start", "")
	refused("HTTP start", code, b)
	x := e.getExp("checkout")
	upd := strings.Replace(guardedDoc, `"observe": true,`, `"observe": true, "status": "running", "revision": "`+strconv.FormatInt(x.Revision, 10)+`",`, 1)
	code, b = e.do(aliceToken, "PUT", "/v1/experiments/checkout", upd)
	refused("update to running", code, b)
	_, err := e.client.StartExperiment(ctx(aliceToken), &adminv1.StartExperimentRequest{Key: "checkout"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "acknowledgeRollback") {
		t.Errorf("gRPC start: %v, want FailedPrecondition naming acknowledgeRollback", err)
	}
	var ae apiError
	e.mustDo(http.StatusBadRequest, aliceToken, "POST", "/v1/experiments/checkout:pause", `{"acknowledgeRollback": true}`, &ae)
	if !slices.Contains(ae.Error.Details, "acknowledgeRollback: only a start acknowledges a rollback") {
		t.Errorf("pause with acknowledgeRollback: %+v", ae.Error)
	}
	if got := e.getExp("checkout"); got.Revision != x.Revision || experiment.Status(got) != experiment.StatusPaused {
		t.Fatalf("a refused start wrote: revision %d → %d, status %s", x.Revision, got.Revision, experiment.Status(got))
	}
	// An owner of another namespace cannot acknowledge.
	if code, b := e.do(bobToken, "POST", "/v1/experiments/checkout:start", `{"acknowledgeRollback": true}`); code != http.StatusForbidden {
		t.Errorf("bob acknowledging team-a's rollback: %d %s, want 403", code, b)
	}

	e.now = e.now.Add(time.Minute)
	e.mustDo(http.StatusOK, aliceToken, "POST", "/v1/experiments/checkout:start", `{"acknowledgeRollback": true}`, nil)
	got := e.getExp("checkout")
	if experiment.Status(got) != experiment.StatusRunning || got.GetRollback().GetAcknowledgedBy() != "alice" ||
		!got.GetRollback().GetAcknowledgeTime().AsTime().Equal(e.now) || got.GetRollback().GetTreatmentValue() != 0.05 {
		t.Errorf("after an acknowledging start: status %s, rollback %v; want running, acknowledged by alice at %v, figures kept",
			experiment.Status(got), got.Rollback, e.now)
	}
	// Acknowledged: pause and start as usual.
	e.mustDo(http.StatusOK, aliceToken, "POST", "/v1/experiments/checkout:pause", "", nil)
	e.mustDo(http.StatusOK, aliceToken, "POST", "/v1/experiments/checkout:start", "", nil)

	// gRPC acknowledges the same way.
	r, err := e.client.StartExperiment(ctx(aliceToken), &adminv1.StartExperimentRequest{Key: "search", AcknowledgeRollback: true})
	if err != nil || experiment.Status(r) != experiment.StatusRunning || r.GetRollback().GetAcknowledgedBy() != "alice" {
		t.Errorf("gRPC acknowledging start: %v, %v", r, err)
	}
}

// TestWriteStateRefusesMore: allotd's state write changes state, coverage
// and a status other than running, nothing else; a ramp step's coverage
// is validated; a rollback of a document is written whatever it holds.
func TestWriteStateRefusesMore(t *testing.T) {
	e := newEnv(t, nil)
	e.mustDo(http.StatusCreated, aliceToken, "POST", "/v1/experiments", guardedDoc, nil)
	svc := admin.NewService(e.store, nil)
	before := e.getExp("checkout")
	for _, tc := range []struct {
		name string
		set  func(x *experimentv1.Experiment)
		want string
	}{
		{"a description", func(x *experimentv1.Experiment) { x.Description = "d" }, "changes more than rampState, rollback, coverage and status"},
		{"a guardrail", func(x *experimentv1.Experiment) { x.Guardrails[0].MaxIncrease = proto.Float64(0.5) }, "changes more than"},
		{"back to draft", func(x *experimentv1.Experiment) { x.Status = experiment.StatusDraft }, "status running → draft"},
		{"a coverage off the ramp", func(x *experimentv1.Experiment) { x.Coverage = proto.Float64(0.05) },
			"coverage: 0.05, want ramp.steps[0].coverage 0.01 while the ramp is at step 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := svc.WriteState(context.Background(), "checkout", 0, "allotd", tc.set)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("WriteState: %v, want an error with %q", err, tc.want)
			}
		})
	}
	if got := e.getExp("checkout"); got.Revision != before.Revision {
		t.Fatalf("a refused state write wrote: revision %d → %d", before.Revision, got.Revision)
	}
	paused, err := svc.WriteState(context.Background(), "checkout", 0, "allotd", func(x *experimentv1.Experiment) {
		x.Status = experiment.StatusPaused
		x.Rollback = &experimentv1.Rollback{Metric: experiment.MetricErrorRate}
	})
	if err != nil || experiment.Status(paused) != experiment.StatusPaused || paused.GetUpdatedBy() != "allotd" || paused.GetRollback() == nil {
		t.Fatalf("a rollback that pauses: %v, %v", paused, err)
	}
	if _, err := svc.WriteState(context.Background(), "checkout", 0, "allotd", func(x *experimentv1.Experiment) { x.Status = experiment.StatusRunning }); err == nil ||
		!strings.Contains(err.Error(), "never start") {
		t.Errorf("allotd restarted a paused experiment: %v", err)
	}
	if _, err := svc.WriteState(context.Background(), "checkout", 0, "allotd", func(x *experimentv1.Experiment) { x.Status = experiment.StatusStopped }); err != nil {
		t.Errorf("allotd stopping a paused experiment: %v", err)
	}
}
