package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// Builder computes the configuration versions from the store, as every
// replica does alike (reconcile.Builder).
type Builder interface {
	// Versions returns each cluster's configuration version now (as of
	// store revision atLeast or later, if positive); clusters whose
	// configuration fails are left out.
	Versions(clusters []string, atLeast int64) (map[string]string, error)
	// AwaitApplied waits until every served snapshot is built from store
	// revision rev or later, for at most d, and reports whether it is.
	AwaitApplied(ctx context.Context, rev int64, d time.Duration) bool
	// Known returns the clusters' versions as of the experiments the
	// builder read last, without a read of the store, and the store
	// revision they are as of; ok is false when it has read none.
	Known(clusters []string) (versions map[string]string, rev int64, ok bool)
}

// Revisions is the store's current revision (store.Store).
type Revisions interface {
	Revision(ctx context.Context) (int64, error)
}

// Mesh waits for the proxies of every replica, read from the registry: it
// implements admin.Rollouts for a replica. x is the replica's own xDS
// server, b its builder, st the store.
type Mesh struct {
	x   Server
	reg Registry
	b   Builder
	st  Revisions

	seen atomic.Pointer[[]string] // the mesh's clusters as last read (the replicas' records)
}

// NewMesh is the rollout of the whole mesh seen from the replica of x and b.
func NewMesh(x Server, reg Registry, b Builder, st Revisions) *Mesh {
	return &Mesh{x: x, reg: reg, b: b, st: st}
}

