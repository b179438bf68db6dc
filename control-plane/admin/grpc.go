package admin

import (
	"context"
	"log/slog"
	"path"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	"github.com/allotmesh/allot/proto/allot/admin/v1/adminv1grpc"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// GRPC serves the admin API as the gRPC service allot.admin.v1.AdminService.
// Register it on a grpc.Server created with its ServerOptions, which
// authenticate every call and bound request size.
type GRPC struct {
	adminv1grpc.UnimplementedAdminServiceServer
	svc     *Service
	tokens  *Tokens
	log     *slog.Logger
	metrics *Metrics
}

var _ adminv1grpc.AdminServiceServer = (*GRPC)(nil)

// NewGRPC returns the gRPC transport of svc, authenticating with tokens.
func NewGRPC(svc *Service, tokens *Tokens, opts ...Option) *GRPC {
	t := newTransport(opts)
	return &GRPC{svc: svc, tokens: tokens, log: t.log, metrics: t.metrics}
}

// Register registers the AdminService on s.
func (g *GRPC) Register(s grpc.ServiceRegistrar) { adminv1grpc.RegisterAdminServiceServer(s, g) }

// ServerOptions are the options the admin grpc.Server needs: the
// authenticating, measuring interceptor and MaxBodyBytes as the largest
// request message (larger ones are RESOURCE_EXHAUSTED).
func (g *GRPC) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(g.intercept),
		grpc.MaxRecvMsgSize(MaxBodyBytes),
	}
}

type principalKey struct{}

// principalFrom returns the caller the interceptor authenticated.
func principalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// intercept authenticates AdminService calls with the bearer token in the
// authorization metadata and records their latency. Other services on the
// same server (reflection) pass through unauthenticated.
func (g *GRPC) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !strings.HasPrefix(info.FullMethod, "/"+adminv1grpc.AdminService_ServiceDesc.ServiceName+"/") {
		return handler(ctx, req)
	}
	start := time.Now()
	method := path.Base(info.FullMethod)
	var resp any
	var err error
	defer func() { g.metrics.observe("grpc", method, status.Code(err).String(), time.Since(start)) }()
	var token string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			token = bearer(v[0])
		}
	}
	p := g.tokens.Authenticate(token)
	if p == nil {
		remote := ""
		if pr, ok := peer.FromContext(ctx); ok {
			remote = pr.Addr.String()
		}
		g.log.WarnContext(ctx, "admin request unauthenticated", "transport", "grpc", "method", method, "remote", remote)
		err = toStatus(g.log, method, errorf(CodeUnauthenticated, "missing or invalid bearer token in the authorization metadata"))
		return nil, err
	}
	resp, err = handler(context.WithValue(ctx, principalKey{}, p), req)
	return resp, err
}

// required reports a missing request field as invalid input.
func required(field string) error {
	return &Error{Code: CodeInvalid, Message: "invalid request", Details: []string{field + ": required"}}
}

// CreateExperiment implements adminv1grpc.AdminServiceServer.
func (g *GRPC) CreateExperiment(ctx context.Context, req *adminv1.CreateExperimentRequest) (*experimentv1.Experiment, error) {
	if req.GetExperiment() == nil {
		return nil, toStatus(g.log, "CreateExperiment", required("experiment"))
	}
	var e *experimentv1.Experiment
	ro, err := g.svc.Await(ctx, waitOf(req.GetWait()), func() (_ int64, err error) {
		e, err = g.svc.Create(ctx, principalFrom(ctx), req.GetExperiment())
		return e.GetRevision(), err
	})
	if err != nil {
		return nil, toStatus(g.log, "CreateExperiment", err)
	}
	setRolloutHeader(ctx, ro)
	return e, nil
}

// GetExperiment implements adminv1grpc.AdminServiceServer.
func (g *GRPC) GetExperiment(ctx context.Context, req *adminv1.GetExperimentRequest) (*experimentv1.Experiment, error) {
	e, err := g.svc.Get(ctx, principalFrom(ctx), req.GetKey())
	if err != nil {
		return nil, toStatus(g.log, "GetExperiment", err)
	}
	return e, nil
}

// ListExperiments implements adminv1grpc.AdminServiceServer.
func (g *GRPC) ListExperiments(ctx context.Context, req *adminv1.ListExperimentsRequest) (*adminv1.ListExperimentsResponse, error) {
	exps, rev, err := g.svc.List(ctx, principalFrom(ctx), Filter{Owner: req.GetOwner(), Status: req.GetStatus(), Service: req.GetService()})
	if err != nil {
		return nil, toStatus(g.log, "ListExperiments", err)
	}
	return &adminv1.ListExperimentsResponse{Experiments: exps, Revision: rev}, nil
}

