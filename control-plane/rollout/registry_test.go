package rollout

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestWhere(t *testing.T) {
	v := View{Replicas: map[string]Replica{
		"caught-up": {ID: "caught-up", Revision: 7, Targets: map[string]string{"web": "v8"}},
		"behind":    {ID: "behind", Revision: 6, Targets: map[string]string{"web": "v6"}},
	}}
	tests := []struct {
		name string
		p    Proxy
		want State
	}{
		{"acked the target", Proxy{Replica: "behind", Cluster: "web", Acked: "v7"}, StateApplied},
		{"acked what a caught-up replica serves now (superseded)", Proxy{Replica: "caught-up", Cluster: "web", Acked: "v8"}, StateApplied},
		{"acked what a lagging replica serves", Proxy{Replica: "behind", Cluster: "web", Acked: "v6"}, StatePending},
		{"rejected the target", Proxy{Replica: "behind", Cluster: "web", Acked: "v6", Rejected: &Rejection{Version: "v7"}}, StateRejected},
		{"rejected the superseding version", Proxy{Replica: "caught-up", Cluster: "web", Rejected: &Rejection{Version: "v8"}}, StateRejected},
		{"rejected an older version", Proxy{Replica: "caught-up", Cluster: "web", Acked: "v6", Rejected: &Rejection{Version: "v5"}}, StatePending},
		{"unserved", Proxy{Replica: "caught-up", Cluster: "web", Unserved: "artifact \"x\""}, StateUnserved},
		{"replica gone", Proxy{Replica: "dead", Cluster: "web", Acked: "v6"}, StatePending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := v.Where(tt.p, "v7", 7); got != tt.want {
				t.Errorf("Where = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDedupKeepsNewestConnection(t *testing.T) {
	t0 := time.Unix(100, 0)
	got := Dedup([]Proxy{
		{Replica: "r1", NodeID: "b", Cluster: "web", ConnectedAt: t0},
		{Replica: "r2", NodeID: "b", Cluster: "web", ConnectedAt: t0.Add(time.Second)},
		{Replica: "r1", NodeID: "a", Cluster: "web", ConnectedAt: t0},
		{Replica: "r1", NodeID: "a", Cluster: "api", ConnectedAt: t0},
	})
	want := []string{"api/a@r1", "web/a@r1", "web/b@r2"}
	if len(got) != len(want) {
		t.Fatalf("Dedup kept %d, want %d: %+v", len(got), len(want), got)
	}
	for i, p := range got {
		if s := p.Cluster + "/" + p.NodeID + "@" + p.Replica; s != want[i] {
			t.Errorf("[%d] = %s, want %s", i, s, want[i])
		}
	}
}

// TestMaySettle: a replica's summary says its proxies may be settled
// whenever Where would find every one of them applied, rejected or
// unserved, and says they are not when one is pending and none is counted
// twice.
func TestMaySettle(t *testing.T) {
	caughtUp := Replica{ID: "r", Revision: 7, Targets: map[string]string{"web": "v8"}}
	behind := Replica{ID: "r", Revision: 6, Targets: map[string]string{"web": "v6"}}
	p := func(acked, rejected string) Proxy {
		px := Proxy{Replica: "r", Cluster: "web", Acked: acked}
		if rejected != "" {
			px.Rejected = &Rejection{Version: rejected}
		}
		return px
	}
	tests := []struct {
		name    string
		replica Replica
		proxies []Proxy
		want    bool
	}{
		{"all acked the target", behind, []Proxy{p("v7", ""), p("v7", "")}, true},
		{"the target and what a caught-up replica serves", caughtUp, []Proxy{p("v7", ""), p("v8", "")}, true},
		{"what a lagging replica serves", behind, []Proxy{p("v7", ""), p("v6", "")}, false},
		{"rejected the target", behind, []Proxy{p("v6", "v7"), p("v7", "")}, true},
		{"rejected an older version", caughtUp, []Proxy{p("v6", "v5"), p("v8", "")}, false},
		{"unserved", behind, []Proxy{{Replica: "r", Cluster: "web", Unserved: "artifact"}, p("v7", "")}, true},
		{"no proxies of the cluster", behind, []Proxy{{Replica: "r", Cluster: "api", Acked: "v1"}}, true},
		{"no summary (an older replica)", behind, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.replica
			if tt.proxies != nil {
				r.Proxies = Summarize(tt.proxies)
			}
			v := View{Replicas: map[string]Replica{"r": r}}
			settled := true
			for _, px := range tt.proxies {
				if px.Cluster == "web" && v.Where(px, "v7", 7) == StatePending {
					settled = false
				}
			}
			if settled != tt.want {
				t.Fatalf("the case is wrong: Where finds them settled: %v", settled)
			}
			if got := r.MaySettle("web", "v7", 7); got != tt.want {
				t.Errorf("MaySettle = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	got := Summarize([]Proxy{
		{Cluster: "web", Acked: "v1"},
		{Cluster: "web", Acked: "v1", Rejected: &Rejection{Version: "v2"}},
		{Cluster: "web", Unserved: "artifact"},
		{Cluster: "api"},
	})
	want := map[string]Summary{
		"web": {Proxies: 3, Acked: map[string]int{"v1": 2}, Rejected: map[string]int{"v2": 1}, Unserved: 1},
		"api": {Proxies: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
}

// TestSummarizeBounded: a cluster's summary keeps its MaxSummaryVersions
// most common versions, acknowledged and rejected, and counts the rest in
// Other, so that proxies reporting versions of their own cannot grow
// their replica's record; MaySettle still never says false when every
// proxy settled, and Applied is never all when some version is left out.
func TestSummarizeBounded(t *testing.T) {
	var ps []Proxy
	for range 3 {
		ps = append(ps, Proxy{Cluster: "web", Acked: "v7"}, Proxy{Cluster: "web", Acked: "v6", Rejected: &Rejection{Version: "v7"}})
	}
	for i := range 10 {
		v := fmt.Sprintf("own-%d", i)
		ps = append(ps, Proxy{Cluster: "web", Acked: v, Rejected: &Rejection{Version: v}})
	}
	s := Summarize(ps)["web"]
	if len(s.Acked) != MaxSummaryVersions || len(s.Rejected) != MaxSummaryVersions {
		t.Fatalf("summary keeps %d acked and %d rejected versions, want %d each: %+v", len(s.Acked), len(s.Rejected), MaxSummaryVersions, s)
	}
	if s.Acked["v7"] != 3 || s.Acked["v6"] != 3 || s.Rejected["v7"] != 3 {
		t.Errorf("the most common versions are not kept: %+v", s)
	}
	// Acked: v7, v6 and 2 of the 10 own kept, 8 left out; rejected: v7 and 3 own kept, 7 left out.
	if s.Proxies != 16 || s.Other != 8+7 {
		t.Errorf("proxies %d other %d, want 16 and 15", s.Proxies, s.Other)
	}
	r := Replica{Revision: 7, Targets: map[string]string{"web": "v7"}, Proxies: map[string]Summary{"web": s}}
	if !r.MaySettle("web", "v7", 7) {
		t.Error("MaySettle = false with versions left out of the summary")
	}
	if _, all := r.Applied("web", "v7", 7); all {
		t.Error("Applied says all applied while proxies run their own versions")
	}
}
