package report

import (
	"strings"
	"testing"
)

// TestReplicaRows: each fleet of ReplicaFleets is a target row, met or
// missed by its p99, or not measured with the reason; the section lists
// the fleets measured.
func TestReplicaRows(t *testing.T) {
	fleet := ReplicaSpread{TargetP99: 250, PerReplica: []int{334, 333, 333}, Applied: 1000, Connect: 700}
	fleet.Spread = Spread{Proxies: 1000, Writes: 40, P50: 120, P99: 200, Max: 210}
	res := &Results{Replicas: &ReplicasResult{Replicas: 3, EtcdMembers: 3, ServerCPU: 0, ClientCPU: 1,
		Fleets: []ReplicaSpread{fleet}, NotMeasured: "10000 clients: write 3 through r1: 9999 of 10000 proxies applied"}}
	for name, render := range map[string]func(*Results) (string, error){"REPORT.md": RenderReport, "REPLICAS.md": RenderReplicas} {
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
