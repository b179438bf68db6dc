package etcd_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/allotmesh/allot/control-plane/mesh"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/xds"
)

// largestReplica is the largest record a replica can publish given the
// limits on what proxies send (xds): as many clusters as a server
// tracks, each named at the longest a proxy may name it, each with the
// most versions a summary keeps, at the longest a proxy may report them,
// every count at its widest.
func largestReplica() mesh.Replica {
	const wide = 1<<31 - 1
	addr := "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535"
	r := mesh.Replica{ID: strings.Repeat("r", 253), AdminAddr: addr, XDSAddr: addr, Revision: 1<<63 - 1,
		Targets: map[string]string{}, Proxies: map[string]mesh.Summary{}}
	version := func(i int) string { return fmt.Sprintf("%0*d", xds.MaxVersionBytes, i) }
	for i := range xds.MaxClusters {
		c := fmt.Sprintf("%0*d", xds.MaxClusterBytes, i) // cluster names are never escaped in JSON (xds.MaxClusterBytes)
		r.Targets[c] = version(0)
		s := mesh.Summary{Proxies: wide, Unserved: wide, Other: wide, Acked: map[string]int{}, Rejected: map[string]int{}}
		for j := range mesh.MaxSummaryVersions {
			s.Acked[version(j)], s.Rejected[version(j)] = wide, wide
		}
		r.Proxies[c] = s
	}
	return r
}

// largestProxy is the largest proxy record (one of a shard's), every
// field a proxy sets at its bound and made of characters JSON escapes
// where the bound allows them.
func largestProxy(i int) mesh.Proxy {
	t := time.Date(2026, 11, 27, 0, 0, 0, 123456789, time.FixedZone("x", -12*3600))
	node := fmt.Sprintf("%04d", i) + strings.Repeat("<", xds.MaxNodeIDBytes-4)
	artifact := strings.Repeat("<", xds.MaxArtifactBytes)
	return mesh.Proxy{
		Replica: strings.Repeat("r", 253), NodeID: node, Cluster: strings.Repeat("c", xds.MaxClusterBytes),
		Address: "[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535", Stream: 1<<63 - 1, API: xds.APIECDS,
		Artifact: artifact, Acked: strings.Repeat("v", xds.MaxVersionBytes), AckedAt: t,
		Rejected: &mesh.Rejection{Version: strings.Repeat("v", xds.MaxVersionBytes), At: t,
			Error: strings.Repeat("<", xds.MaxRejectionBytes) + "… [truncated 1048576 bytes]"},
		Unserved: fmt.Sprintf("node metadata %s is %q, an artifact allotd does not serve (it serves %s); no filter configuration is sent",
			xds.ArtifactKey, artifact, strings.Join(xds.Artifacts, ", ")),
		ConnectedAt: t,
	}
}

// TestLargestReplicaRecordFits: the largest replica record fits etcd's
// default request limit beside the largest transaction the registry puts
// it in (its other writes, up to etcd.MaxTxnBytes, and their framing), and
// a real etcd takes it, with a fleet of the largest proxy records.
func TestLargestReplicaRecordFits(t *testing.T) {
	b, err := json.Marshal(largestReplica())
	if err != nil {
		t.Fatal(err)
	}
	const framing = 16 << 10 // keys' and operations' protobuf framing in one transaction: far less
	if room := int(embed.DefaultMaxRequestBytes) - etcd.MaxTxnBytes - framing; len(b) > room {
		t.Fatalf("the largest replica record is %d bytes; a transaction leaves it %d", len(b), room)
	}
	p, err := json.Marshal(largestProxy(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest replica record %d bytes (%d clusters); largest proxy record %d bytes: %d of them fill a transaction",
		len(b), xds.MaxClusters, len(p), etcd.MaxTxnBytes/len(p))

	c := etcdtest.Start(t, 1)
	reg := c.Open(t).Registry("r1", 5*time.Second)
	var fleet []mesh.Proxy
	for i := range 400 {
		fleet = append(fleet, largestProxy(i))
	}
	if err := reg.Publish(t.Context(), largestReplica(), fleet); err != nil {
		t.Fatalf("publish the largest replica record with %d of the largest proxies: %v", len(fleet), err)
	}
	v, err := c.Open(t).Registry("reader", time.Second).View(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(v.Replicas["r1"].Targets); got != xds.MaxClusters || len(v.Proxies) != len(fleet) {
		t.Errorf("read back %d clusters and %d proxies, want %d and %d", got, len(v.Proxies), xds.MaxClusters, len(fleet))
	}
}
