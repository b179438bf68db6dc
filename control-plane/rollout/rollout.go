// Package rollout is where a write stands across the proxies: which proxies
// must apply it (Targets), each proxy's state (ProxyStatus, State), the wait
// until they did — on this allotd's own proxies (Local) or, when allotd runs
// as replicas, on every replica's (Mesh) —, the result of a waited write
// (the Result constants) and its form in the admin API (allot.admin.v1.Rollout).
//
// For replicas it defines the records each replica publishes to the mesh
// registry (Replica, Summary, Proxy), the Registry interface (implemented
// on etcd, with a lease per replica, by control-plane/rollout/etcd) and the
// pure rules that decide where a proxy stands (View.Where,
// Replica.MaySettle, Replica.Applied).
//
// It imports only the standard library and the proto packages: allotctl
// links it for the state and result names, and the xDS server (xds), the
// registry's etcd adapter (rollout/etcd), the admin API and the guardian
// import it. What it waits on comes in through small interfaces: Server
// (*xds.Server implements it), Builder (reconcile.Builder) and Revisions
// (store.Store).
package rollout

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// State is where a proxy stands with the configuration it should run.
type State string

// The states of a proxy.
const (
	// StateApplied: the proxy acknowledged (ACK) the configuration.
	StateApplied State = "applied"
	// StatePending: the proxy has not answered the configuration yet.
	StatePending State = "pending"
	// StateRejected: the proxy refused the configuration (NACK) and keeps
	// running its previous one.
	StateRejected State = "rejected"
	// StateUnserved: the proxy's node metadata names a filter artifact its
	// server does not serve, so it is sent no configuration and keeps
	// running whatever its bootstrap gave it; ProxyStatus.Error says why.
	StateUnserved State = "unserved"
)

// States are the states of a proxy, in the order listings show them.
var States = []State{StateApplied, StatePending, StateRejected, StateUnserved}

// The results of a rollout (allot.admin.v1.Rollout.result): a waited
// write's, or ResultStatus for a snapshot of every proxy.
const (
	// ResultApplied: every proxy waited for applied the write.
	ResultApplied = string(StateApplied)
	// ResultRejected: some proxy refused it.
	ResultRejected = string(StateRejected)
	// ResultUnserved: some proxy runs a filter artifact its server does
	// not serve.
	ResultUnserved = string(StateUnserved)
	// ResultTimeout: some proxy had not answered when the wait ran out.
	ResultTimeout = "timeout"
	// ResultError: the configuration could not be built, or the proxies
	// not read.
	ResultError = "error"
	// ResultStatus: a snapshot of every proxy (GET /v1/rollout), no wait.
	ResultStatus = "status"
)

// ErrRejected reports that a proxy refused a configuration (a NACK).
var ErrRejected = errors.New("configuration rejected")

// ErrUnserved reports that a proxy runs a filter artifact the server does
// not serve (StateUnserved).
var ErrUnserved = errors.New("filter artifact not served")

// Targets maps a proxy cluster to the configuration version its proxies
// should run.
type Targets map[string]string

// Mark is where the configuration stood just before a write: the version
// each cluster's proxies should run then, and the store revision those
// versions are as of, when known (0: the store's latest when they were
// computed). A cluster missing from Targets counts as changed by the write.
type Mark struct {
	Targets  Targets
	Revision int64
}

// Before is the versions just before the write committed at store revision
// rev: the mark's, unless its revision says another write came between it
// and rev; then nil, and every cluster counts as changed (versions at an
// older revision would miss a write that puts a cluster back as it was:
// its version would equal that older one).
func (m Mark) Before(rev int64) Targets {
	if m.Revision > 0 && rev != m.Revision+1 {
		return nil
	}
	return m.Targets
}

// Changed returns the entries of t that are new or differ from before: the
// clusters a write between the two moments reconfigures.
func (t Targets) Changed(before Targets) Targets {
	out := Targets{}
	for c, v := range t {
		if before[c] != v {
			out[c] = v
		}
	}
	return out
}

