package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allotmesh/allot/control-plane/mesh"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/xds"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// Registry is the mesh registry of a replicated allotd (store/etcd's).
type Registry interface {
	mesh.Registry
	// Withdraw removes this replica's records at once (graceful shutdown).
	Withdraw(ctx context.Context) error
	// Lease reports the replica's lease and whether it is kept alive.
	Lease() (id int64, alive bool)
}

// republishEvery re-publishes an unchanged state (a no-op write-wise), so
// that a lease lost while nothing changed is granted again and the records
// return without waiting for a change.
const republishEvery = time.Second

// A failed publish is tried again after publishRetryFirst, then after
// twice as long each time up to publishRetryMax, whether or not anything
// changed meanwhile (changes wait for the retry: it publishes the state of
// that moment). An etcd leader election takes about a second; a
// publishRetryMax under the default lease TTL (10 s) keeps the replica's
// records alive through one that keeps failing for a few seconds.
const (
	publishRetryFirst = 50 * time.Millisecond
	publishRetryMax   = 2 * time.Second
)

// publishRetry is the wait before the next publish after failures failed
// ones in a row (at least one).
func publishRetry(failures int) time.Duration {
	d := publishRetryFirst
	for i := 1; i < failures && d < publishRetryMax; i++ {
		d *= 2
	}
	return min(d, publishRetryMax)
}

// newPublishFailures is the counter of failed publishes (each is retried).
func newPublishFailures() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "allot_replica_publish_failures_total",
		Help: "Publishes of this replica's records to the mesh registry that failed; each is retried with backoff.",
	})
}

// publishLoop publishes this replica's state and its proxies' to reg after
// every change, and again after a failure (counted in failed) with backoff,
// until ctx ends; then it withdraws them.
func publishLoop(ctx context.Context, reg Registry, x *xds.Server, b *builder, self mesh.Replica, failed prometheus.Counter, log *slog.Logger) {
	tick := time.NewTicker(republishEvery)
	defer tick.Stop()
	failures := 0                 // in a row
	var proxies []xds.ProxyStatus // reused: a rollout publishes thousands, several times
	var mp []mesh.Proxy
	for {
		changed := x.Changes()
		r := self
		r.Revision = b.appliedRevision()
		proxies = x.AppendProxies(proxies[:0])
		r.Targets = x.Targets()
		for _, p := range proxies {
			if _, ok := r.Targets[p.Cluster]; !ok {
				r.Targets[p.Cluster] = "" // its first build is under way
			}
		}
		mp = appendMeshProxies(mp[:0], proxies)
		r.Proxies = mesh.Summarize(mp)
		err := reg.Publish(ctx, r, mp)
		switch {
		case err != nil && ctx.Err() == nil:
			failed.Inc()
			failures++
			if failures == 1 {
				log.Warn("publish to the mesh registry", "error", err)
			}
		case err == nil && failures > 0:
			log.Info("publishing to the mesh registry again", "failed_publishes", failures)
			failures = 0
		}
		applied, ticks := b.applied(), tick.C
		var retry *time.Timer
		var retried <-chan time.Time
		if failures > 0 {
			retry = time.NewTimer(publishRetry(failures))
			retried, changed, applied, ticks = retry.C, nil, nil, nil
		}
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			if err := reg.Withdraw(wctx); err != nil {
				log.Warn("withdraw from the mesh registry", "error", err)
			}
			cancel()
			return
		case <-changed:
		case <-applied:
		case <-ticks:
		case <-retried:
		}
		if retry != nil {
			retry.Stop()
		}
	}
}

// appendMeshProxies appends ps as the registry's records to dst.
func appendMeshProxies(dst []mesh.Proxy, ps []xds.ProxyStatus) []mesh.Proxy {
	for _, p := range ps {
		dst = append(dst, mesh.Proxy{
			NodeID: p.NodeID, Cluster: p.Cluster, Address: p.Address, Stream: p.Stream, API: p.API,
			Artifact: p.Artifact, Acked: p.Acked, AckedAt: p.AckedAt, Rejected: p.Rejected,
			Unserved: p.Error, ConnectedAt: p.ConnectedAt,
		})
	}
	return dst
}

