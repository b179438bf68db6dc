package suite

import (
	"fmt"
	"strings"
	"testing"
)

// TestReplicaRows: each fleet of ReplicaFleets is a target row, met or
// missed by its p99, or not measured with the reason; the section lists
// the fleets measured.
func TestReplicaRows(t *testing.T) {
	fleet := replicaSpread{TargetP99: 250, PerReplica: []int{334, 333, 333}, Applied: 1000, Connect: 700}
	fleet.spread = spread{Proxies: 1000, Writes: 40, P50: 120, P99: 200, Max: 210}
	res := &results{Replicas: &replicasResult{Replicas: 3, EtcdMembers: 3, ServerCPU: 0, ClientCPU: 1,
		Fleets: []replicaSpread{fleet}, NotMeasured: "10000 clients: write 3 through r1: 9999 of 10000 proxies applied"}}
	for name, render := range map[string]func(*results) (string, error){"REPORT.md": renderReport, "REPLICAS.md": renderReplicas} {
		out, err := render(res)
		if err != nil {
			t.Fatal(err)
		}
		contains(t, name, out,
			"| 3 allotd replicas on 3 etcd members, 1,000 simulated xDS clients spread over them: write → all-ACK p99 ≤ 250 ms | 40 waited writes through the replicas in turn, each counting all 1,000 proxies applied: p50 120.0 ms, p99 200.0 ms, max 210.0 ms (limit 250 ms) | **met** |",
			"| 3 allotd replicas on 3 etcd members, 10,000 simulated xDS clients spread over them: write → all-ACK p99 ≤ 1 s | not measured: 10000 clients: write 3 through r1: 9999 of 10000 proxies applied | **not measured** |",
			"| 1,000 | 334 / 333 / 333 | 40 | 0.7 s | 120.0 | 200.0 | 210.0 | 1000 | 250 ms |",
		)
	}

	res.Replicas.Fleets[0].P99 = 251
	out, err := renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "REPORT.md", out, "p99 251.0 ms, max 210.0 ms (limit 250 ms) | **missed** |")

	res.Replicas = nil
	if out, err = renderReport(res); err != nil {
		t.Fatal(err)
	}
	contains(t, "REPORT.md without the section", out, "p99 ≤ 1 s | not measured: run without -skip-extras (or `make bench-replicas`) | **not measured** |")
	if strings.Contains(out, "## Replicas") {
		t.Error("REPORT.md has a replicas section the run did not measure")
	}
}

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
