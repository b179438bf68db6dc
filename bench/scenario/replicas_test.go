package scenario

import (
	"fmt"
	"strings"
	"testing"
)

// TestCheckRollout: a rollout counts only when it lists every proxy of
// every fleet once, on its own replica, applied on the written version.
func TestCheckRollout(t *testing.T) {
	reps := []replica{{id: "r1"}, {id: "r2"}}
	fleet := func() *rolloutJSON {
		ro := &rolloutJSON{Result: "applied"}
		for r, n := range []int{2, 1} {
			for i := range n {
				ro.Proxies = append(ro.Proxies, rolloutProxy{Replica: fmt.Sprintf("r%d", r+1), NodeID: fmt.Sprintf("r%d-sim-%d", r+1, i),
					State: "applied", Target: "v2", Acked: "v2"})
			}
		}
		return ro
	}
	for _, c := range []struct {
		name   string
		change func(*rolloutJSON)
		want   string // "" : counted
	}{
		{"all applied", func(*rolloutJSON) {}, ""},
		{"one missing", func(ro *rolloutJSON) { ro.Proxies = ro.Proxies[1:] }, "replica r1 has 1 proxies, want 2"},
		{"one pending", func(ro *rolloutJSON) { ro.Proxies[2].State = "pending" }, "r2-sim-0 is pending"},
		{"an older version", func(ro *rolloutJSON) { ro.Proxies[0].Acked = "v1" }, "r1-sim-0 acked v1 with target v2, want v2"},
		{"listed twice", func(ro *rolloutJSON) { ro.Proxies = append(ro.Proxies, ro.Proxies[0]) }, "r1-sim-0 listed twice"},
		{"on another replica", func(ro *rolloutJSON) { ro.Proxies[2].Replica = "r1" }, "r2-sim-0 listed on replica r1"},
		{"timed out", func(ro *rolloutJSON) { ro.Result, ro.Error = "timeout", "1 of 3 pending" }, `result "timeout"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ro := fleet()
			c.change(ro)
			n, err := checkRollout(ro, reps, []int{2, 1}, "v2")
			switch {
			case c.want == "" && (err != nil || n != 3):
				t.Errorf("counted %d, error %v; want 3 applied", n, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}
