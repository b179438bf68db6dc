package etcd_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/xds"
)

// largestReplica is the largest replica a server can publish given the
// limits on what proxies send (xds): as many clusters as a server
// tracks, each named at the longest a proxy may name it, each with the
// most versions a summary keeps, at the longest a proxy may report them,
// every count at its widest.
func largestReplica() rollout.Replica {
	const wide = 1<<31 - 1
	addr := "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535"
	r := rollout.Replica{ID: strings.Repeat("r", 253), AdminAddr: addr, XDSAddr: addr, Revision: 1<<63 - 1,
		Targets: map[string]string{}, Proxies: map[string]rollout.Summary{}}
	version := func(i int) string { return fmt.Sprintf("%0*d", xds.MaxVersionBytes, i) }
	for i := range xds.MaxClusters {
		c := fmt.Sprintf("%0*d", xds.MaxClusterBytes, i) // cluster names are never escaped in JSON (xds.MaxClusterBytes)
		r.Targets[c] = version(0)
		s := rollout.Summary{Proxies: wide, Unserved: wide, Other: wide, Acked: map[string]int{}, Rejected: map[string]int{}}
		for j := range rollout.MaxSummaryVersions {
			s.Acked[version(j)], s.Rejected[version(j)] = wide, wide
		}
		r.Proxies[c] = s
	}
	return r
}

// largestProxy is the largest proxy record (one of a part's), every
// field a proxy sets at its bound and made of characters JSON escapes
// where the bound allows them; i numbers its node id.
func largestProxy(i int) rollout.Proxy {
	t := time.Date(2026, 11, 27, 0, 0, 0, 123456789, time.FixedZone("x", -12*3600))
	node := fmt.Sprintf("%06d", i) + strings.Repeat("<", xds.MaxNodeIDBytes-6)
	artifact := strings.Repeat("<", xds.MaxArtifactBytes)
	return rollout.Proxy{
		Replica: strings.Repeat("r", 253), NodeID: node, Cluster: strings.Repeat("c", xds.MaxClusterBytes),
		Address: "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535", Stream: 1<<63 - 1, API: xds.APIECDS,
		Artifact: artifact, Acked: strings.Repeat("v", xds.MaxVersionBytes), AckedAt: t,
		Rejected: &rollout.Rejection{Version: strings.Repeat("v", xds.MaxVersionBytes), At: t,
			Error: strings.Repeat("<", xds.MaxRejectionBytes) + "… [truncated 1048576 bytes]"},
		Unserved: fmt.Sprintf("node metadata %s is %q, an artifact allotd does not serve (it serves %s); no filter configuration is sent",
			xds.ArtifactKey, artifact, strings.Join(xds.Artifacts, ", ")),
		ConnectedAt: t,
	}
}

