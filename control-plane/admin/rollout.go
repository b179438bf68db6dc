package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allotmesh/allot/control-plane/rollout"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// Rollouts lets writes wait until the proxies apply them, and reports where
// every proxy stands. allotd implements it with rollout.Local (its own
// proxies) or rollout.Mesh (every replica's); the admin package never
// imports xds. Without one, waiting is unavailable.
type Rollouts interface {
	// Mark returns the version each cluster's proxies should run before a
	// write, as this allotd knows them, with the store revision they are as
	// of (rollout.Mark); call it before the write.
	Mark() rollout.Mark
	// Wait pushes the current configuration and waits until every
	// connected proxy of a cluster whose version changed since mark has
	// applied or rejected it, or ctx ends; rev is the store revision the
	// write committed (0: unknown, Wait reads the store's).
	Wait(ctx context.Context, mark rollout.Mark, rev int64) *adminv1.Rollout
	// Status reports every connected proxy against its cluster's current
	// version.
	Status() *adminv1.Rollout
}

// MaxWait caps how long a write may wait for the proxies.
const MaxWait = 60 * time.Second

// Rollout metadata keys of a gRPC write that waited.
const (
	RolloutMetadata       = "allot-rollout"
	RolloutResultMetadata = "allot-rollout-result"
)

// WithRollouts lets writes wait for the proxies and serves rollout status.
func WithRollouts(r Rollouts) ServiceOption { return func(s *Service) { s.rollouts = r } }

// Await runs write and, when wait is positive, waits for the proxies whose
// configuration it changed, returning where they stand. write returns the
// store revision it committed (0 if it cannot tell). The write stands
// whatever the proxies do; only its own error is returned as an error.
func (s *Service) Await(ctx context.Context, wait time.Duration, write func() (int64, error)) (*adminv1.Rollout, error) {
	switch {
	case wait <= 0:
		_, err := write()
		return nil, err
	case wait > MaxWait:
		return nil, &Error{Code: CodeInvalid, Message: "invalid wait", Details: []string{"wait: at most " + MaxWait.String()}}
	case s.rollouts == nil:
		return nil, &Error{Code: CodeFailedPrecond, Message: "this server does not track proxies; write without wait"}
	}
	mark := s.rollouts.Mark()
	rev, err := write()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ro := s.rollouts.Wait(ctx, mark, rev)
	s.log.InfoContext(ctx, "write rollout", "result", ro.GetResult(), rollout.ResultApplied, ro.GetCounts()[string(rollout.StateApplied)], "not_applied", len(ro.GetProxies()))
	return ro, nil
}

// Rollout reports every connected proxy against its cluster's current
// version.
func (s *Service) Rollout(_ context.Context, p *Principal) (*adminv1.Rollout, error) {
	if !p.CanRead() {
		return nil, errorf(CodePermissionDenied, "reading needs a token")
	}
	if s.rollouts == nil {
		return &adminv1.Rollout{Result: rollout.ResultStatus}, nil
	}
	return s.rollouts.Status(), nil
}

// waitParam reads an HTTP write's ?wait= (a Go duration such as 10s, or
// seconds).
func waitParam(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, serr := strconv.ParseFloat(v, 64)
		if serr != nil || secs < 0 {
			return 0, &Error{Code: CodeInvalid, Message: "invalid wait", Details: []string{"wait: want a duration such as 10s"}}
		}
		d = time.Duration(secs * float64(time.Second))
	}
	return d, nil
}

// withRollout is an HTTP write's body: the result alone, or, when the write
// waited, {"experiment": result, "rollout": rollout}.
func withRollout(result proto.Message, ro *adminv1.Rollout) (any, error) {
	if ro == nil {
		return result, nil
	}
	// Rendered in one buffer.
	body := append(make([]byte, 0, 1024+rolloutBytesPerProxy*len(ro.GetProxies())), '{')
	field := func(name string, m proto.Message) (err error) {
		body, err = appendJSON(append(body, `"`+name+`":`...), m)
		return err
	}
	if result != nil {
		if err := field("experiment", result); err != nil {
			return nil, err
		}
		body = append(body, ',')
	}
	if err := field("rollout", ro); err != nil {
		return nil, err
	}
	return json.RawMessage(append(body, '}')), nil
}

// setRolloutHeader attaches a gRPC write's rollout as response metadata.
func setRolloutHeader(ctx context.Context, ro *adminv1.Rollout) {
	if ro == nil {
		return
	}
	b, err := protojson.Marshal(ro)
	if err != nil {
		return
	}
	grpc.SetHeader(ctx, metadata.Pairs(RolloutMetadata, string(b), RolloutResultMetadata, ro.GetResult()))
}

func waitOf(d *durationpb.Duration) time.Duration { return d.AsDuration() }
