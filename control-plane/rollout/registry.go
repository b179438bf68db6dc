package rollout

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"time"
)

// Rejection is a configuration version a proxy refused.
type Rejection struct {
	// Version is the rejected configuration version.
	Version string `json:"version"`
	// Error is the proxy's reason (the NACK's error_detail message, cut
	// to 1 KiB by the xDS server).
	Error string `json:"error"`
	// At is when the NACK arrived.
	At time.Time `json:"at"`
}

// Replica is what one allotd replica publishes about itself.
type Replica struct {
	// ID names the replica, unique in the mesh.
	ID string `json:"id"`
	// AdminAddr and XDSAddr are where it listens.
	AdminAddr string `json:"admin_addr,omitempty"`
	XDSAddr   string `json:"xds_addr,omitempty"`
	// Revision is the store revision its configurations are built from
	// (at least).
	Revision int64 `json:"revision"`
	// Targets is the version it serves to each cluster it has proxies of
	// ("" while a cluster's first build is under way): every cluster of
	// its proxies is listed.
	Targets map[string]string `json:"targets"`
	// Proxies summarizes its proxies by cluster (Summarize), written after
	// the proxies' own records: what lets a reader wait for a rollout
	// without reading every proxy after every change (MaySettle).
	Proxies map[string]Summary `json:"proxies,omitempty"`
	// Settled says that every one of its proxies, AppliedProxies of them, has
	// acknowledged the version the replica serves its cluster, built from
	// store revision Revision or later: none pending, rejected or unserved
	// (Settle). A waited write needs no more than that of each replica.
	Settled        bool `json:"settled,omitempty"`
	AppliedProxies int  `json:"applied_proxies,omitempty"`
	// Lease is the registry lease its records live under (0: not known):
	// a new one means the replica restarted under the same ID, and the
	// proxies of its previous run are gone with it.
	Lease int64 `json:"lease,omitempty"`
}

// Settle sets r.Settled and r.AppliedProxies from its proxies' states against
// what r serves (r.Targets).
func (r *Replica) Settle(proxies []ProxyStatus) {
	r.Settled, r.AppliedProxies = true, 0
	for _, p := range proxies {
		if p.State != StateApplied || r.Targets[p.Cluster] == "" || p.Acked != r.Targets[p.Cluster] {
			r.Settled, r.AppliedProxies = false, 0
			return
		}
		r.AppliedProxies++
	}
}

// Summary counts a replica's proxies of one cluster by what they last
// acknowledged and rejected.
type Summary struct {
	// Proxies is the number of the replica's proxies of the cluster.
	Proxies int `json:"proxies"`
	// Acked counts them by the version they acknowledged last.
	Acked map[string]int `json:"acked,omitempty"`
	// Rejected counts them by the version they rejected last.
	Rejected map[string]int `json:"rejected,omitempty"`
	// Unserved counts those the replica serves nothing.
	Unserved int `json:"unserved,omitempty"`
	// Other counts the acknowledgements and rejections left out of Acked
	// and Rejected, each of which keeps its MaxSummaryVersions most
	// common versions: what bounds a cluster's record in the registry
	// whatever versions its proxies report.
	Other int `json:"other,omitempty"`
}

// MaxSummaryVersions is the most versions a Summary's Acked, and its
// Rejected, list. A rollout has two or three versions in flight in a
// cluster; more come only from proxies reporting versions of their own.
const MaxSummaryVersions = 4

// Summarize counts proxies (one replica's) by cluster.
func Summarize(proxies []Proxy) map[string]Summary {
	out := map[string]Summary{}
	for _, p := range proxies {
		s := out[p.Cluster]
		s.Proxies++
		switch {
		case p.Unserved != "":
			s.Unserved++
		default:
			if p.Acked != "" {
				s.Acked = inc(s.Acked, p.Acked)
			}
			if p.Rejected != nil {
				s.Rejected = inc(s.Rejected, p.Rejected.Version)
			}
		}
		out[p.Cluster] = s
	}
	for c, s := range out {
		var n int
		s.Acked, n = keepCommon(s.Acked)
		s.Other += n
		s.Rejected, n = keepCommon(s.Rejected)
		s.Other += n
		out[c] = s
	}
	return out
}

