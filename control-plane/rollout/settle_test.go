package rollout

import "testing"

// TestSettle: a replica has settled only when every proxy acknowledged
// the version it serves the proxy's cluster; a pending, rejected or
// unserved proxy, a proxy on another version, or a cluster whose first
// build is under way unsettles it.
func TestSettle(t *testing.T) {
	applied := func(node, cluster, v string) ProxyStatus {
		return ProxyStatus{NodeID: node, Cluster: cluster, Acked: v, State: StateApplied}
	}
	targets := map[string]string{"web": "w2", "api": "a1"}
	for _, c := range []struct {
		name    string
		proxies []ProxyStatus
		settled bool
	}{
		{"none", nil, true},
		{"all applied", []ProxyStatus{applied("a", "web", "w2"), applied("b", "api", "a1")}, true},
		{"one pending", []ProxyStatus{applied("a", "web", "w2"), {NodeID: "b", Cluster: "web", Acked: "w1", State: StatePending}}, false},
		{"one rejected", []ProxyStatus{applied("a", "web", "w2"), {NodeID: "b", Cluster: "web", State: StateRejected}}, false},
		{"one unserved", []ProxyStatus{{NodeID: "b", Cluster: "web", State: StateUnserved}}, false},
		{"applied another version", []ProxyStatus{applied("a", "web", "w1")}, false},
		{"first build under way", []ProxyStatus{applied("a", "new", "")}, false},
	} {
		r := Replica{Targets: targets}
		r.Settle(c.proxies)
		want := 0
		if c.settled {
			want = len(c.proxies)
		}
		if r.Settled != c.settled || r.AppliedProxies != want {
			t.Errorf("%s: settled %v with %d applied, want %v with %d", c.name, r.Settled, r.AppliedProxies, c.settled, want)
		}
	}
}

// TestSettledOn: every live replica settled settles a write for its
// waited proxies, counting each replica's at most as many as it held; a
// waited proxy whose replica is gone leaves it undecided; proxies of
// clusters the write did not change are not counted.
func TestSettledOn(t *testing.T) {
	waited := map[NodeKey]Node{
		{"web", "a"}: {"r1"}, {"web", "b"}: {"r1"}, {"web", "c"}: {"r2"}, {"api", "d"}: {"r3"},
	}
	targets := Targets{"web": "w2"}
	if n, ok := settledOn(map[string]int{"r1": 2, "r2": 5}, waited, targets); !ok || n != 3 {
		t.Errorf("all live: %d, %v; want 3, true", n, ok)
	}
	if n, ok := settledOn(map[string]int{"r1": 1, "r2": 1}, waited, targets); !ok || n != 2 {
		t.Errorf("one of r1's disconnected: %d, %v; want 2, true", n, ok)
	}
	if _, ok := settledOn(map[string]int{"r1": 2}, waited, targets); ok {
		t.Error("r2 gone with a waited proxy: settled")
	}
}
