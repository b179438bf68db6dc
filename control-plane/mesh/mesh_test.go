package mesh

import (
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
