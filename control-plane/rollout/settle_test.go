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
// waited proxy whose replica is gone, or restarted (another lease), leaves
// it undecided; proxies of clusters the write did not change are not
// counted.
func TestSettledOn(t *testing.T) {
	waited := map[NodeKey]Node{
		{"web", "a"}: {"r1", 7}, {"web", "b"}: {"r1", 7}, {"web", "c"}: {"r2", 0}, {"api", "d"}: {"r3", 9},
	}
	targets := Targets{"web": "w2"}
	live := func(r1, r2 int, r1Lease int64) map[string]Replica {
		out := map[string]Replica{"r1": {ID: "r1", AppliedProxies: r1, Lease: r1Lease}}
		if r2 >= 0 {
			out["r2"] = Replica{ID: "r2", AppliedProxies: r2, Lease: 8}
		}
		return out
	}
	if n, ok := settledOn(live(2, 5, 7), waited, targets); !ok || n != 3 {
		t.Errorf("all live: %d, %v; want 3, true", n, ok)
	}
	if n, ok := settledOn(live(1, 1, 7), waited, targets); !ok || n != 2 {
		t.Errorf("one of r1's disconnected: %d, %v; want 2, true", n, ok)
	}
	if _, ok := settledOn(live(2, -1, 7), waited, targets); ok {
		t.Error("r2 gone with a waited proxy: settled")
	}
	if _, ok := settledOn(live(0, 5, 11), waited, targets); ok {
		t.Error("r1 restarted (another lease) while its proxies fail over: settled")
	}
}

// TestNodeOn: a node is on its replica's run unless both leases are known
// and differ.
func TestNodeOn(t *testing.T) {
	for _, c := range []struct {
		node, replica int64
		on            bool
	}{{7, 7, true}, {7, 8, false}, {0, 8, true}, {7, 0, true}} {
		if got := (Node{Replica: "r", Lease: c.node}).On(Replica{Lease: c.replica}); got != c.on {
			t.Errorf("node lease %d, replica lease %d: on %v, want %v", c.node, c.replica, got, c.on)
		}
	}
}

// TestMarkBefore: a mark of the versions as of revision R stands for what
// came before the write committed at R+1; before a write at any other
// revision (another write came between), nothing does, and every cluster
// counts as changed; a mark that does not say its revision always stands.
func TestMarkBefore(t *testing.T) {
	v := Targets{"web": "v1"}
	for _, c := range []struct {
		mark Mark
		rev  int64
		want Targets
	}{
		{Mark{Targets: v, Revision: 4}, 5, v},
		{Mark{Targets: v, Revision: 4}, 6, nil},
		{Mark{Targets: v, Revision: 4}, 4, nil},
		{Mark{Targets: v}, 9, v},
	} {
		got := c.mark.Before(c.rev)
		if (got == nil) != (c.want == nil) || got["web"] != c.want["web"] {
			t.Errorf("%+v before %d: %v, want %v", c.mark, c.rev, got, c.want)
		}
		if changed := (Targets{"web": "v1", "api": "a1"}).Changed(got); c.want == nil && len(changed) != 2 {
			t.Errorf("%+v before %d: changed %v, want every cluster", c.mark, c.rev, changed)
		}
	}
}
