package report

import (
	"strings"
	"testing"
)

// TestReplicaRows: each fleet of ReplicaFleets is a target row on its p99,
// and one on its p99 against the floor's, met or missed, or not measured
// with the reason; the section lists the fleets measured, with the floor's
// figures, CPU and memory.
func TestReplicaRows(t *testing.T) {
	fleet := ReplicaSpread{TargetP99: 250, TargetRatio: 1.25, PerReplica: []int{334, 333, 333}, Applied: 1000, Connect: 700}
	fleet.Spread = Spread{Proxies: 1000, Writes: 4, AllAck: []float64{100, 120, 110, 200}}
	fleet.Summarize()
	fleet.Floor = &Spread{Proxies: 1000, Writes: 4, AllAck: []float64{90, 100, 100, 170}}
	fleet.Floor.Summarize()
	fleet.CPU = ReplicaCPU{Allotd: []float64{60}, Etcd: []float64{40}, Load: []float64{30}, Floor: []float64{35}, FloorLoad: []float64{29}}
	fleet.RSS = ReplicaRSS{AllotdPeak: 150 << 20, EtcdPeak: 200 << 20, FloorPeak: 70 << 20}
	fleet.EtcdCommit = Spread{Writes: 40, P50: 8.5}
	res := &Results{Replicas: &ReplicasResult{Replicas: 3, EtcdMembers: 3, ServerCPU: 0, ClientCPU: 1,
		Fleets: []ReplicaSpread{fleet}, NotMeasured: "10000 clients: write 3 through r1: 9999 of 10000 proxies applied"}}
	for name, render := range map[string]func(*Results) (string, error){"REPORT.md": renderReport, "REPLICAS.md": renderReplicas} {
		out, err := render(res)
		if err != nil {
			t.Fatal(err)
		}
		contains(t, name, out,
			"| 3 allotd replicas on 3 etcd members, 1,000 simulated xDS clients spread over them: write → all-ACK p99 ≤ 250 ms | 4 waited writes through the replicas in turn, each counting all 1,000 proxies applied: p50 110.0 ms, p99 200.0 ms, max 200.0 ms (limit 250 ms) | **met** |",
			"| 3 allotd replicas on 3 etcd members, 1,000 simulated xDS clients spread over them: write → all-ACK p99 ≤ 1.25 × the bare go-control-plane push's (the floor) | write i and the floor's push of the resource write i produced, to a fleet of as many proxies, are one round (4 rounds): p99 200.0 ms against the floor's 170.0 ms, 1.18 ×,",
			"p50 110.0 ms against 100.0 ms, 1.10 ×,",
			"two etcd commits one after the other (8.5 ms each, p50 of 40 puts), so the floor's p99 plus those is 1.10 × the floor's p99 | **met** |",
			"| 3 allotd replicas on 3 etcd members, 10,000 simulated xDS clients spread over them: write → all-ACK p99 ≤ 500 ms | not measured: 10000 clients: write 3 through r1: 9999 of 10000 proxies applied | **not measured** |",
			"| 3 allotd replicas on 3 etcd members, 30,000 simulated xDS clients spread over them: write → all-ACK p99 ≤ 1.25 × the bare go-control-plane push's (the floor) | not measured: 10000 clients:",
			"| 1,000 | 334 / 333 / 333 | 4 | 0.7 s | 110.0 | 200.0 | 200.0 | 100.0 | 170.0 | 1000 | 250 ms, 1.25 × the floor's |",
			"| 1,000 | 60 | 40 | 30 | 35 | 29 | 150 MiB | 200 MiB | 70 MiB | 1500 · 2000 · 700 MiB |",
		)
	}

	res.Replicas.Fleets[0].AllAck[3] = 251
	res.Replicas.Fleets[0].Summarize()
	out, err := renderReport(res)
	if err != nil {
		t.Fatal(err)
	}
	contains(t, "REPORT.md", out, "p99 251.0 ms, max 251.0 ms (limit 250 ms) | **missed** |",
		"p99 251.0 ms against the floor's 170.0 ms, 1.48 ×")
	res.Replicas.Fleets[0].EtcdCommit.P50 = 30
	if out, err = renderReport(res); err != nil {
		t.Fatal(err)
	}
	contains(t, "REPORT.md with slow commits", out, "is 1.35 × the floor's p99: the target lies below that floor | **missed**")
	if !strings.Contains(out, "1.48 ×, 95% interval") || !strings.Contains(out, "(limit 1.25 ×); p50") {
		t.Error("the floor row lacks its interval or limit")
	}

	res.Replicas.Fleets[0].TargetP99 = 150
	if out, err = renderReport(res); err != nil {
		t.Fatal(err)
	}
	contains(t, "REPORT.md, the floor above the limit", out,
		"(limit 150 ms); the floor's own pushes to as many proxies had a p99 of 170.0 ms (p50 100.0 ms): the target lies below that floor | **missed** (below its floor) |")

	res.Replicas.Fleets[0].Floor = nil
	if out, err = renderReport(res); err != nil {
		t.Fatal(err)
	}
	contains(t, "REPORT.md without the floor", out, "the floor) | not measured: this run has no floor figures | **not measured** |")

	res.Replicas = nil
	if out, err = renderReport(res); err != nil {
		t.Fatal(err)
	}
	contains(t, "REPORT.md without the section", out, "p99 ≤ 500 ms | not measured: run without -skip-extras (or `make bench-replicas`) | **not measured** |")
	if strings.Contains(out, "## Replicas") {
		t.Error("REPORT.md has a replicas section the run did not measure")
	}
}
