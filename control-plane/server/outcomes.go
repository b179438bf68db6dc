package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/xds"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// serveOutcomes registers the outcomes sink (Envoy's metrics_service) on
// the xDS listener's gRPC server g, aggregating over db's observed
// experiments what the proxies x tracks as having applied their
// configuration send, and sharing it with the other replicas through
// shared (nil: one allotd).
func serveOutcomes(ctx context.Context, g *grpc.Server, db store.Store, x *xds.Server, reg prometheus.Registerer,
	shared outcomes.Shared, log *slog.Logger) (*outcomes.Aggregator, error) {
	c := &appliedProxies{x: x}
	opts := []outcomes.Option{outcomes.WithLogger(log)}
	if shared != nil {
		opts = append(opts, outcomes.WithShared(shared))
	}
	a, err := outcomes.New(ctx, db, admin.FromStore, c.applied, reg, opts...)
	if err != nil {
		return nil, err
	}
	outcomes.NewSink(a).Register(g)
	return a, nil
}

// appliedProxies answers whether a proxy applied its configuration from a
// set of the applied proxies rebuilt from the xDS server's tracking at
// most every appliedRefresh (and at once on a miss older than
// appliedMissRefresh), so that each proxy's flush does not copy every
// proxy's status: with 10,000 proxies flushing every 5 s that would be
// 20 million copies a second.
type appliedProxies struct {
	x  *xds.Server
	mu sync.Mutex
	at time.Time
	ok map[[2]string]bool // node id, cluster
}

const (
	appliedRefresh     = time.Second
	appliedMissRefresh = 100 * time.Millisecond
)

func (c *appliedProxies) applied(node, cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := [2]string{node, cluster}
	if age := time.Since(c.at); c.ok == nil || age > appliedRefresh || (!c.ok[key] && age > appliedMissRefresh) {
		ok := make(map[[2]string]bool, len(c.ok))
		for _, p := range c.x.AppendProxies(nil) {
			if p.State == xds.StateApplied {
				ok[[2]string{p.NodeID, p.Cluster}] = true
			}
		}
		c.ok, c.at = ok, time.Now()
	}
	return c.ok[key]
}

// outcomeReports serves the admin API's outcome reads from an Aggregator,
// with its errors as the admin API's.
type outcomeReports struct{ a *outcomes.Aggregator }

func (o outcomeReports) Outcomes(ctx context.Context, key string, minutes int) (*adminv1.Outcomes, error) {
	r, err := o.a.Report(ctx, key, minutes)
	switch {
	case errors.Is(err, outcomes.ErrNotObserved):
		return nil, &admin.Error{Code: admin.CodeNotFound, Message: err.Error()}
	case errors.Is(err, outcomes.ErrWindow):
		return nil, &admin.Error{Code: admin.CodeInvalid, Message: "invalid minutes", Details: []string{err.Error()}}
	}
	return r, err
}