// keepCommon keeps the MaxSummaryVersions versions of m with the most
// proxies (ties to the smaller version) and returns how many proxies the
// others counted.
func keepCommon(m map[string]int) (map[string]int, int) {
	if len(m) <= MaxSummaryVersions {
		return m, 0
	}
	vs := slices.Collect(maps.Keys(m))
	slices.SortFunc(vs, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	other := 0
	for _, v := range vs[MaxSummaryVersions:] {
		other += m[v]
		delete(m, v)
	}
	return m, other
}

func inc(m map[string]int, k string) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[k]++
	return m
}

// MaySettle reports from r's summary whether each of its proxies of
// cluster may stand applied, rejected or unserved (Where) with a write
// committed at revision rev whose version for cluster is target. A proxy
// that acknowledged one of the versions that count and rejected the other
// is counted twice, and every proxy whose version the summary left out
// (Other) counts, so the answer may be true while one is pending, never
// false while none is: it says when reading every proxy is worth it. A
// replica without a summary (or without proxies of cluster) may settle.
func (r Replica) MaySettle(cluster, target string, rev int64) bool {
	s, ok := r.Proxies[cluster]
	if !ok {
		return true
	}
	n := s.Unserved + s.Other + s.Acked[target] + s.Rejected[target]
	if cur := r.Targets[cluster]; r.Revision >= rev && cur != "" && cur != target {
		n += s.Acked[cur] + s.Rejected[cur]
	}
	return n >= s.Proxies
}

// Applied counts, from r's summary, its proxies of cluster that stand
// applied (Where) with a write committed at revision rev whose version for
// cluster is target, and reports whether that is all of them. Each proxy
// is counted by the version it acknowledged last, once, so unlike MaySettle
// the count is exact; without a summary of cluster, all is false.
func (r Replica) Applied(cluster, target string, rev int64) (n int, all bool) {
	s, ok := r.Proxies[cluster]
	if !ok {
		return 0, false
	}
	n = s.Acked[target]
	if cur := r.Targets[cluster]; r.Revision >= rev && cur != "" && cur != target {
		n += s.Acked[cur]
	}
	return n, n == s.Proxies
}

// NodeKey names a proxy in the mesh: its Envoy cluster and node id. A node
// id alone names no proxy: proxies of two clusters may use the same one (a
// policy that proves the cluster alone, mtls ".../cluster/{cluster}", lets
// a proxy of another cluster subscribe under one of ours, which GET
// /v1/rollout lists), and neither may stand for the other in a waited
// write.
type NodeKey struct {
	Cluster, NodeID string
}

// Node is where a node's proxy is connected, as the registry's keys say.
type Node struct {
	// Replica is the ID of its replica, Lease the lease of the replica's
	// run its key was written under (0: not known).
	Replica string
	Lease   int64
}

// On reports whether the node is on the run of r its key was written in
// (a replica restarted under the same ID is another run; a lease of 0 on
// either side is not known, and matches).
func (n Node) On(r Replica) bool {
	return n.Lease == 0 || r.Lease == 0 || n.Lease == r.Lease
}

// Roster is the mesh without its proxies' records, read at one point in
// time: the live replicas' records, with their summaries, and where each
// node is connected. It costs a fraction of a View.
type Roster struct {
	// Replicas are the live replicas by ID.
	Replicas map[string]Replica
	// Nodes are the live replicas' proxies by cluster and node id (a node
	// connected to two replicas, while the lease of the one it left runs
	// out, is listed on either).
	Nodes map[NodeKey]Node
}

