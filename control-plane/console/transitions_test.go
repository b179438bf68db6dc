package console_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/experiment"
)

// TestTransitionsMatchExperiment: the console's lifecycle actions
// (static/js/experiment.js) enable each operation from exactly the statuses
// experiment.Transitions allows it from, and cover every transition there
// is, so the console never offers what the API refuses nor hides what it
// accepts.
func TestTransitionsMatchExperiment(t *testing.T) {
	js, err := os.ReadFile("static/js/experiment.js")
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile(`(?s)const actions = \[(.*?)\n\];`).FindSubmatch(js)
	if table == nil {
		t.Fatal("experiment.js has no `const actions = [...];` table")
	}
	entry := regexp.MustCompile(`\{op: '(\w+)', label: '[^']*', from: \[([^\]]*)\], to: '(\w+)'\}`)
	entries := entry.FindAllSubmatch(table[1], -1)
	if n := strings.Count(string(table[1]), "{op:"); n != len(entries) || n == 0 {
		t.Fatalf("parsed %d of the %d actions in experiment.js: the table's shape changed, update this test", len(entries), n)
	}
	targets := map[string]bool{}
	for _, m := range entries {
		op, to := string(m[1]), string(m[3])
		var from []string
		for s := range strings.SplitSeq(string(m[2]), ",") {
			from = append(from, strings.Trim(strings.TrimSpace(s), "'"))
		}
		if !experiment.KnownStatus(to) {
			t.Errorf("action %s leads to %q, not a status of experiment.Transitions", op, to)
		}
		var want []string
		for st := range experiment.Transitions {
			if experiment.Allowed(st, to) {
				want = append(want, st)
			}
		}
		slices.Sort(from)
		slices.Sort(want)
		if !slices.Equal(from, want) {
			t.Errorf("action %s (→ %s) is offered from %q, experiment.Transitions allows %q", op, to, from, want)
		}
		targets[to] = true
	}
	for from, tos := range experiment.Transitions {
		for _, to := range tos {
			if !targets[to] {
				t.Errorf("the console has no action for %s → %s", from, to)
			}
		}
	}
}
