package admin

import (
	"context"
	"net/http"
	"strconv"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// Outcomes reads the outcomes the proxies report for observed experiments
// (allotd's outcomes.Aggregator, adapted by its wiring).
type Outcomes interface {
	// Outcomes returns key's outcomes with a window of the last minutes
	// minutes (0: the default); an *Error for a key that is no observed
	// experiment or a window out of bounds.
	Outcomes(ctx context.Context, key string, minutes int) (*adminv1.Outcomes, error)
}

// WithOutcomes serves GetOutcomes (GET /v1/experiments/{key}/outcomes)
// from o; without it the call answers UNAVAILABLE (503).
func WithOutcomes(o Outcomes) ServiceOption { return func(s *Service) { s.outcomes = o } }

// Outcomes returns key's outcomes per variation. Every token reads them.
func (s *Service) Outcomes(ctx context.Context, p *Principal, key string, minutes int) (*adminv1.Outcomes, error) {
	if !p.CanRead() {
		return nil, errorf(CodePermissionDenied, "reading needs a token")
	}
	if s.outcomes == nil {
		return nil, errorf(CodeUnavailable, "this server does not aggregate outcomes")
	}
	return s.outcomes.Outcomes(ctx, key, minutes)
}

// outcomes serves GET /v1/experiments/{key}/outcomes?minutes=N.
func (h *HTTP) outcomes(r *http.Request, p *Principal) (int, any, error) {
	minutes := 0
	if v := r.URL.Query().Get("minutes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, nil, &Error{Code: CodeInvalid, Message: "invalid minutes", Details: []string{"minutes: want a whole number of minutes"}}
		}
		minutes = n
	}
	o, err := h.svc.Outcomes(r.Context(), p, r.PathValue("key"), minutes)
	return http.StatusOK, o, err
}

// GetOutcomes implements adminv1grpc.AdminServiceServer.
func (g *GRPC) GetOutcomes(ctx context.Context, req *adminv1.GetOutcomesRequest) (*adminv1.Outcomes, error) {
	o, err := g.svc.Outcomes(ctx, principalFrom(ctx), req.GetKey(), int(req.GetMinutes()))
	if err != nil {
		return nil, toStatus(g.log, "GetOutcomes", err)
	}
	return o, nil
}
