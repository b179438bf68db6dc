package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/xds"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// serveOutcomes registers the outcomes sink (Envoy's OpenTelemetry stat
// sink) on the xDS listener's gRPC server g, aggregating over db's observed
// experiments (read through lists) what the proxies x identifies by their
// connections send, and sharing it with the other replicas through shared
// (nil: one allotd).
func serveOutcomes(ctx context.Context, g *grpc.Server, db store.Store, lists *store.Lists, x *xds.Server, reg prometheus.Registerer,
	shared outcomes.Shared, log *slog.Logger) (*outcomes.Aggregator, error) {
	opts := []outcomes.Option{outcomes.WithLogger(log), outcomes.WithLists(lists)}
	if shared != nil {
		opts = append(opts, outcomes.WithShared(shared))
	}
	a, err := outcomes.New(ctx, db, experiment.FromStore, reg, opts...)
	if err != nil {
		return nil, err
	}
	outcomes.NewSink(a, func(addr string) (string, string, bool) {
		p, ok := x.ConnProxy(addr)
		return p.NodeID, p.Cluster, ok
	}).Register(g)
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
