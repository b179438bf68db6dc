package rollout

import "testing"

// TestBehind: a waited write skips reading the summaries only while a
// replica that holds waited proxies of a changed cluster has a record, as
// the watch delivered it, built from before the write; a replica holding
// none, one the watch does not know (gone, or no watch) and one caught up
// do not hold it back.
func TestBehind(t *testing.T) {
	waited := map[NodeKey]Node{
		{Cluster: "web", NodeID: "a"}: {Replica: "r1"},
		{Cluster: "api", NodeID: "b"}: {Replica: "r2"}, // its cluster is not changed
	}
	holders := holding(waited, Targets{"web": "v2"})
	if len(holders) != 1 || !holders["r1"] {
		t.Fatalf("holding = %v, want r1 alone", holders)
	}
	for _, c := range []struct {
		name string
		live map[string]Replica
		want bool
	}{
		{"the holder before the write", map[string]Replica{"r1": {Revision: 9}, "r2": {Revision: 10}}, true},
		{"the holder caught up", map[string]Replica{"r1": {Revision: 10}, "r2": {Revision: 9}}, false},
		{"the holder gone", map[string]Replica{"r2": {Revision: 9}}, false},
		{"no watch", nil, false},
	} {
		if got := behind(c.live, holders, 10); got != c.want {
			t.Errorf("%s: behind = %v, want %v", c.name, got, c.want)
		}
	}
}