// TestLargestRecordsFit: no record of the registry outgrows what the
// limits on what proxies send allow, whatever the number of proxies and
// clusters: the replica's record has fixed-size fields only, a cluster's
// record is its target and summary at their largest, and a proxy at its
// largest fits a part with room to spare. A real etcd takes the largest
// replica (xds.MaxClusters clusters at their largest) with 400 of the
// largest proxies, and reads it back whole.
func TestLargestRecordsFit(t *testing.T) {
	big := largestReplica()
	fixed := big
	fixed.Targets, fixed.Proxies = nil, nil
	rb, err := json.Marshal(fixed)
	if err != nil {
		t.Fatal(err)
	}
	c0 := fmt.Sprintf("%0*d", xds.MaxClusterBytes, 0)
	cb, err := json.Marshal(struct {
		T string          `json:"target"`
		P rollout.Summary `json:"proxies"`
	}{big.Targets[c0], big.Proxies[c0]})
	if err != nil {
		t.Fatal(err)
	}
	p, err := json.Marshal(largestProxy(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(p) > etcd.MaxPartBytes/4 {
		t.Errorf("the largest proxy record is %d bytes: a part of %d bytes holds 4 at least", len(p), etcd.MaxPartBytes)
	}
	if len(rb) > 1<<10 || len(cb) > 1<<10 {
		t.Errorf("the largest replica record (fixed fields) is %d bytes, a cluster's %d: want at most 1 KiB each", len(rb), len(cb))
	}
	t.Logf("largest replica record %d bytes, cluster record %d bytes (%d clusters: %d KB), proxy record %d bytes",
		len(rb), len(cb), xds.MaxClusters, xds.MaxClusters*len(cb)/1000, len(p))

	c := etcdtest.Start(t, 1)
	reg := etcd.New(c.Open(t).Conn(), "r1", 10*time.Second)
	var fleet []rollout.Proxy
	for i := range 400 {
		fleet = append(fleet, largestProxy(i))
	}
	if err := reg.Publish(t.Context(), big, fleet); err != nil {
		t.Fatalf("publish the largest replica with %d of the largest proxies: %v", len(fleet), err)
	}
	v, err := etcd.New(c.Open(t).Conn(), "reader", time.Second).View(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r := v.Replicas["r1"]
	if len(r.Targets) != xds.MaxClusters || len(r.Proxies) != xds.MaxClusters || len(v.Proxies) != len(fleet) {
		t.Errorf("read back %d targets, %d summaries and %d proxies, want %d, %d and %d", len(r.Targets), len(r.Proxies),
			len(v.Proxies), xds.MaxClusters, xds.MaxClusters, len(fleet))
	}
	if !reflect.DeepEqual(r.Proxies[c0], big.Proxies[c0]) || r.Targets[c0] != big.Targets[c0] || r.Revision != big.Revision {
		t.Errorf("read back cluster %.8s…: target %q, summary %+v, revision %d; want %q, %+v, %d", c0, r.Targets[c0], r.Proxies[c0],
			r.Revision, big.Targets[c0], big.Proxies[c0], big.Revision)
	}
}

// crowd returns n of the largest proxies whose node ids all hash to one
// shard: what a client choosing node ids can do, FNV being unkeyed.
func crowd(n int) []rollout.Proxy {
	var out []rollout.Proxy
	for i := 0; len(out) < n; i++ {
		if p := largestProxy(i); etcd.ShardOf(p.NodeID) == 0 {
			out = append(out, p)
		}
	}
	return out
}

// TestRegistryCrowdedShard: proxies whose node ids all hash to one shard,
// their records together past etcd's request limit (1.5 MiB), are
// published in parts each within maxPartBytes; View and Roster list them
// all; one proxy's ACK rewrites one part; records that grow, cutting the
// parts anew in several transactions, never leave a reader without one of
// the proxies; and once they leave, every part is deleted.
func TestRegistryCrowdedShard(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	s := c.Open(t)
	reg := etcd.New(s.Conn(), "r1", 10*time.Second)
	fleet := crowd(200)
	for i := range 20 {
		fleet[i].Rejected = nil // until they reject a version, below
	}
	total := 0
	for _, p := range fleet {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		total += len(b)
	}
	if total <= int(embed.DefaultMaxRequestBytes) {
		t.Fatalf("the crowd's records are %d bytes, want more than etcd's request limit %d", total, int(embed.DefaultMaxRequestBytes))
	}
	rep := rollout.Replica{Revision: 1, Targets: map[string]string{fleet[0].Cluster: "v1"}}
	rep.Proxies = rollout.Summarize(fleet)
	if err := reg.Publish(ctx, rep, fleet); err != nil {
		t.Fatalf("publish %d proxies (%d bytes of records) in one shard: %v", len(fleet), total, err)
	}
	reader := etcd.New(c.Open(t).Conn(), "reader", time.Second)
	v, err := reader.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := reader.Roster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Proxies) != len(fleet) || len(ro.Nodes) != len(fleet) {
		t.Fatalf("view lists %d proxies, roster %d nodes; want %d", len(v.Proxies), len(ro.Nodes), len(fleet))
	}
	resp, err := s.Client().Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	parts := 0
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), "mesh/proxies/r1/0/") {
			parts++
			if len(kv.Value) > etcd.MaxPartBytes {
				t.Errorf("part %s is %d bytes, limit %d", kv.Key, len(kv.Value), etcd.MaxPartBytes)
			}
		}
	}
	if min := total / etcd.MaxPartBytes; parts < min || countKeys(t, s, "mesh/proxies/r1/") != parts {
		t.Errorf("%d parts of shard 0 (of %d under the replica), want at least %d and no other", parts,
			countKeys(t, s, "mesh/proxies/r1/"), min)
	}

	// One proxy's ACK: one transaction, rewriting its part and the summary.
	before := revision(t, s)
	fleet[100].Acked = strings.Repeat("w", xds.MaxVersionBytes)
	rep.Proxies = rollout.Summarize(fleet)
	if err := reg.Publish(ctx, rep, fleet); err != nil {
		t.Fatal(err)
	}
	if after := revision(t, s); after != before+1 {
		t.Errorf("one proxy acknowledged: etcd revision %d → %d, want one transaction", before, after)
	}

	// The first 20 proxies reject a version: their records grow, and the
	// parts after theirs are cut anew, each holding proxies of the next,
	// in several transactions (the shard is past one's size). A reader between any two of them lists every
	// proxy: none is ever missing (a waited write would stop waiting for
	// it).
	for i := range 20 {
		fleet[i].Rejected = &rollout.Rejection{Version: "v9", Error: strings.Repeat("<", xds.MaxRejectionBytes)}
	}
	rep.Proxies = rollout.Summarize(fleet)
	txns := 0
	etcd.SetRegistryTxn(reg, func(ops []clientv3.Op, commit func() error) error {
		if err := commit(); err != nil {
			return err
		}
		txns++
		v, err := reader.View(ctx)
		if err != nil {
			return err
		}
		if len(v.Proxies) != len(fleet) {
			t.Errorf("after transaction %d of the publish, a reader lists %d proxies, want %d", txns, len(v.Proxies), len(fleet))
		}
		return nil
	})
	if err := reg.Publish(ctx, rep, fleet); err != nil {
		t.Fatal(err)
	}
	etcd.SetRegistryTxn(reg, nil)
	if txns < 2 {
		t.Errorf("the publish that grew 20 records took %d transactions, want several (the shard past one's size)", txns)
	}
	if v, err := reader.View(ctx); err != nil || len(v.Proxies) != len(fleet) || v.Proxies[0].Rejected == nil {
		t.Fatalf("after the rejections: %d proxies, the first rejected %v (%v)", len(v.Proxies), v.Proxies[0].Rejected != nil, err)
	}

	// They leave: every part goes.
	if err := reg.Publish(ctx, rollout.Replica{Revision: 1, Targets: map[string]string{}}, nil); err != nil {
		t.Fatal(err)
	}
	if n, m, k := countKeys(t, s, "mesh/proxies/r1/"), countKeys(t, s, "mesh/nodes/r1/"), countKeys(t, s, "mesh/clusters/r1/"); n+m+k != 0 {
		t.Errorf("after every proxy left: %d parts, %d node keys, %d cluster records; want none", n, m, k)
	}
	if v, err := reader.View(ctx); err != nil || len(v.Proxies) != 0 {
		t.Errorf("view after every proxy left: %d proxies, %v", len(v.Proxies), err)
	}
}
