package reconcile

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/xds"
)

// Registry is the mesh registry of a replicated allotd (control-plane/rollout/etcd's).
type Registry interface {
	rollout.Registry
	// Withdraw removes this replica's records at once (graceful shutdown).
	Withdraw(ctx context.Context) error
	// Lease reports the replica's lease and whether it is kept alive.
	Lease() (id int64, alive bool)
}

// republishEvery is how often a replica checks its lease while nothing
// changes: one lost is granted again by a publish, and the records return
// without waiting for a change (with the lease held and nothing changed,
// nothing is published).
const republishEvery = time.Second

// After a change, while some of its proxies have not yet applied (or
// rejected) their cluster's version, a replica holds its publish for up to
// progressEvery: each publish reads and summarizes every proxy, and the
// ACKs of a rollout to thousands of proxies would otherwise make one
// publish after another. The moment none is pending it publishes at once
// (xds.Server.Recount wakes it when the count may have reached zero, a few
// times a rollout rather than at every push and ACK), so a waited write
// learns it without delay. A record that said the replica settled, built
// from revision R, stays true of every write up to R through a new
// version (its proxies applied R, and keep it until they apply more) and
// through disconnects, so it is held too; but a proxy that joins (a new
// stream: one connecting, or moving here from another replica) did not
// apply anything here, and the record is taken back at once
// (xds.Server.Joins). A write thus costs each replica one publish.
const progressEvery = time.Second

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

// NewPublishFailures is the counter of failed publishes (each is retried).
func NewPublishFailures() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "allot_replica_publish_failures_total",
		Help: "Publishes of this replica's records to the mesh registry that failed; each is retried with backoff.",
	})
}

// Publish publishes this replica's state and its proxies' to reg after
// every change, and again after a failure (counted in failed) with backoff,
// until ctx ends; then it withdraws them.
func Publish(ctx context.Context, reg Registry, x *xds.Server, b *Builder, self rollout.Replica, failed prometheus.Counter, log *slog.Logger) {
	tick := time.NewTicker(republishEvery)
	defer tick.Stop()
	failures := 0                     // in a row
	var proxies []rollout.ProxyStatus // reused: a rollout publishes thousands, several times
	var mp []rollout.Proxy
	for {
		changed := x.Changes()
		joins := x.Joins() // before the proxies are read: a join after, or during, is seen
		r := self
		r.Revision = b.AppliedRevision()
		proxies = x.AppendProxies(proxies[:0])
		r.Targets = x.Targets()
		for _, p := range proxies {
			if _, ok := r.Targets[p.Cluster]; !ok {
				r.Targets[p.Cluster] = "" // its first build is under way
			}
		}
		r.Settle(proxies)
		mp = rollout.AppendRecords(mp[:0], proxies)
		r.Proxies = rollout.Summarize(mp)
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
		applied, ticks := b.Applied(), tick.C
		var retry *time.Timer
		var retried <-chan time.Time
		if failures > 0 {
			retry = time.NewTimer(publishRetry(failures))
			retried, changed, applied, ticks = retry.C, nil, nil, nil
		}
		for idle := true; idle; {
			select {
			case <-ctx.Done():
				withdraw(ctx, reg, log)
				return
			case <-changed:
				idle = false
			case <-applied:
				idle = false
			case <-ticks:
				// The republish renews a lost lease; with the lease held
				// and nothing changed it would write nothing, after
				// reading every proxy.
				_, alive := reg.Lease()
				idle = alive && r.Revision == b.AppliedRevision() && !isClosed(changed)
			case <-retried:
				idle = false
			}
		}
		if retry != nil {
			retry.Stop()
		}
		// A record that says the replica settled is corrected at once when
		// a proxy joined: a waited write would take the newcomer for
		// applied.
		settled := err == nil && r.Settled
		joined := func() bool { return settled && x.Joins() != joins }
		if retried == nil && !joined() && !pace(ctx, x, time.Now(), joined) {
			withdraw(ctx, reg, log)
			return
		}
	}
}

// isClosed reports whether ch is closed (it is only ever closed).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// withdraw removes this replica's records (ctx ended).
func withdraw(ctx context.Context, reg Registry, log *slog.Logger) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := reg.Withdraw(wctx); err != nil {
		log.Warn("withdraw from the mesh registry", "error", err)
	}
}

// pace returns once this replica's proxies are all settled (none pending),
// or joined reports true, or progressEvery after from, whichever comes
// first; false if ctx ended first.
func pace(ctx context.Context, x *xds.Server, from time.Time, joined func() bool) bool {
	for {
		recount := x.Recount() // before the count: a change after it wakes the wait below
		wait := time.Until(from.Add(progressEvery))
		if wait <= 0 || x.Unsettled() == 0 || joined() {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-recount:
			t.Stop()
		case <-t.C:
		}
	}
}

// NewReplicaCollector exports, at scrape time, the view of the mesh of the
// replica publishing to reg with b over st (replicaCollector).
func NewReplicaCollector(reg Registry, b *Builder, st store.Store) prometheus.Collector {
	return replicaCollector{reg: reg, b: b, st: st}
}

// replicaCollector exports a replica's view of the mesh at scrape time:
//
//	allot_replica_lease_alive                 gauge: 1 while the replica's lease is kept alive
//	allot_replica_revision_lag                gauge: store revision − revision the configuration is built from
//	allot_mesh_replicas                       gauge: live replicas
//	allot_mesh_proxies{replica}               gauge: proxies connected to each live replica
type replicaCollector struct {
	reg Registry
	b   *Builder
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
		ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(max(rev-c.b.AppliedRevision(), 0)))
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
