package experiment_test

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/experiment"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// guarded is a valid experiment with two guardrails and a ramp at its
// first step.
func guarded() *experimentv1.Experiment {
	return &experimentv1.Experiment{
		Key:        "k",
		Variations: []*structpb.Value{structpb.NewStringValue("a"), structpb.NewStringValue("b"), structpb.NewStringValue("c")},
		Observe:    true,
		Coverage:   proto.Float64(0.01),
		Guardrails: []*experimentv1.Guardrail{
			{Metric: experiment.MetricErrorRate, MaxIncrease: proto.Float64(0.01)},
			{Metric: experiment.MetricLatencyP95, MaxRatio: proto.Float64(1.2), Control: 1, MinRequests: 5000},
		},
		Ramp: &experimentv1.Ramp{Steps: []*experimentv1.RampStep{
			{Coverage: 0.01, MinHold: durationpb.New(time.Hour)},
			{Coverage: 0.05, MinHold: durationpb.New(time.Hour)},
			{Coverage: 0.5},
		}},
	}
}

// TestGuardrailFields: every problem of guardrails and ramp is reported
// with its field path, and the bounds admit their limits exactly.
func TestGuardrailFields(t *testing.T) {
	if d := experiment.CheckFields(guarded()); len(d) != 0 {
		t.Fatalf("a valid experiment: %q", d)
	}
	if d := experiment.CheckBounds(guarded()); len(d) != 0 {
		t.Fatalf("a valid experiment's bounds: %q", d)
	}
	steps := func(covs ...float64) []*experimentv1.RampStep {
		var out []*experimentv1.RampStep
		for _, c := range covs {
			out = append(out, &experimentv1.RampStep{Coverage: c})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		set  func(e *experimentv1.Experiment)
		want []string // every detail, in order; nil: valid
	}{
		{"guardrails without observe", func(e *experimentv1.Experiment) { e.Observe = false },
			[]string{"guardrails: need observe: true (guardrails are evaluated on the outcomes the proxies observe)"}},
		{"no metric", func(e *experimentv1.Experiment) { e.Guardrails[0].Metric = "" },
			[]string{"guardrails[0].metric: required: errorRate or latencyP95"}},
		{"unknown metric", func(e *experimentv1.Experiment) { e.Guardrails[1].Metric = "latencyP99" },
			[]string{`guardrails[1].metric: unknown metric "latencyP99", want errorRate or latencyP95`}},
		{"errorRate without its threshold", func(e *experimentv1.Experiment) { e.Guardrails[0].MaxIncrease = nil },
			[]string{"guardrails[0].maxIncrease: required for metric errorRate"}},
		{"maxIncrease above 1", func(e *experimentv1.Experiment) { e.Guardrails[0].MaxIncrease = proto.Float64(1.5) },
			[]string{"guardrails[0].maxIncrease: 1.5, want within [0, 1]"}},
		{"maxIncrease negative", func(e *experimentv1.Experiment) { e.Guardrails[0].MaxIncrease = proto.Float64(-0.01) },
			[]string{"guardrails[0].maxIncrease: -0.01, want within [0, 1]"}},
		{"maxIncrease NaN", func(e *experimentv1.Experiment) { e.Guardrails[0].MaxIncrease = proto.Float64(math.NaN()) },
			[]string{"guardrails[0].maxIncrease: NaN, want within [0, 1]"}},
		{"maxIncrease at its bounds", func(e *experimentv1.Experiment) {
			e.Guardrails[0].MaxIncrease = proto.Float64(0)
			e.Guardrails = append(e.Guardrails, &experimentv1.Guardrail{Metric: experiment.MetricErrorRate, MaxIncrease: proto.Float64(1)})
		}, nil},
		{"errorRate with maxRatio", func(e *experimentv1.Experiment) { e.Guardrails[0].MaxRatio = proto.Float64(2) },
			[]string{"guardrails[0].maxRatio: only for metric latencyP95"}},
		{"latencyP95 without its threshold", func(e *experimentv1.Experiment) { e.Guardrails[1].MaxRatio = nil },
			[]string{"guardrails[1].maxRatio: required for metric latencyP95"}},
		{"maxRatio below 1", func(e *experimentv1.Experiment) { e.Guardrails[1].MaxRatio = proto.Float64(0.9) },
			[]string{"guardrails[1].maxRatio: 0.9, want > 1 and at most 100"}},
		{"maxRatio 1", func(e *experimentv1.Experiment) { e.Guardrails[1].MaxRatio = proto.Float64(1) },
			[]string{"guardrails[1].maxRatio: 1, want > 1 and at most 100"}},
		{"maxRatio over its bound", func(e *experimentv1.Experiment) { e.Guardrails[1].MaxRatio = proto.Float64(100.5) },
			[]string{"guardrails[1].maxRatio: 100.5, want > 1 and at most 100"}},
		{"maxRatio at its bound", func(e *experimentv1.Experiment) { e.Guardrails[1].MaxRatio = proto.Float64(100) }, nil},
		{"latencyP95 with maxIncrease", func(e *experimentv1.Experiment) { e.Guardrails[1].MaxIncrease = proto.Float64(0.1) },
			[]string{"guardrails[1].maxIncrease: only for metric errorRate"}},
		{"control out of range", func(e *experimentv1.Experiment) { e.Guardrails[1].Control = 3 },
			[]string{"guardrails[1].control: 3, want a variation index in [0, 3)"}},
		{"control negative", func(e *experimentv1.Experiment) { e.Guardrails[0].Control = -1 },
			[]string{"guardrails[0].control: -1, want a variation index in [0, 3)"}},
		{"control of weight 0", func(e *experimentv1.Experiment) { e.Weights = []float64{0.5, 0, 0.5} },
			[]string{"guardrails[1].control: variation 1 is assigned no unit (weight 0 or an empty range), so there is nothing to compare with; want a variation with a share"}},
		{"a treatment of weight 0", func(e *experimentv1.Experiment) { e.Weights = []float64{0.5, 0.5, 0} }, nil},
		{"minRequests below its bound", func(e *experimentv1.Experiment) { e.Guardrails[0].MinRequests = 99 },
			[]string{"guardrails[0].minRequests: 99, want 0 (default 1000) or 100 to 10000000"}},
		{"minRequests above its bound", func(e *experimentv1.Experiment) { e.Guardrails[0].MinRequests = 10_000_001 },
			[]string{"guardrails[0].minRequests: 10000001, want 0 (default 1000) or 100 to 10000000"}},
		{"minRequests at its bounds", func(e *experimentv1.Experiment) {
			e.Guardrails[0].MinRequests, e.Guardrails[1].MinRequests = 100, 10_000_000
		}, nil},
		{"an empty ramp", func(e *experimentv1.Experiment) { e.Ramp.Steps = nil },
			[]string{"ramp.steps: empty, want 1 to 16 steps (or no ramp)"}},
		{"a step's coverage 0", func(e *experimentv1.Experiment) { e.Ramp.Steps[1].Coverage = 0 },
			[]string{"ramp.steps[1].coverage: 0, want within (0, 1]"}},
		{"a step's coverage above 1", func(e *experimentv1.Experiment) { e.Ramp.Steps[2].Coverage = 1.01 },
			[]string{"ramp.steps[2].coverage: 1.01, want within (0, 1]"}},
		{"coverage not increasing", func(e *experimentv1.Experiment) { e.Ramp.Steps[2].Coverage = 0.05 },
			[]string{"ramp.steps[2].coverage: 0.05, want more than the previous step's 0.05"}},
		{"minHold negative", func(e *experimentv1.Experiment) { e.Ramp.Steps[0].MinHold = durationpb.New(-time.Second) },
			[]string{"ramp.steps[0].minHold: -1s, want 0s to 2592000s (30 days)"}},
		{"minHold over 30 days", func(e *experimentv1.Experiment) {
			e.Ramp.Steps[1].MinHold = durationpb.New(experiment.MaxRampHold + time.Second)
		}, []string{"ramp.steps[1].minHold: 720h0m1s, want 0s to 2592000s (30 days)"}},
		{"minHold not whole seconds", func(e *experimentv1.Experiment) { e.Ramp.Steps[0].MinHold = durationpb.New(1500 * time.Millisecond) },
			[]string{"ramp.steps[0].minHold: 1.5s, want whole seconds"}},
		{"minHold at 30 days", func(e *experimentv1.Experiment) { e.Ramp.Steps[1].MinHold = durationpb.New(experiment.MaxRampHold) }, nil},
		{"coverage other than the current step's", func(e *experimentv1.Experiment) { e.Coverage = proto.Float64(0.5) },
			[]string{"coverage: 0.5, want ramp.steps[0].coverage 0.01 while the ramp is at step 0 (omit coverage to take it)"}},
		{"coverage unset", func(e *experimentv1.Experiment) { e.Coverage = nil },
			[]string{"coverage: unset (1), want ramp.steps[0].coverage 0.01 while the ramp is at step 0 (omit coverage to take it)"}},
		{"coverage of the step allotd moved to", func(e *experimentv1.Experiment) {
			e.RampState = &experimentv1.RampState{Step: 1}
			e.Coverage = proto.Float64(0.05)
		}, nil},
		{"a ramp shorter than its state", func(e *experimentv1.Experiment) {
			e.RampState = &experimentv1.RampState{Step: 1}
			e.Ramp.Steps = steps(0.01)
		}, []string{"ramp.steps: 1 steps, but the ramp is at step 1 (rampState.step); keep that step"}},
		{"a ramp of one step", func(e *experimentv1.Experiment) { e.Ramp.Steps = steps(0.01) }, nil},
		{"a ramp to full coverage", func(e *experimentv1.Experiment) { e.Ramp.Steps = steps(0.01, 1) }, nil},
		{"a ramp without guardrails", func(e *experimentv1.Experiment) { e.Guardrails = nil }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := guarded()
			tc.set(e)
			got := experiment.CheckFields(e)
			if !slices.Equal(got, tc.want) {
				t.Errorf("CheckFields:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestGuardrailBounds: at most MaxGuardrails guardrails and MaxRampSteps
// steps, the field named past either.
func TestGuardrailBounds(t *testing.T) {
	e := guarded()
	for len(e.Guardrails) < experiment.MaxGuardrails {
		e.Guardrails = append(e.Guardrails, &experimentv1.Guardrail{Metric: experiment.MetricErrorRate, MaxIncrease: proto.Float64(0.02)})
	}
	e.Ramp.Steps = nil
	for i := range experiment.MaxRampSteps {
		e.Ramp.Steps = append(e.Ramp.Steps, &experimentv1.RampStep{Coverage: float64(i+1) / experiment.MaxRampSteps})
	}
	e.Coverage = proto.Float64(e.Ramp.Steps[0].Coverage)
	if d := slices.Concat(experiment.CheckBounds(e), experiment.CheckFields(e)); len(d) != 0 {
		t.Fatalf("at the bounds: %q", d)
	}
	e.Guardrails = append(e.Guardrails, e.Guardrails[0])
	e.Ramp.Steps = append(e.Ramp.Steps, &experimentv1.RampStep{Coverage: 1})
	want := []string{"guardrails: 9 guardrails, limit 8", "ramp.steps: 17 steps, limit 16"}
	if got := experiment.CheckBounds(e); !slices.Equal(got, want) {
		t.Errorf("one past the bounds: %q, want %q", got, want)
	}
}

// maxState is the largest state allotd can write: every number at its
// widest, every string at its bound.
func maxState() (*experimentv1.RampState, *experimentv1.Rollback) {
	ts := timestamppb.New(time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC))
	longest := ""
	for _, m := range []string{experiment.MetricErrorRate, experiment.MetricLatencyP95} {
		if len(m) > len(longest) {
			longest = m
		}
	}
	return &experimentv1.RampState{Step: math.MinInt32, StepStartTime: ts},
		&experimentv1.Rollback{
			Guardrail: math.MinInt32, Metric: longest, Control: math.MinInt32, Variation: math.MinInt32,
			ControlValue: -math.MaxFloat64 / 3, TreatmentValue: -math.SmallestNonzeroFloat64 * 3,
			ControlRequests: math.MinInt64, TreatmentRequests: math.MinInt64,
			Statistic: -1.2345678901234567e-300, PValue: -1.2345678901234567e-300, Time: ts,
			Revision: math.MinInt64, AssignmentRevision: math.MinInt64, Applied: math.MinInt32, Proxies: math.MinInt32, AppliedTime: ts,
			AcknowledgedBy: strings.Repeat("a", experiment.MaxAcknowledgedByBytes), AcknowledgeTime: ts, // ActorNamePattern: nothing JSON escapes
		}
}

// TestStateFitsReserve: the largest state allotd writes (rampState,
// rollback and assignmentRevision) adds at most
// StateReserveBytes to a document, so a document of MaxDocumentBytes
// with its state still fits MaxSpecBytes.
func TestStateFitsReserve(t *testing.T) {
	e := guarded()
	without, err := experiment.DocumentBytes(e)
	if err != nil {
		t.Fatal(err)
	}
	e.RampState, e.Rollback = maxState()
	e.AssignmentRevision = math.MaxInt64
	if n, _ := experiment.DocumentBytes(e); n != without {
		t.Errorf("DocumentBytes counts the state: %d bytes with it, %d without", n, without)
	}
	withState := specBytes(t, e)
	if grown := withState - without; grown > experiment.StateReserveBytes {
		t.Errorf("the largest state adds %d bytes, reserve %d", grown, experiment.StateReserveBytes)
	} else {
		t.Logf("the largest state adds %d of the %d bytes reserved", grown, experiment.StateReserveBytes)
	}
	if experiment.MaxDocumentBytes+experiment.StateReserveBytes != experiment.MaxSpecBytes {
		t.Errorf("MaxDocumentBytes %d + StateReserveBytes %d != MaxSpecBytes %d", experiment.MaxDocumentBytes, experiment.StateReserveBytes, experiment.MaxSpecBytes)
	}
}

// specBytes is the size of e as the store keeps it with its state: Spec
// as compact proto3 JSON, with the longest status.
func specBytes(t *testing.T, e *experimentv1.Experiment) int {
	t.Helper()
	d := experiment.Spec(e)
	d.Status = experiment.StatusRunning
	b, err := protojson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatal(err)
	}
	return buf.Len()
}

// TestServed: a variation is served unless its weight is 0 or, with
// ranges, its range is empty; omitted weights are equal, and coverage and
// force change nothing.
func TestServed(t *testing.T) {
	ranges := func(rs ...[2]float64) *structpb.ListValue {
		l := &structpb.ListValue{}
		for _, r := range rs {
			l.Values = append(l.Values, structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
				structpb.NewNumberValue(r[0]), structpb.NewNumberValue(r[1])}}))
		}
		return l
	}
	for _, tc := range []struct {
		name string
		set  func(e *experimentv1.Experiment)
		want []bool
	}{
		{"equal weights", func(e *experimentv1.Experiment) {}, []bool{true, true, true}},
		{"a weight of 0", func(e *experimentv1.Experiment) { e.Weights = []float64{0.5, 0, 0.5} }, []bool{true, false, true}},
		{"coverage 0 and force", func(e *experimentv1.Experiment) {
			e.Weights, e.Coverage, e.Force = []float64{1, 0, 0}, proto.Float64(0), proto.Int32(1)
		}, []bool{true, false, false}},
		{"an empty range", func(e *experimentv1.Experiment) {
			e.Coverage, e.Ranges = nil, ranges([2]float64{0, 0.5}, [2]float64{0.5, 0.5}, [2]float64{0.5, 0.6})
		}, []bool{true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := guarded()
			tc.set(e)
			for v, want := range tc.want {
				if got := experiment.Served(e, v); got != want {
					t.Errorf("Served(%d) = %v, want %v", v, got, want)
				}
			}
		})
	}
}

// TestAcknowledge: the acknowledging actor and time are recorded exactly
// and the rollback is no longer pending; a name ActorNameProblem refuses
// is an error and records nothing; without a rollback nothing is
// recorded.
func TestAcknowledge(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	e := guarded()
	if err := experiment.Acknowledge(e, "alice", now); err != nil || e.Rollback != nil {
		t.Fatalf("acknowledged without a rollback: %v, %v", e.Rollback, err)
	}
	e.Rollback = &experimentv1.Rollback{Guardrail: 1}
	if !experiment.RollbackPending(e) {
		t.Fatal("a rollback nobody acknowledged is not pending")
	}
	for _, name := range []string{"<&>", "bob\x01", strings.Repeat("a", experiment.MaxAcknowledgedByBytes-1) + "é", strings.Repeat("a", experiment.MaxAcknowledgedByBytes+1)} {
		if err := experiment.Acknowledge(e, name, now); err == nil || !strings.Contains(err.Error(), "actor: ") {
			t.Errorf("acknowledged by %q: %v, want an error naming the actor", name, err)
		}
		if e.Rollback.AcknowledgedBy != "" || e.Rollback.AcknowledgeTime != nil || !experiment.RollbackPending(e) {
			t.Errorf("a refused name %q recorded %v", name, e.Rollback)
		}
	}
	name := "ci.bot@team-a:42_" + strings.Repeat("x", experiment.MaxAcknowledgedByBytes-17) // at the bound
	if err := experiment.Acknowledge(e, name, now); err != nil {
		t.Fatal(err)
	}
	if e.Rollback.AcknowledgedBy != name || !e.Rollback.AcknowledgeTime.AsTime().Equal(now) || experiment.RollbackPending(e) {
		t.Errorf("after Acknowledge by %s: %v, pending %v", name, e.Rollback, experiment.RollbackPending(e))
	}
}

// TestActorNameProblem: ActorNameProblem accepts exactly the names
// ActorNamePattern matches, every one within MaxActorBytes and free of
// what JSON escapes.
func TestActorNameProblem(t *testing.T) {
	re := regexp.MustCompile(experiment.ActorNamePattern)
	names := []string{"", "a", "A9", "allotd:guardian", "ci@example.com", "a b", "<&>", "-a", "a-", "é", "a\u2028", "\x00", "a\"b",
		strings.Repeat("a", experiment.MaxActorBytes), strings.Repeat("a", experiment.MaxActorBytes+1)}
	for _, name := range names {
		ok := experiment.ActorNameProblem(name) == ""
		if ok != re.MatchString(name) {
			t.Errorf("%q: accepted %v, pattern matches %v", name, ok, re.MatchString(name))
		}
		if ok && (len(name) > experiment.MaxActorBytes || strings.ContainsAny(name, "\"<>&\\") || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r > 0x7e })) {
			t.Errorf("%q accepted", name)
		}
	}
}

