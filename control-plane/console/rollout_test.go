package console_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/rollout"
)

// TestRolloutNamesMatchRollout: the proxy states and rollout results the
// console shows (static/js/rollout.js) and colours (static/style.css) are
// rollout's, so a renamed or new state cannot go unnoticed by the console.
func TestRolloutNamesMatchRollout(t *testing.T) {
	js, err := os.ReadFile("static/js/rollout.js")
	if err != nil {
		t.Fatal(err)
	}
	// The badges of a rollout's counts list every state, in rollout's order.
	list := regexp.MustCompile(`const states = \[([^\]]*)\]`).FindSubmatch(js)
	if list == nil {
		t.Fatal("rollout.js has no `const states = [...]` list")
	}
	var states, want []string
	for s := range strings.SplitSeq(string(list[1]), ",") {
		states = append(states, strings.Trim(strings.TrimSpace(s), "'"))
	}
	for _, s := range rollout.States {
		want = append(want, string(s))
	}
	if !slices.Equal(states, want) {
		t.Errorf("rollout.js lists the states %q, rollout.States is %q", states, want)
	}
	// Every result a waited write's outcome names is one of rollout's.
	results := map[string]bool{rollout.ResultApplied: true, rollout.ResultRejected: true, rollout.ResultUnserved: true,
		rollout.ResultTimeout: true, rollout.ResultError: true, rollout.ResultStatus: true}
	body := regexp.MustCompile(`(?s)export function outcome\(.*?\n}\n`).Find(js)
	if body == nil {
		t.Fatal("rollout.js has no `export function outcome(...)`")
	}
	cases := regexp.MustCompile(`case '(\w+)':`).FindAllSubmatch(body, -1)
	if len(cases) == 0 {
		t.Fatal("outcome in rollout.js names no result (`case '...':`): its shape changed, update this test")
	}
	for _, c := range cases {
		if !results[string(c[1])] {
			t.Errorf("outcome in rollout.js handles the result %q, not one of rollout's", c[1])
		}
	}
	// The stylesheet colours every state's badge and every waited write's
	// result, and nothing else by those prefixes.
	css, err := os.ReadFile("static/style.css")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range want {
		if !strings.Contains(string(css), ".badge-"+s) {
			t.Errorf("style.css has no .badge-%s", s)
		}
	}
	for r := range results {
		if r != rollout.ResultStatus && !strings.Contains(string(css), ".outcome-"+r) {
			t.Errorf("style.css has no .outcome-%s", r)
		}
	}
	for _, m := range regexp.MustCompile(`\.outcome-(\w+)`).FindAllSubmatch(css, -1) {
		if !results[string(m[1])] {
			t.Errorf("style.css colours .outcome-%s, not a result of rollout's", m[1])
		}
	}
}