// clusters are the clusters of this replica's and the whole mesh's
// proxies: those in every live replica's record (which lists the
// clusters of all the proxies it publishes), not from a read of every
// proxy. Without a read (rs nil), those of the last read.
func (m *Mesh) clusters(rs map[string]Replica) []string {
	set := maps.Clone(m.x.Targets())
	if rs != nil {
		var seen []string
		for _, r := range rs {
			for c := range r.Targets {
				seen = append(seen, c)
			}
		}
		slices.Sort(seen)
		seen = slices.Compact(seen)
		m.seen.Store(&seen)
	}
	if seen := m.seen.Load(); seen != nil {
		for _, c := range *seen {
			set[c] = ""
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// targets are the versions this replica computes for clusters now (as of
// store revision atLeast or later, if positive); every replica computes the
// same from the same store state.
func (m *Mesh) targets(clusters []string, atLeast int64) (Targets, error) {
	return m.b.Versions(clusters, atLeast)
}

// Mark is the versions before a write, of the mesh's clusters as last read,
// as of the experiments this replica read last, with their revision: no
// read of the store nor of the registry on the write's path. Wait keeps
// them only if the write is the next revision (Mark.Before). Before any
// read, they are read, as of the store's latest revision; if they cannot
// be computed, every cluster counts as changed by the write (no Targets).
func (m *Mesh) Mark() Mark {
	if m.seen.Load() != nil {
		if t, rev, ok := m.b.Known(m.clusters(nil)); ok {
			return Mark{Targets: t, Revision: rev}
		}
	}
	var rs map[string]Replica
	if r, err := m.reg.Replicas(context.Background()); err == nil {
		rs = r
	}
	t, _ := m.targets(m.clusters(rs), 0)
	return Mark{Targets: t}
}

// Wait waits until every proxy of the mesh whose cluster's version the
// write changed has acknowledged a version containing it (its target, or
// what its replica serves after catching up with the write), or rejected
// it, or until ctx ends. A proxy that disconnected from a live replica
// drops out; one whose replica died (its lease expired) is still waited
// for, pending, until it reconnects to another replica and applies the
// write there, or ctx ends: its replica's death says nothing about the
// proxy, which in all likelihood is failing over, still serving what it
// had (counting it out would report a write applied that it does not yet
// serve).
//
// It follows the replicas' records, which summarize their proxies
// (docs/perf/replicas.md): when they say every proxy concerned applied
// the write and every replica the waited proxies were on is live, that
// settles it (settled), and neither a node key nor a proxy's record is
// read again. It reads every proxy only when the summaries say the
// rollout may have settled otherwise (a rejection, a proxy gone with its
// replica), and at least every fullReadEvery.
func (m *Mesh) Wait(ctx context.Context, mark Mark, rev int64) *adminv1.Rollout {
	// The proxies waited for are those live now, from the registry's keys
	// alone, read while this replica pushes the write: a read waits
	// behind the registry writes of the rollout under way.
	lc := m.readLive(ctx)
	if rev <= 0 { // the write's revision is not known: the store's, at least as late
		var err error
		if rev, err = m.st.Revision(ctx); err != nil {
			return Failed(err)
		}
	}
	before := mark.Before(rev) // (with the store's revision, a write after this one clears it too)
	// This replica pushes the write when its watch of the store delivers
	// it (reconcile.Sync); the write pushes it itself only if that is late (or
	// fails, which Refresh then reports) rather than build it twice.
	if !m.b.AwaitApplied(ctx, rev, refreshAfter) {
		if err := m.x.Refresh(ctx); err != nil {
			return Failed(err)
		}
	}
	changes := m.reg.Watch(ctx)
	l := <-lc
	if l.err != nil && ctx.Err() == nil {
		return Failed(l.err)
	}
	after, err := m.targets(m.meshClusters(l.clusters, before), rev)
	if err != nil {
		return Failed(err)
	}
	targets := after.Changed(before)
	waited := l.nodes
	var ro *Rollout // from the last read of every proxy
	report := func() *Rollout {
		if ro == nil { // none yet: where every proxy stands, if the registry answers
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			ro, _ = m.rollout(rctx, waited, targets, rev)
			cancel()
		}
		return ro
	}
	holders := holding(waited, targets)
	full := time.NewTicker(fullReadEvery)
	defer full.Stop()
	for force := false; ; {
		read := force
		// Every live replica settled on what it serves, built from the
		// write on: it is applied, from the records the registry's watch
		// delivered, without a read.
		live, all := m.reg.Settled(rev)
		if all && !read {
			if n, ok := settledOn(live, waited, targets); ok {
				return &adminv1.Rollout{Result: ResultApplied, Targets: targets, Proxies: []*adminv1.ProxyStatus{},
					Counts: map[string]int32{string(StateApplied): int32(n)}}
			}
		}
		// While a replica holding waited proxies has a record, as the
		// watch delivered it, built from before the write, its summary
		// cannot count them applied nor rejected: nothing is read until it
		// publishes (the watch signals it) or the next full read.
		if !read && !behind(live, holders, rev) {
			rs, err := m.reg.Replicas(ctx)
			if err == nil && allApplied(rs, targets, rev) {
				if n, ok := settled(rs, waited, targets, rev); ok {
					return &adminv1.Rollout{Result: ResultApplied, Targets: targets, Proxies: []*adminv1.ProxyStatus{},
						Counts: map[string]int32{string(StateApplied): int32(n)}}
				}
			}
			read = err != nil || maySettle(rs, targets, rev)
		}
		if read {
			r, err := m.rollout(ctx, waited, targets, rev)
			switch {
			case err != nil && ctx.Err() == nil:
				return Failed(err)
			case err == nil && r.Count(StatePending) == 0:
				return Waited(*r, r.Err())
			case err == nil:
				ro = r
			}
		}
		force = false
		select {
		case <-ctx.Done():
			r := report()
			return Waited(*r, errors.Join(ctx.Err(), r.Err()))
		case _, ok := <-changes:
			if !ok {
				r := report()
				return Waited(*r, errors.Join(context.Cause(ctx), r.Err()))
			}
		case <-full.C:
			// Every proxy is read now and then whatever the summaries say:
			// one that connected after the write counts there, but is not
			// waited for.
			force = true
		}
	}
}

// holding is the replicas that held waited proxies of targets' clusters
// when the write began.
func holding(waited map[NodeKey]Node, targets Targets) map[string]bool {
	held := map[string]bool{}
	for key, was := range waited {
		if _, affected := targets[key.Cluster]; affected {
			held[was.Replica] = true
		}
	}
	return held
}

// behind reports whether the record of a live replica of holders, as the
// registry's watch delivered it (live; nil: the watch knows none), is
// built from a revision before rev.
func behind(live map[string]Replica, holders map[string]bool, rev int64) bool {
	for id := range holders {
		if r, ok := live[id]; ok && r.Revision < rev {
			return true
		}
	}
	return false
}

// live is what Wait reads of the registry while the write is pushed: the
// live proxies, and the mesh's clusters.
type live struct {
	nodes    map[NodeKey]Node
	clusters []string
	err      error
}

// readLive reads the live proxies and the replicas' records (the mesh's
// clusters, which the next Mark starts from) in a goroutine, delivering
// them on the channel it returns.
func (m *Mesh) readLive(ctx context.Context) <-chan live {
	lc := make(chan live, 1)
	go func() {
		var l live
		ro, err := m.reg.Roster(ctx)
		l.nodes, l.err = ro.Nodes, err
		if l.err == nil {
			l.clusters = m.clusters(ro.Replicas)
		}
		lc <- l
	}()
	return lc
}

// meshClusters are the mesh's clusters, sorted, once each: those read
// (listed), those Mark computed versions for, and this replica's.
func (m *Mesh) meshClusters(listed []string, mark map[string]string) []string {
	clusters := listed
	for c := range mark {
		clusters = append(clusters, c)
	}
	for c := range m.x.Targets() {
		clusters = append(clusters, c)
	}
	slices.Sort(clusters)
	return slices.Compact(clusters)
}

// allApplied reports whether every live replica's summary says all its
// proxies of targets' clusters applied a write committed at revision rev
// (Replica.Applied).
func allApplied(replicas map[string]Replica, targets Targets, rev int64) bool {
	for _, r := range replicas {
		for c, v := range targets {
			if _, ok := r.Proxies[c]; !ok {
				continue // none of its proxies
			}
			if _, all := r.Applied(c, v, rev); !all {
				return false
			}
		}
	}
	return true
}

// settled reports whether every waited proxy of targets' clusters applied a
// write committed at revision rev, from the replicas' records alone (rs,
// every one of whose summaries says all its proxies of targets' clusters
// applied: allApplied), and counts them. Each waited proxy is where the
// write began on a replica that is still live, so it either is still
// connected there, or reconnected to another live replica, and is counted
// applied by that replica's summary either way, or it disconnected and
// drops out. It cannot tell (false) when a replica that held waited proxies
// is gone: those proxies are failing over, and the caller reads every
// proxy. The count is each replica's applied proxies, at most as many as it
// held waited ones: one that moved between replicas during the write may
// be left out of it, never the verdict.
func settled(rs map[string]Replica, waited map[NodeKey]Node, targets Targets, rev int64) (int, bool) {
	held := map[string]map[string]int{} // replica → cluster → waited proxies
	for key, was := range waited {
		if _, affected := targets[key.Cluster]; !affected {
			continue
		}
		if r, live := rs[was.Replica]; !live || !was.On(r) {
			return 0, false
		}
		if held[was.Replica] == nil {
			held[was.Replica] = map[string]int{}
		}
		held[was.Replica][key.Cluster]++
	}
	n := 0
	for id, clusters := range held {
		for c, w := range clusters {
			applied, _ := rs[id].Applied(c, targets[c], rev)
			n += min(w, applied)
		}
	}
	return n, true
}

// settledOn is settled when every live replica has Settled (live, by ID):
// every waited proxy of targets' clusters was on one of them, so it applied
// or disconnected. It cannot tell (false) when a replica that held waited
// proxies is gone, or restarted (Node.On).
func settledOn(live map[string]Replica, waited map[NodeKey]Node, targets Targets) (int, bool) {
	held := map[string]int{}
	for key, was := range waited {
		if _, affected := targets[key.Cluster]; !affected {
			continue
		}
		if r, ok := live[was.Replica]; !ok || !was.On(r) {
			return 0, false
		}
		held[was.Replica]++
	}
	n := 0
	for id, w := range held {
		n += min(w, live[id].AppliedProxies)
	}
	return n, true
}

// rollout reads every proxy of the mesh and reports the waited ones of
// targets' clusters against a write committed at revision rev, and updates
// where each waited proxy is. A waited proxy missing from the mesh whose
// last replica is no longer live is pending: it is failing over (see
// Wait); one missing from a live replica disconnected and drops out.
func (m *Mesh) rollout(ctx context.Context, waited map[NodeKey]Node, targets Targets, rev int64) (*Rollout, error) {
	ro := &Rollout{Targets: targets, Proxies: []ProxyStatus{}}
	v, err := m.reg.View(ctx)
	if err != nil {
		return ro, err
	}
	seen := make(map[NodeKey]bool, len(v.Proxies))
	ro.Proxies = make([]ProxyStatus, 0, len(waited))
	for _, p := range v.Proxies {
		key := NodeKey{Cluster: p.Cluster, NodeID: p.NodeID}
		if _, ok := waited[key]; !ok {
			continue
		}
		seen[key] = true
		waited[key] = Node{Replica: p.Replica, Lease: v.Replicas[p.Replica].Lease}
		if _, ok := targets[p.Cluster]; ok {
			ro.Proxies = append(ro.Proxies, proxyStatus(p, targets[p.Cluster], v.Where(p, targets[p.Cluster], rev)))
		}
	}
	for key, at := range waited {
		if seen[key] {
			continue
		}
		r, live := v.Replicas[at.Replica]
		if live && at.On(r) {
			delete(waited, key) // it disconnected from a live replica
			continue
		}
		if _, ok := targets[key.Cluster]; !ok {
			continue // not affected by the write
		}
		ro.Proxies = append(ro.Proxies, ProxyStatus{Replica: at.Replica, NodeID: key.NodeID, Cluster: key.Cluster,
			Target: targets[key.Cluster], State: StatePending,
			Error: goneError(at.Replica, live)})
	}
	SortProxies(ro.Proxies)
	return ro, nil
}

// goneError says why a waited proxy missing from the mesh is pending: its
// replica is gone, or restarted (live under a new lease).
func goneError(replica string, restarted bool) string {
	if restarted {
		return fmt.Sprintf("its replica %s restarted; waiting for it to reconnect", replica)
	}
	return fmt.Sprintf("its replica %s is gone (lease expired); waiting for it to reconnect to another", replica)
}

// refreshAfter is how long a waited write waits for its replica's own
// push of the write before it pushes it itself.
const refreshAfter = time.Second

// fullReadEvery is how often a waited write reads every proxy even when
// the replicas' summaries say some are pending.
const fullReadEvery = time.Second

// maySettle reports whether every live replica's summary says its
// proxies of targets' clusters may stand settled with a write committed
// at revision rev (Replica.MaySettle).
func maySettle(replicas map[string]Replica, targets Targets, rev int64) bool {
	for _, r := range replicas {
		for c, v := range targets {
			if !r.MaySettle(c, v, rev) {
				return false
			}
		}
	}
	return true
}

// Status reports every proxy of the mesh against the version its replica
// serves its cluster.
func (m *Mesh) Status() *adminv1.Rollout {
	v, err := m.reg.View(context.Background())
	if err != nil {
		return Failed(err)
	}
	ro := Rollout{Targets: Targets{}, Proxies: make([]ProxyStatus, 0, len(v.Proxies))}
	for _, p := range v.Proxies {
		cur := v.Current(p)
		if cur != "" {
			ro.Targets[p.Cluster] = cur
		}
		ro.Proxies = append(ro.Proxies, proxyStatus(p, cur, v.Where(p, cur, v.Replicas[p.Replica].Revision)))
	}
	out := Snapshot(ro)
	out.Replicas = replicaStatuses(v)
	return out
}

// replicaStatuses lists the live replicas of v, sorted by id.
func replicaStatuses(v View) []*adminv1.ReplicaStatus {
	count := map[string]int32{}
	for _, p := range v.Proxies {
		count[p.Replica]++
	}
	var out []*adminv1.ReplicaStatus
	for _, id := range slices.Sorted(maps.Keys(v.Replicas)) {
		r := v.Replicas[id]
		out = append(out, &adminv1.ReplicaStatus{Id: id, AdminAddr: r.AdminAddr, XdsAddr: r.XDSAddr, Revision: r.Revision, Proxies: count[id]})
	}
	return out
}

// AppendRecords appends ps as the registry's records (what a replica
// publishes of its proxies) to dst; proxyStatus reads one back.
func AppendRecords(dst []Proxy, ps []ProxyStatus) []Proxy {
	for _, p := range ps {
		dst = append(dst, Proxy{
			NodeID: p.NodeID, Cluster: p.Cluster, Address: p.Address, Stream: p.Stream, API: p.API,
			Artifact: p.Artifact, Acked: p.Acked, AckedAt: p.AckedAt, Rejected: p.Rejected,
			Unserved: p.Error, ConnectedAt: p.ConnectedAt,
		})
	}
	return dst
}

// proxyStatus is p's record as a status against target, in state st.
func proxyStatus(p Proxy, target string, st State) ProxyStatus {
	return ProxyStatus{
		Replica: p.Replica, NodeID: p.NodeID, Cluster: p.Cluster, Address: p.Address, Stream: p.Stream, API: p.API,
		Artifact: p.Artifact, Target: target, State: st, Acked: p.Acked, AckedAt: p.AckedAt,
		Rejected: p.Rejected, Error: p.Unserved, ConnectedAt: p.ConnectedAt,
	}
}
