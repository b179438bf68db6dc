package server

import (
	"context"
	"errors"
	"log/slog"

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
// configuration send.
func serveOutcomes(g *grpc.Server, db store.Store, x *xds.Server, reg prometheus.Registerer, log *slog.Logger) (*outcomes.Aggregator, error) {
	applied := func(node, cluster string) bool {
		for _, p := range x.AppendProxies(nil) {
			if p.NodeID == node && p.Cluster == cluster && p.State == xds.StateApplied {
				return true
			}
		}
		return false
	}
	a, err := outcomes.New(db, admin.FromStore, applied, reg, outcomes.WithLogger(log))
	if err != nil {
		return nil, err
	}
	outcomes.NewSink(a).Register(g)
	return a, nil
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
