package server

import (
	"context"
	"errors"
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

// publishLoop publishes this replica's state and its proxies' to reg after
// every change, until ctx ends; then it withdraws them.
func publishLoop(ctx context.Context, reg Registry, x *xds.Server, b *builder, self mesh.Replica, log *slog.Logger) {
	tick := time.NewTicker(republishEvery)
	defer tick.Stop()
	failing := false
	for {
		changed := x.Changes()
		r := self
		r.Revision = b.appliedRevision()
		r.Targets = x.Targets()
		err := reg.Publish(ctx, r, meshProxies(x.Proxies()))
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			log.Warn("publish to the mesh registry", "error", err)
			failing = true
		case err == nil && failing:
			log.Info("publishing to the mesh registry again")
			failing = false
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
		case <-b.applied():
		case <-tick.C:
		}
	}
}

func meshProxies(ps []xds.ProxyStatus) []mesh.Proxy {
	out := make([]mesh.Proxy, len(ps))
	for i, p := range ps {
		out[i] = mesh.Proxy{
			NodeID: p.NodeID, Cluster: p.Cluster, Address: p.Address, Stream: p.Stream, API: p.API,
			Artifact: p.Artifact, Acked: p.Acked, AckedAt: p.AckedAt, Rejected: p.Rejected,
			Unserved: p.Error, ConnectedAt: p.ConnectedAt,
		}
	}
	return out
}

// meshRollouts implements admin.Rollouts for a replica: the proxies of
// every replica, read from the registry.
type meshRollouts struct {
	x   *xds.Server
	reg Registry
	b   *builder
	st  store.Store
}

// clusters are the clusters of this replica's and the whole mesh's proxies.
func (m meshRollouts) clusters(ctx context.Context) []string {
	set := maps.Clone(m.x.Targets())
	if v, err := m.reg.View(ctx); err == nil {
		for _, p := range v.Proxies {
			set[p.Cluster] = ""
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// targets are the versions this replica computes for clusters now; every
// replica computes the same from the same store state.
func (m meshRollouts) targets(clusters []string) (xds.Targets, error) {
	return m.b.versions(clusters)
}

// Mark is the versions before a write; if they cannot be computed, every
// cluster counts as changed by it (nil).
func (m meshRollouts) Mark() map[string]string {
	t, _ := m.targets(m.clusters(context.Background()))
	return t
}

// Wait waits until every proxy of the mesh whose cluster's version the
// write changed has acknowledged a version containing it (its target, or
// what its replica serves after catching up with the write), or rejected
// it, or until ctx ends. Proxies that leave the live set (disconnected,
// or their replica's lease expired) drop out; a proxy that reconnected to
// another replica is still waited for, there.
func (m meshRollouts) Wait(ctx context.Context, mark map[string]string) *adminv1.Rollout {
	rev, err := m.st.Revision(ctx)
	if err != nil {
		return &adminv1.Rollout{Result: "error", Error: err.Error()}
	}
	if err := m.x.Refresh(ctx); err != nil {
		return &adminv1.Rollout{Result: "error", Error: err.Error()}
	}
	changes := m.reg.Watch(ctx)
	clusters := m.clusters(ctx)
	for c := range mark {
		clusters = append(clusters, c)
	}
	slices.Sort(clusters)
	after, err := m.targets(slices.Compact(clusters))
	if err != nil {
		return &adminv1.Rollout{Result: "error", Error: err.Error()}
	}
	targets := after.Changed(mark)
	var waited map[string]bool // node ids, from the first view
	for {
		v, err := m.reg.View(ctx)
		if err != nil && ctx.Err() == nil {
			return &adminv1.Rollout{Result: "error", Error: err.Error()}
		}
		if waited == nil && err == nil {
			waited = map[string]bool{}
			for _, p := range v.Proxies {
				if _, ok := targets[p.Cluster]; ok {
					waited[p.NodeID] = true
				}
			}
		}
		ro := xds.Rollout{Targets: targets, Proxies: []xds.ProxyStatus{}}
		for _, p := range v.Proxies {
			if waited[p.NodeID] {
				ro.Proxies = append(ro.Proxies, proxyStatus(p, targets[p.Cluster], v.Where(p, targets[p.Cluster], rev)))
			}
		}
		if ro.Count(xds.StatePending) == 0 && err == nil {
			return rolloutResult(ro, ro.Err())
		}
		select {
		case <-ctx.Done():
			return rolloutResult(ro, errors.Join(ctx.Err(), ro.Err()))
		case _, ok := <-changes:
			if !ok {
				return rolloutResult(ro, errors.Join(context.Cause(ctx), ro.Err()))
			}
		}
	}
}

// Status reports every proxy of the mesh against the version its replica
// serves its cluster.
func (m meshRollouts) Status() *adminv1.Rollout {
	v, err := m.reg.View(context.Background())
	if err != nil {
		return &adminv1.Rollout{Result: "error", Error: err.Error()}
	}
	ro := xds.Rollout{Targets: xds.Targets{}, Proxies: []xds.ProxyStatus{}}
	for _, p := range v.Proxies {
		cur := v.Current(p)
		if cur != "" {
			ro.Targets[p.Cluster] = cur
		}
		ro.Proxies = append(ro.Proxies, proxyStatus(p, cur, v.Where(p, cur, v.Replicas[p.Replica].Revision)))
	}
	out := rolloutProto(ro)
	out.Result = "status"
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