// ProxyStatus is one connected proxy, i.e. one xDS stream, as its server
// sees it.
type ProxyStatus struct {
	// Replica is the allotd replica the proxy is connected to ("" for this
	// server's own proxies when it runs alone).
	Replica string `json:"replica,omitempty"`
	// NodeID is the Envoy node id (--service-node).
	NodeID string `json:"node_id"`
	// Cluster is the Envoy node cluster (--service-cluster): the service.
	Cluster string `json:"cluster"`
	// Address is the stream's peer address.
	Address string `json:"address"`
	// Stream identifies the xDS stream within its server process.
	Stream int64 `json:"stream"`
	// API is the xDS service the proxy uses: "ads" or "ecds" (xds.APIADS,
	// xds.APIECDS).
	API string `json:"api"`
	// Artifact is the filter artifact the proxy runs, from its node
	// metadata (xds.ArtifactWasm when absent), as the proxy gave it.
	Artifact string `json:"artifact"`
	// Target is the version the proxy should run: its cluster's current
	// version (in a Rollout, possibly a later one than the waited-for target).
	Target string `json:"target"`
	// State is where the proxy stands with Target.
	State State `json:"state"`
	// Sent is the version last sent on the stream, SentAt when.
	Sent   string    `json:"sent,omitempty"`
	SentAt time.Time `json:"sent_at,omitzero"`
	// Pushes counts the configurations sent on the stream.
	Pushes int `json:"pushes"`
	// Acked is the version the proxy last acknowledged (or reported running
	// when it connected), AckedAt when.
	Acked   string    `json:"acked,omitempty"`
	AckedAt time.Time `json:"acked_at,omitzero"`
	// Rejected is the last configuration the proxy refused on this stream.
	Rejected *Rejection `json:"rejected,omitempty"`
	// Error says why an unserved proxy (StateUnserved) gets no
	// configuration.
	Error string `json:"error,omitempty"`
	// ConnectedAt is when the stream opened; LastSeen when the proxy last
	// sent a request.
	ConnectedAt time.Time `json:"connected_at"`
	LastSeen    time.Time `json:"last_seen"`
}

// SortProxies sorts proxies by cluster, node id and stream, the order of
// every listing of them.
func SortProxies(ps []ProxyStatus) {
	slices.SortFunc(ps, func(a, b ProxyStatus) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.NodeID, b.NodeID), cmp.Compare(a.Stream, b.Stream))
	})
}

// Rollout is where the proxies of some clusters stand with their target
// versions.
type Rollout struct {
	// Targets are the versions waited for, per cluster.
	Targets Targets `json:"targets"`
	// Proxies are the proxies of those clusters (connected when the wait
	// began and still connected), sorted; each State is against its
	// cluster's current version (its Target field).
	Proxies []ProxyStatus `json:"proxies"`
}

// Count is the number of proxies in state st.
func (r Rollout) Count(st State) int {
	n := 0
	for _, p := range r.Proxies {
		if p.State == st {
			n++
		}
	}
	return n
}

// Unfinished returns the proxies that have not applied their target.
func (r Rollout) Unfinished() []ProxyStatus {
	var out []ProxyStatus
	for _, p := range r.Proxies {
		if p.State != StateApplied {
			out = append(out, p)
		}
	}
	return out
}

// Err is nil if every proxy applied its target, else an error naming every
// proxy that did not and why; it wraps ErrRejected if any proxy refused and
// ErrUnserved if any runs an artifact the server does not serve.
func (r Rollout) Err() error {
	var rejected, unserved, pending []string
	for _, p := range r.Proxies {
		switch p.State {
		case StateRejected:
			rejected = append(rejected, fmt.Sprintf("%s (cluster %s) rejected version %s: %s", p.NodeID, p.Cluster, p.Rejected.Version, p.Rejected.Error))
		case StateUnserved:
			unserved = append(unserved, fmt.Sprintf("%s (cluster %s): %s", p.NodeID, p.Cluster, p.Error))
		case StatePending:
			pending = append(pending, fmt.Sprintf("%s (cluster %s) has not applied version %s", p.NodeID, p.Cluster, p.Target))
		}
	}
	var errs []error
	if len(rejected) > 0 {
		errs = append(errs, fmt.Errorf("%w by %d of %d proxies: %s", ErrRejected, len(rejected), len(r.Proxies), strings.Join(rejected, "; ")))
	}
	if len(unserved) > 0 {
		errs = append(errs, fmt.Errorf("%w for %d of %d proxies: %s", ErrUnserved, len(unserved), len(r.Proxies), strings.Join(unserved, "; ")))
	}
	if len(pending) > 0 {
		errs = append(errs, fmt.Errorf("%d of %d proxies pending: %s", len(pending), len(r.Proxies), strings.Join(pending, "; ")))
	}
	return errors.Join(errs...)
}
