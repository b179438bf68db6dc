package experiment_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/experiment"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// TestTransitionsHelp: the lifecycle the error messages state is
// Transitions, move for move.
func TestTransitionsHelp(t *testing.T) {
	rest, ok := strings.CutPrefix(experiment.TransitionsHelp, "allowed: ")
	if !ok {
		t.Fatalf("TransitionsHelp %q does not start with \"allowed: \"", experiment.TransitionsHelp)
	}
	moves, final, _ := strings.Cut(rest, "; ")
	got := map[string][]string{}
	for m := range strings.SplitSeq(moves, ", ") {
		from, tos, ok := strings.Cut(m, " → ")
		if !ok {
			t.Fatalf("TransitionsHelp: %q is not \"from → to|to\"", m)
		}
		got[from] = strings.Split(tos, "|")
	}
	for st := range strings.SplitSeq(strings.TrimSuffix(final, " is final"), ", ") {
		got[st] = nil
	}
	for from, tos := range experiment.Transitions {
		if g, ok := got[from]; !ok || !slices.Equal(g, tos) {
			t.Errorf("TransitionsHelp says %s → %q, Transitions %q", from, g, tos)
		}
	}
	if len(got) != len(experiment.Transitions) {
		t.Errorf("TransitionsHelp names %d statuses, Transitions %d", len(got), len(experiment.Transitions))
	}
}

// TestRunning: only a running (or status-less) experiment runs, from its
// start time included to its end time excluded.
func TestRunning(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	end := start.Add(time.Hour)
	scheduled := func(status string) *experimentv1.Experiment {
		return &experimentv1.Experiment{Key: "k", Status: status, StartTime: timestamppb.New(start), EndTime: timestamppb.New(end)}
	}
	for _, tc := range []struct {
		name string
		e    *experimentv1.Experiment
		at   time.Time
		want bool
	}{
		{"no status, no schedule", &experimentv1.Experiment{Key: "k"}, start, true},
		{"before the start", scheduled(""), start.Add(-time.Nanosecond), false},
		{"at the start", scheduled(experiment.StatusRunning), start, true},
		{"just before the end", scheduled(experiment.StatusRunning), end.Add(-time.Nanosecond), true},
		{"at the end", scheduled(experiment.StatusRunning), end, false},
		{"draft", scheduled(experiment.StatusDraft), start, false},
		{"paused", scheduled(experiment.StatusPaused), start, false},
		{"stopped", scheduled(experiment.StatusStopped), start, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := experiment.Running(tc.e, tc.at); got != tc.want {
				t.Errorf("Running at %v: %v, want %v", tc.at, got, tc.want)
			}
		})
	}
}

// TestAppliesTo: an experiment without services applies to every
// service, one with services to those only.
func TestAppliesTo(t *testing.T) {
	every := &experimentv1.Experiment{Key: "k"}
	some := &experimentv1.Experiment{Key: "k", Services: []string{"checkout", "search"}}
	for _, tc := range []struct {
		e       *experimentv1.Experiment
		service string
		want    bool
	}{
		{every, "checkout", true}, {every, "", true},
		{some, "search", true}, {some, "cart", false}, {some, "", false},
	} {
		if got := experiment.AppliesTo(tc.e, tc.service); got != tc.want {
			t.Errorf("AppliesTo(services %q, %q): %v, want %v", tc.e.Services, tc.service, got, tc.want)
		}
	}
}

// TestDefinition: a proxy gets what the filter evaluates and nothing the
// control plane keeps for itself; the original is left alone.
func TestDefinition(t *testing.T) {
	e := &experimentv1.Experiment{Key: "k", Seed: "s", Status: experiment.StatusPaused, Owner: "team-a",
		Services: []string{"checkout"}, Description: "d", StartTime: timestamppb.Now(), EndTime: timestamppb.Now(),
		Revision: 3, CreatedBy: "alice", UpdatedBy: "bob", CreateTime: timestamppb.Now(), UpdateTime: timestamppb.Now()}
	d := experiment.Definition(e)
	want := &experimentv1.Experiment{Key: "k", Seed: "s"}
	if d.String() != want.String() {
		t.Errorf("Definition: %v, want %v", d, want)
	}
	s := experiment.Spec(e)
	if s.Revision != 0 || s.CreatedBy != "" || s.UpdateTime != nil || s.Owner != "team-a" || s.Status != experiment.StatusPaused {
		t.Errorf("Spec: %v, want the definition without output-only fields", s)
	}
	if e.Owner != "team-a" || e.Revision != 3 {
		t.Errorf("Definition changed its argument: %v", e)
	}
}

// TestServiceNameProblem: the rule every service name meets, in an
// experiment's services and as the cluster a proxy presents.
func TestServiceNameProblem(t *testing.T) {
	for _, tt := range []struct {
		name, want string
	}{
		{"checkout-svc", ""},
		{"checkout.team-a.svc", ""},
		{"caf\u00e9", ""},
		{strings.Repeat("s", experiment.MaxServiceNameBytes), ""},
		{"", "empty service name"},
		{strings.Repeat("s", experiment.MaxServiceNameBytes+1), "129 bytes, limit 128"},
		{"shop<script>", "not valid UTF-8"},
		{"a\"b", "not valid UTF-8"},
		{"a\nb", "not valid UTF-8"},
		{"a\u2028b", "not valid UTF-8"},
		{"\xff", "not valid UTF-8"},
	} {
		got := experiment.ServiceNameProblem(tt.name)
		if (tt.want == "") != (got == "") || !strings.HasPrefix(got, tt.want) {
			t.Errorf("ServiceNameProblem(%q) = %q, want %q…", tt.name, got, tt.want)
		}
	}
}
