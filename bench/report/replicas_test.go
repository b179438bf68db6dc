package report

import (
	"strings"
	"testing"
)

// TestReplicaRows: each fleet of ReplicaFleets is a target row on its p99,
// and one on its p99 against the floor's, met or missed, or not measured
// with the reason; the section lists the fleets measured, with the floor's
// figures, CPU, status checks and memory.
func TestReplicaRows(t *testing.T) {
	fleet := ReplicaSpread{TargetP99: 250, TargetRatio: 1.25, PerReplica: []int{334, 333, 333}, Applied: 1000, Connect: 700}
	fleet.Spread = Spread{Proxies: 1000, Writes: 4, AllAck: []float64{100, 120, 110, 200}}
	fleet.Summarize()
	fleet.Floor = &Spread{Proxies: 1000, Writes: 4, AllAck: []float64{90, 100, 100, 170}}
	fleet.Floor.Summarize()
	fleet.Replicated = &Spread{Proxies: 1000, Writes: 4, AllAck: []float64{95, 105, 105, 180}}
	fleet.Replicated.Summarize()
	fleet.CPU = ReplicaCPU{Allotd: []float64{60}, Etcd: []float64{40}, Load: []float64{30}, Floor: []float64{35}, FloorLoad: []float64{29},
		Replicated: []float64{45}, ReplicatedEtcd: []float64{12}, ReplicatedLoad: []float64{31}, Status: []float64{8, 9.5, 7}}
	fleet.Status = []float64{12, 14.25, 13}
	fleet.RSS = ReplicaRSS{AllotdPeak: 150 << 20, EtcdPeak: 200 << 20, FloorPeak: 70 << 20, ReplicatedPeak: 90 << 20}
	fleet.Ops = []EtcdOps{{Proposals: 8, Ranges: 20, Txns: 9, WatchEvents: 30}, {Proposals: 10, Ranges: 24, Txns: 11, WatchEvents: 34}}
	fleet.ReplicatedOps = []EtcdOps{{Proposals: 4, Puts: 4, WatchEvents: 6}}
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
			"The replicated floor (the same push through 3 servers on etcd, with a commit before and one per server after) had a p99 of 180.0 ms (p50 105.0 ms): 1.06 × the floor's, 95% interval",
			"; Allot's p99 is 1.11 × the replicated floor's (95% interval",
			"| 3 allotd replicas on 3 etcd members, 10,000 simulated xDS clients spread over them: write → all-ACK p99 ≤ 500 ms | not measured: 10000 clients: write 3 through r1: 9999 of 10000 proxies applied | **not measured** |",
			"| 3 allotd replicas on 3 etcd members, 30,000 simulated xDS clients spread over them: write → all-ACK p99 ≤ 1.25 × the bare go-control-plane push's (the floor) | not measured: 10000 clients:",
			"| 1,000 | 334 / 333 / 333 | 4 | 0.7 s | 110.0 | 200.0 | 200.0 | 100.0 | 170.0 | 105.0 | 180.0 | 1000 | 250 ms, 1.25 × the floor's |",
			"| 1,000 | 60 | 40 | 30 | 35 | 29 | 45 | 12 | 31 |",
			"| 1,000 | 13.0 ms | 8.0 ms |",
			"| 1,000 | 9 | 22 | 10 | 0 | 32 | 4 | 0 | 0 | 4 | 6 |",
			"| 1,000 | 150 MiB | 200 MiB | 70 MiB | 90 MiB | 1500 · 2000 · 700 · 900 MiB |",
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
	if strings.Contains(out, "below what any replicated design") {
		t.Error("a replicated floor within the limit is taken for one above it")
	}
	res.Replicas.Fleets[0].Replicated = &Spread{Proxies: 1000, Writes: 4, AllAck: []float64{200, 220, 230, 260}}
	res.Replicas.Fleets[0].Replicated.Summarize()
	if out, err = renderReport(res); err != nil {
		t.Fatal(err)
	}
	contains(t, "REPORT.md with a slow replicated floor", out,
		"had a p99 of 260.0 ms (p50 220.0 ms): 1.53 × the floor's, 95% interval 1.53–2.30 × — the target lies below what any replicated design on etcd does here; Allot's p99 is 0.97 × the replicated floor's",
		"(below its floor) |")
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