// meshRollouts implements admin.Rollouts for a replica: the proxies of
// every replica, read from the registry.
type meshRollouts struct {
	x   *xds.Server
	reg Registry
	b   *builder
	st  store.Store
}

// clusters are the clusters of this replica's and the whole mesh's
// proxies: those in every live replica's record (which lists the
// clusters of all the proxies it publishes), not from a read of every
// proxy.
func (m meshRollouts) clusters(ctx context.Context) []string {
	set := maps.Clone(m.x.Targets())
	if rs, err := m.reg.Replicas(ctx); err == nil {
		for _, r := range rs {
			for c := range r.Targets {
				set[c] = ""
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// targets are the versions this replica computes for clusters now (as of
// store revision atLeast or later, if positive); every replica computes the
// same from the same store state.
func (m meshRollouts) targets(clusters []string, atLeast int64) (xds.Targets, error) {
	return m.b.versions(clusters, atLeast)
}

// Mark is the versions before a write; if they cannot be computed, every
// cluster counts as changed by it (nil).
func (m meshRollouts) Mark() map[string]string {
	t, _ := m.targets(m.clusters(context.Background()), 0)
	return t
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
// the write, the node keys alone confirm it (settled), and no proxy's
// record is read. It reads every proxy only when the summaries say the
// rollout may have settled otherwise (a rejection, a proxy gone with its
// replica), and at least every fullReadEvery.
func (m meshRollouts) Wait(ctx context.Context, mark map[string]string) *adminv1.Rollout {
	// The proxies waited for are those live now, from the registry's keys
	// alone, read while this replica pushes the write: a read waits
	// behind the registry writes of the rollout under way.
	type live struct {
		nodes    map[string]mesh.Node
		clusters []string
		err      error
	}
	lc := make(chan live, 1)
	go func() {
		var l live
		ro, err := m.reg.Roster(ctx)
		l.nodes, l.err = ro.Nodes, err
		if l.err == nil && mark == nil {
			l.clusters = m.clusters(ctx) // Mark could not list them
		}
		lc <- l
	}()
	rev, err := m.st.Revision(ctx)
	if err != nil {
		return &adminv1.Rollout{Result: "error", Error: err.Error()}
	}
	// This replica pushes the write when its watch of the store delivers
	// it (syncLoop); the write pushes it itself only if that is late (or
	// fails, which Refresh then reports) rather than build it twice.
	if !m.b.awaitApplied(ctx, rev, refreshAfter) {
		if err := m.x.Refresh(ctx); err != nil {
			return &adminv1.Rollout{Result: "error", Error: err.Error()}
		}
	}
	changes := m.reg.Watch(ctx)
	l := <-lc
	if l.err != nil && ctx.Err() == nil {
		return &adminv1.Rollout{Result: "error", Error: l.err.Error()}
	}
	// The mesh's clusters: those Mark computed versions for, and this
	// replica's.
	clusters := l.clusters
	for c := range mark {
		clusters = append(clusters, c)
	}
	for c := range m.x.Targets() {
		clusters = append(clusters, c)
	}
	slices.Sort(clusters)
	after, err := m.targets(slices.Compact(clusters), rev)
	if err != nil {
		return &adminv1.Rollout{Result: "error", Error: err.Error()}
	}
	targets := after.Changed(mark)
	waited := l.nodes
	var ro *xds.Rollout // from the last read of every proxy
	report := func() *xds.Rollout {
		if ro == nil { // none yet: where every proxy stands, if the registry answers
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			ro, _ = m.rollout(rctx, waited, targets, rev)
			cancel()
		}
		return ro
	}
	full := time.NewTicker(fullReadEvery)
	defer full.Stop()
	for force := false; ; {
		read := force
		if !read {
			rs, err := m.reg.Replicas(ctx)
			if err == nil && allApplied(rs, targets, rev) {
				if n, ok := m.settled(ctx, waited, targets, rev); ok {
					return &adminv1.Rollout{Result: "applied", Targets: targets, Proxies: []*adminv1.ProxyStatus{},
						Counts: map[string]int32{string(xds.StateApplied): int32(n)}}
				}
			}
			read = err != nil || maySettle(rs, targets, rev)
		}
		if read {
			r, err := m.rollout(ctx, waited, targets, rev)
			switch {
			case err != nil && ctx.Err() == nil:
				return &adminv1.Rollout{Result: "error", Error: err.Error()}
			case err == nil && r.Count(xds.StatePending) == 0:
				return rolloutResult(*r, r.Err())
			case err == nil:
				ro = r
			}
		}
		force = false
		select {
		case <-ctx.Done():
			r := report()
			return rolloutResult(*r, errors.Join(ctx.Err(), r.Err()))
		case _, ok := <-changes:
			if !ok {
				r := report()
				return rolloutResult(*r, errors.Join(context.Cause(ctx), r.Err()))
			}
		case <-full.C:
			// Every proxy is read now and then whatever the summaries say:
			// one that connected after the write counts there, but is not
			// waited for.
			force = true
		}
	}
}

// allApplied reports whether every live replica's summary says all its
// proxies of targets' clusters applied a write committed at revision rev
// (mesh.Replica.Applied).
func allApplied(replicas map[string]mesh.Replica, targets xds.Targets, rev int64) bool {
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
// write committed at revision rev, from one read of the replicas' records
// and the node keys (a Roster), and counts them. It cannot tell (false)
// when a waited proxy's replica is gone and the proxy has not reappeared,
// or when the summary of a waited proxy's replica does not say all its
// proxies of that cluster applied; the caller then reads every proxy. A
// waited proxy missing from a live replica disconnected: it drops out.
func (m meshRollouts) settled(ctx context.Context, waited map[string]mesh.Node, targets xds.Targets, rev int64) (int, bool) {
	ro, err := m.reg.Roster(ctx)
	if err != nil {
		return 0, false
	}
	n := 0
	for node, was := range waited {
		now, ok := ro.Nodes[node]
		if !ok {
			_, live := ro.Replicas[was.Replica]
			if _, affected := targets[was.Cluster]; live || !affected {
				continue
			}
			return 0, false
		}
		target, ok := targets[now.Cluster]
		if !ok {
			continue
		}
		if _, all := ro.Replicas[now.Replica].Applied(now.Cluster, target, rev); !all {
			return 0, false
		}
		n++
	}
	return n, true
}

// rollout reads every proxy of the mesh and reports the waited ones of
// targets' clusters against a write committed at revision rev, and updates
// where each waited proxy is. A waited proxy missing from the mesh whose
// last replica is no longer live is pending: it is failing over (see
// Wait); one missing from a live replica disconnected and drops out.
func (m meshRollouts) rollout(ctx context.Context, waited map[string]mesh.Node, targets xds.Targets, rev int64) (*xds.Rollout, error) {
	ro := &xds.Rollout{Targets: targets, Proxies: []xds.ProxyStatus{}}
	v, err := m.reg.View(ctx)
	if err != nil {
		return ro, err
	}
	seen := make(map[string]bool, len(v.Proxies))
	ro.Proxies = make([]xds.ProxyStatus, 0, len(waited))
	for _, p := range v.Proxies {
		if _, ok := waited[p.NodeID]; !ok {
			continue
		}
		seen[p.NodeID] = true
		waited[p.NodeID] = mesh.Node{Replica: p.Replica, Cluster: p.Cluster}
		if _, ok := targets[p.Cluster]; ok {
			ro.Proxies = append(ro.Proxies, proxyStatus(p, targets[p.Cluster], v.Where(p, targets[p.Cluster], rev)))
		}
	}
	for node, at := range waited {
		if seen[node] {
			continue
		}
		if _, live := v.Replicas[at.Replica]; live {
			delete(waited, node) // it disconnected from a live replica
			continue
		}
		if _, ok := targets[at.Cluster]; !ok {
			continue // not affected by the write
		}
		ro.Proxies = append(ro.Proxies, xds.ProxyStatus{Replica: at.Replica, NodeID: node, Cluster: at.Cluster,
			Target: targets[at.Cluster], State: xds.StatePending,
			Error: fmt.Sprintf("its replica %s is gone (lease expired); waiting for it to reconnect to another", at.Replica)})
	}
	xds.SortProxies(ro.Proxies)
	return ro, nil
}

// refreshAfter is how long a waited write waits for its replica's own
// push of the write before it pushes it itself.
const refreshAfter = time.Second

// fullReadEvery is how often a waited write reads every proxy even when
// the replicas' summaries say some are pending.
const fullReadEvery = time.Second

// maySettle reports whether every live replica's summary says its
// proxies of targets' clusters may stand settled with a write committed
// at revision rev (mesh.Replica.MaySettle).
func maySettle(replicas map[string]mesh.Replica, targets xds.Targets, rev int64) bool {
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
func (m meshRollouts) Status() *adminv1.Rollout {
	v, err := m.reg.View(context.Background())
	if err != nil {
		return &adminv1.Rollout{Result: "error", Error: err.Error()}
	}
	ro := xds.Rollout{Targets: xds.Targets{}, Proxies: make([]xds.ProxyStatus, 0, len(v.Proxies))}
	for _, p := range v.Proxies {
		cur := v.Current(p)
		if cur != "" {
			ro.Targets[p.Cluster] = cur
		}
		ro.Proxies = append(ro.Proxies, proxyStatus(p, cur, v.Where(p, cur, v.Replicas[p.Replica].Revision)))
	}
	out := rolloutProto(ro)
	out.Result = "status"
	out.Counts = stateCounts(ro)
	out.Replicas = replicaStatuses(v)
	return out
}

// replicaStatuses lists the live replicas of v, sorted by id.
func replicaStatuses(v mesh.View) []*adminv1.ReplicaStatus {
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

func proxyStatus(p mesh.Proxy, target string, st mesh.State) xds.ProxyStatus {
	return xds.ProxyStatus{
		Replica: p.Replica, NodeID: p.NodeID, Cluster: p.Cluster, Address: p.Address, Stream: p.Stream, API: p.API,
		Artifact: p.Artifact, Target: target, State: st, Acked: p.Acked, AckedAt: p.AckedAt,
		Rejected: p.Rejected, Error: p.Unserved, ConnectedAt: p.ConnectedAt,
	}
}

// replicaCollector exports a replica's view of the mesh at scrape time:
//
//	allot_replica_lease_alive                 gauge: 1 while the replica's lease is kept alive
//	allot_replica_revision_lag                gauge: store revision − revision the configuration is built from
//	allot_mesh_replicas                       gauge: live replicas
//	allot_mesh_proxies{replica}               gauge: proxies connected to each live replica
type replicaCollector struct {
	reg Registry
	b   *builder
	st  store.Store
}

var (
	leaseDesc    = prometheus.NewDesc("allot_replica_lease_alive", "1 while this replica's mesh registry lease is kept alive.", nil, nil)
	lagDesc      = prometheus.NewDesc("allot_replica_revision_lag", "Store revision minus the revision this replica's configuration is built from.", nil, nil)
	replicasDesc = prometheus.NewDesc("allot_mesh_replicas", "Live allotd replicas in the mesh registry.", nil, nil)
	proxiesDesc  = prometheus.NewDesc("allot_mesh_proxies", "Proxies connected to each live replica.", []string{"replica"}, nil)
)

func (c replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaseDesc
	ch <- lagDesc
	ch <- replicasDesc
	ch <- proxiesDesc
}

// Collect implements prometheus.Collector; what it cannot read now (the
// store or the registry unreachable) it leaves out.
func (c replicaCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, alive := c.reg.Lease()
	ch <- prometheus.MustNewConstMetric(leaseDesc, prometheus.GaugeValue, b2f(alive))
	if rev, err := c.st.Revision(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(max(rev-c.b.appliedRevision(), 0)))
	}
	v, err := c.reg.View(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(replicasDesc, prometheus.GaugeValue, float64(len(v.Replicas)))
	count := map[string]int{}
	for id := range v.Replicas {
		count[id] = 0
	}
	for _, p := range v.Proxies {
		count[p.Replica]++
	}
	for id, n := range count {
		ch <- prometheus.MustNewConstMetric(proxiesDesc, prometheus.GaugeValue, float64(n), id)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
