package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// guardedYAML is an experiment with guardrails and a ramp, without
// coverage (the API takes the ramp step's).
const guardedYAML = `key: checkout
owner: team-a
variations: [control, treatment]
observe: true
guardrails:
  - metric: errorRate
    maxIncrease: 0.01
  - metric: latencyP95
    maxRatio: 1.2
    minRequests: 5000
ramp:
  steps:
    - {coverage: 0.01, minHold: 3600s}
    - {coverage: 0.05, minHold: 86400s}
    - {coverage: 0.5}
`

// TestGuardrailsAndRamp: allotctl apply takes guardrails and a ramp from a
// file and finds the file unchanged whatever state allotd wrote since;
// get shows guardrails, ramp and rollback; start refuses a rolled-back
// experiment until --acknowledge-rollback.
func TestGuardrailsAndRamp(t *testing.T) {
	url, db := startAPIStore(t)
	t.Setenv("ALLOT_SERVER", url)
	t.Setenv("ALLOT_TOKEN", "admin-token-0123456789")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	file := filepath.Join(t.TempDir(), "checkout.yaml")
	if err := os.WriteFile(file, []byte(guardedYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := Run(context.Background(), args, strings.NewReader(""), &out, &out)
		return out.String(), err
	}
	expect := func(want string, args ...string) {
		t.Helper()
		out, err := run(args...)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("allotctl %s: %v\n%s\nwant it to contain %q", strings.Join(args, " "), err, out, want)
		}
	}

	expect("experiment/checkout created (revision 1)", "apply", "-f", file)
	expect("experiment/checkout unchanged (revision 1)", "apply", "-f", file)

	// allotd moves the ramp to its second step: the file is unchanged.
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	svc := admin.NewService(db, nil)
	allotd := func(set func(x *experimentv1.Experiment)) {
		t.Helper()
		if _, err := svc.WriteState(context.Background(), "checkout", 0, "allotd", set); err != nil {
			t.Fatal(err)
		}
	}
	allotd(func(x *experimentv1.Experiment) {
		c := 0.05
		x.Coverage = &c
		x.RampState = &experimentv1.RampState{Step: 1, StepStartTime: timestamppb.New(at)}
	})
	expect("experiment/checkout unchanged (revision 2)", "apply", "-f", file)

	// allotd rolls it back (pauses it): applying the file, which says
	// running, is refused until the rollback is acknowledged.
	allotd(func(x *experimentv1.Experiment) {
		x.Status = experiment.StatusPaused
		x.Rollback = &experimentv1.Rollback{Guardrail: 1, Metric: experiment.MetricLatencyP95, Variation: 1, ControlValue: 100, TreatmentValue: 180,
			ControlRequests: 6000, TreatmentRequests: 5900, Statistic: 5.5, PValue: 1e-6, Time: timestamppb.New(at), Revision: 3, Applied: 3, Proxies: 3}
	})
	if out, err := run("apply", "-f", file); err == nil || !strings.Contains(err.Error(), "--acknowledge-rollback") {
		t.Errorf("apply over a rollback: %v\n%s\nwant an error naming --acknowledge-rollback", err, out)
	}
	out, err := run("get", "checkout")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nguardrails: errorRate +0.01 (control 0, min 1000 requests); latencyP95 x1.2 (control 0, min 5000 requests)\n",
		"\nramp: 1%/1h0m0s -> [5%/24h0m0s] -> 50%/0s (at step 1 since 2030-01-02T03:04:05Z)\n",
		"\nrolled back by guardrail 1 (latencyP95) at 2030-01-02T03:04:05Z: variation 1 180 against control 0 100 (5900/6000 requests, statistic 5.5, p 1e-06); revision 3 applied by 3/3 proxies; not acknowledged (allotctl start --acknowledge-rollback)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("allotctl get:\n%s\nlacks %q", out, want)
		}
	}
	expect(`"rampState"`, "get", "checkout", "-o", "json")

	if out, err := run("start", "checkout"); err == nil || !strings.Contains(err.Error(), "--acknowledge-rollback") {
		t.Errorf("start of a rolled-back experiment: %v\n%s\nwant an error naming --acknowledge-rollback", err, out)
	}
	if out, err := run("pause", "--acknowledge-rollback", "checkout"); err == nil {
		t.Errorf("pause took --acknowledge-rollback: %s", out)
	}
	expect("experiment/checkout running (revision 4)", "start", "--acknowledge-rollback", "checkout")
	expect("; acknowledged by root at 2030-01-02T03:04:05Z\n", "get", "checkout")
}