// Proxy is one connected proxy (one xDS stream) as its replica publishes
// it. It holds only what changes on connect, ACK, NACK and disconnect, so
// that a replica writes it only then.
type Proxy struct {
	// Replica is the ID of the replica the proxy is connected to.
	Replica string `json:"replica"`
	// NodeID and Cluster identify the proxy (Envoy's node id and cluster).
	NodeID  string `json:"node_id"`
	Cluster string `json:"cluster"`
	// Address is the stream's peer address, Stream its number on the replica.
	Address string `json:"address,omitempty"`
	Stream  int64  `json:"stream"`
	// API is "ads" or "ecds"; Artifact the filter artifact the proxy runs.
	API      string `json:"api,omitempty"`
	Artifact string `json:"artifact,omitempty"`
	// Acked is the version the proxy last acknowledged, AckedAt when.
	Acked   string    `json:"acked,omitempty"`
	AckedAt time.Time `json:"acked_at,omitzero"`
	// Rejected is the last version the proxy refused.
	Rejected *Rejection `json:"rejected,omitempty"`
	// Unserved says why the proxy is sent nothing ("" when it is served).
	Unserved string `json:"unserved,omitempty"`
	// ConnectedAt is when the stream opened.
	ConnectedAt time.Time `json:"connected_at"`
}

// View is the mesh as the registry holds it: the live replicas (their
// leases held) and their proxies.
type View struct {
	// Replicas are the live replicas by ID.
	Replicas map[string]Replica
	// Proxies are the live replicas' proxies, one per node (see Dedup),
	// sorted by cluster and node id.
	Proxies []Proxy
}

// Dedup keeps one record per node id, sorted by cluster and node: the
// newest connection's. A proxy that reconnected to another replica is
// counted once even while its old replica's lease has not yet expired.
func Dedup(ps []Proxy) []Proxy {
	slices.SortFunc(ps, func(a, b Proxy) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.NodeID, b.NodeID),
			b.ConnectedAt.Compare(a.ConnectedAt), cmp.Compare(a.Replica, b.Replica))
	})
	return slices.CompactFunc(ps, func(a, b Proxy) bool { return a.NodeID == b.NodeID && a.Cluster == b.Cluster })
}

// Registry holds every replica's published state, each under a lease of
// its replica: when a replica stops renewing it (it died or lost the
// store), its records disappear with the lease and its proxies leave the
// live set.
type Registry interface {
	// Publish replaces this replica's record and its proxies' records,
	// writing only what changed since the last Publish.
	Publish(ctx context.Context, r Replica, proxies []Proxy) error
	// View reads the whole mesh at one point in time.
	View(ctx context.Context) (View, error)
	// Replicas reads the live replicas' records alone, without their
	// proxies: what every replica serves (View.Replicas), at the cost of
	// a few records whatever the size of the mesh.
	Replicas(ctx context.Context) (map[string]Replica, error)
	// Roster reads the live replicas' records and where their proxies
	// are connected (the proxies View lists, whatever their state),
	// without the proxies' records.
	Roster(ctx context.Context) (Roster, error)
	// Settled reports, from the live replicas' records as the registry's
	// watch last delivered them (no read), those records' fixed fields
	// (no Targets or summaries), and whether every one has Settled with a
	// configuration built from store revision rev or later; all is false
	// when it cannot tell (no watch delivers the records).
	Settled(rev int64) (replicas map[string]Replica, all bool)
	// Watch returns a channel that receives after every change of a
	// replica's record (coalesced: one pending value at most) — which
	// its replica rewrites, after its proxies' records, whenever their
	// summary changes; it is closed when ctx ends or the registry closes.
	Watch(ctx context.Context) <-chan struct{}
}

// Where returns where p stands with a write committed at store revision
// rev whose configuration for p's cluster has version target: applied if
// p acknowledged target, or if p's replica has built from rev or later and
// p acknowledged the version that replica serves now (a later write
// superseded target); rejected likewise for a refusal; unserved if its
// replica serves p nothing; pending otherwise. A replica that has not
// caught up with rev never makes p applied except through target itself.
func (v View) Where(p Proxy, target string, rev int64) State {
	if p.Unserved != "" {
		return StateUnserved
	}
	current := ""
	if r, ok := v.Replicas[p.Replica]; ok && r.Revision >= rev {
		current = r.Targets[p.Cluster]
	}
	switch {
	case p.Acked != "" && (p.Acked == target || p.Acked == current):
		return StateApplied
	case p.Rejected != nil && (p.Rejected.Version == target || (current != "" && p.Rejected.Version == current)):
		return StateRejected
	}
	return StatePending
}

// Current is the version p's replica serves p's cluster now ("" if unknown).
func (v View) Current(p Proxy) string { return v.Replicas[p.Replica].Targets[p.Cluster] }