// TestGuardsAreNotAssignment: guardrails, the ramp and the state allotd
// writes reach no proxy and leave the assignment revision alone (so does
// observe); a rollback (a pause) starts a new revision and the start
// after it another (figures before it are no evidence about the
// experiment started again); the coverage a ramp step writes starts one.
func TestGuardsAreNotAssignment(t *testing.T) {
	plain := guarded()
	plain.Guardrails, plain.Ramp = nil, nil
	e := guarded()
	e.RampState, e.Rollback = maxState()
	if d, want := experiment.Definition(e), experiment.Definition(plain); !proto.Equal(d, want) {
		t.Errorf("Definition with guardrails, ramp and state: %v, want %v", d, want)
	}
	if e.Guardrails == nil || e.Ramp == nil || e.Rollback == nil {
		t.Error("Definition changed its argument")
	}
	old := guarded()
	old.AssignmentRevision = 7
	next := func(change func(*experimentv1.Experiment)) int64 {
		e := proto.Clone(old).(*experimentv1.Experiment)
		change(e)
		experiment.NextAssignment(e, old)
		return e.GetAssignmentRevision()
	}
	for _, c := range []struct {
		name   string
		change func(*experimentv1.Experiment)
		want   int64
	}{
		{"nothing", func(*experimentv1.Experiment) {}, 7},
		{"guardrails, ramp and rampState", func(e *experimentv1.Experiment) {
			e.Guardrails, e.Ramp, e.RampState = nil, nil, &experimentv1.RampState{Step: 1}
		}, 7},
		{"observe", func(e *experimentv1.Experiment) { e.Observe = !e.Observe }, 7},
		{"description", func(e *experimentv1.Experiment) { e.Description = "changed" }, 7},
		{"a rollback: paused", func(e *experimentv1.Experiment) {
			e.Status = experiment.StatusPaused
			e.Rollback = &experimentv1.Rollback{Metric: "errorRate"}
		}, 8},
		{"a ramp step's coverage", func(e *experimentv1.Experiment) { e.Coverage = proto.Float64(0.05) }, 8},
		{"weights", func(e *experimentv1.Experiment) { e.Weights = []float64{0.3, 0.7} }, 8},
		{"the schedule", func(e *experimentv1.Experiment) { e.EndTime = timestamppb.Now() }, 8},
	} {
		if got := next(c.change); got != c.want {
			t.Errorf("%s: assignment revision %d, want %d", c.name, got, c.want)
		}
	}
	// The start after the rollback is a revision of its own.
	paused := proto.Clone(old).(*experimentv1.Experiment)
	paused.Status = experiment.StatusPaused
	experiment.NextAssignment(paused, old)
	started := proto.Clone(paused).(*experimentv1.Experiment)
	started.Status = experiment.StatusRunning
	experiment.NextAssignment(started, paused)
	if paused.GetAssignmentRevision() != 8 || started.GetAssignmentRevision() != 9 {
		t.Errorf("pause then start: revisions %d, %d, want 8, 9", paused.GetAssignmentRevision(), started.GetAssignmentRevision())
	}
	created := guarded()
	experiment.NextAssignment(created, nil)
	if created.GetAssignmentRevision() != 1 {
		t.Errorf("a create: revision %d, want 1", created.GetAssignmentRevision())
	}
	if d := experiment.Definition(old); d.GetAssignmentRevision() != 7 {
		t.Errorf("Definition: assignment revision %d, want 7 (the proxies tag outcome stats with it)", d.GetAssignmentRevision())
	}
}

// TestFillRampCoverage: an unset coverage of a ramped experiment takes the
// coverage of the step its state is at; a set one is left alone.
func TestFillRampCoverage(t *testing.T) {
	e := guarded()
	e.Coverage = nil
	e.RampState = &experimentv1.RampState{Step: 1}
	experiment.FillRampCoverage(e)
	if e.Coverage == nil || *e.Coverage != 0.05 {
		t.Errorf("coverage %v, want step 1's 0.05", e.Coverage)
	}
	e.Coverage = proto.Float64(0.3)
	experiment.FillRampCoverage(e)
	if *e.Coverage != 0.3 {
		t.Errorf("a set coverage changed to %v", *e.Coverage)
	}
	none := &experimentv1.Experiment{Key: "k"}
	experiment.FillRampCoverage(none)
	if none.Coverage != nil {
		t.Errorf("without a ramp coverage became %v", *none.Coverage)
	}
}