// UpdateExperiment implements adminv1grpc.AdminServiceServer.
func (g *GRPC) UpdateExperiment(ctx context.Context, req *adminv1.UpdateExperimentRequest) (*experimentv1.Experiment, error) {
	if req.GetExperiment() == nil {
		return nil, toStatus(g.log, "UpdateExperiment", required("experiment"))
	}
	var e *experimentv1.Experiment
	ro, err := g.svc.Await(ctx, waitOf(req.GetWait()), func() (_ int64, err error) {
		e, err = g.svc.Update(ctx, principalFrom(ctx), req.GetExperiment())
		return e.GetRevision(), err
	})
	if err != nil {
		return nil, toStatus(g.log, "UpdateExperiment", err)
	}
	setRolloutHeader(ctx, ro)
	return e, nil
}

// DeleteExperiment implements adminv1grpc.AdminServiceServer.
func (g *GRPC) DeleteExperiment(ctx context.Context, req *adminv1.DeleteExperimentRequest) (*adminv1.DeleteExperimentResponse, error) {
	ro, err := g.svc.Await(ctx, waitOf(req.GetWait()), func() (int64, error) {
		return 0, g.svc.Delete(ctx, principalFrom(ctx), req.GetKey(), req.GetRevision()) // the revision of a delete is not returned: Wait reads it
	})
	if err != nil {
		return nil, toStatus(g.log, "DeleteExperiment", err)
	}
	setRolloutHeader(ctx, ro)
	return &adminv1.DeleteExperimentResponse{}, nil
}

// StartExperiment implements adminv1grpc.AdminServiceServer.
func (g *GRPC) StartExperiment(ctx context.Context, req *adminv1.StartExperimentRequest) (*experimentv1.Experiment, error) {
	var e *experimentv1.Experiment
	ro, err := g.svc.Await(ctx, waitOf(req.GetWait()), func() (_ int64, err error) {
		start := g.svc.Start
		if req.GetAcknowledgeRollback() {
			start = g.svc.StartAcknowledgingRollback
		}
		e, err = start(ctx, principalFrom(ctx), req.GetKey(), req.GetRevision())
		return e.GetRevision(), err
	})
	if err != nil {
		return nil, toStatus(g.log, "StartExperiment", err)
	}
	setRolloutHeader(ctx, ro)
	return e, nil
}

// PauseExperiment implements adminv1grpc.AdminServiceServer.
func (g *GRPC) PauseExperiment(ctx context.Context, req *adminv1.PauseExperimentRequest) (*experimentv1.Experiment, error) {
	var e *experimentv1.Experiment
	ro, err := g.svc.Await(ctx, waitOf(req.GetWait()), func() (_ int64, err error) {
		e, err = g.svc.Pause(ctx, principalFrom(ctx), req.GetKey(), req.GetRevision())
		return e.GetRevision(), err
	})
	if err != nil {
		return nil, toStatus(g.log, "PauseExperiment", err)
	}
	setRolloutHeader(ctx, ro)
	return e, nil
}

// StopExperiment implements adminv1grpc.AdminServiceServer.
func (g *GRPC) StopExperiment(ctx context.Context, req *adminv1.StopExperimentRequest) (*experimentv1.Experiment, error) {
	var e *experimentv1.Experiment
	ro, err := g.svc.Await(ctx, waitOf(req.GetWait()), func() (_ int64, err error) {
		e, err = g.svc.Stop(ctx, principalFrom(ctx), req.GetKey(), req.GetRevision())
		return e.GetRevision(), err
	})
	if err != nil {
		return nil, toStatus(g.log, "StopExperiment", err)
	}
	setRolloutHeader(ctx, ro)
	return e, nil
}

// EvaluateExperiments implements adminv1grpc.AdminServiceServer.
func (g *GRPC) EvaluateExperiments(ctx context.Context, req *adminv1.EvaluateExperimentsRequest) (*adminv1.EvaluateExperimentsResponse, error) {
	resp, err := g.svc.Evaluate(ctx, principalFrom(ctx), req.GetService(), req.GetAttributes().AsMap(), timeOf(req.GetTime()))
	if err != nil {
		return nil, toStatus(g.log, "EvaluateExperiments", err)
	}
	return resp, nil
}

// GetRollout implements adminv1grpc.AdminServiceServer.
func (g *GRPC) GetRollout(ctx context.Context, _ *adminv1.GetRolloutRequest) (*adminv1.Rollout, error) {
	ro, err := g.svc.Rollout(ctx, principalFrom(ctx))
	if err != nil {
		return nil, toStatus(g.log, "GetRollout", err)
	}
	return ro, nil
}

// GetHistory implements adminv1grpc.AdminServiceServer.
func (g *GRPC) GetHistory(ctx context.Context, req *adminv1.GetHistoryRequest) (*adminv1.GetHistoryResponse, error) {
	changes, err := g.svc.History(ctx, principalFrom(ctx), req.GetKey())
	if err != nil {
		return nil, toStatus(g.log, "GetHistory", err)
	}
	return &adminv1.GetHistoryResponse{Changes: changes}, nil
}

// WhoAmI implements adminv1grpc.AdminServiceServer.
func (g *GRPC) WhoAmI(ctx context.Context, _ *adminv1.WhoAmIRequest) (*adminv1.Caller, error) {
	c, err := g.svc.WhoAmI(ctx, principalFrom(ctx))
	if err != nil {
		return nil, toStatus(g.log, "WhoAmI", err)
	}
	return c, nil
}
