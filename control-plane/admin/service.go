// Package admin is the control plane's admin API for experiment owners. Its
// transport-agnostic Service creates, reads, lists, updates and deletes
// experiments, moves them through their lifecycle (the transitions package
// experiment allows), previews assignments and reads the audit history;
// every write is checked by translate.Validate (the filter's own decoder
// and engine plus the control plane's own rules) and against the bounds of
// the services it runs on, and authorized per owner namespace. Two
// transports serve it: gRPC (allot.admin.v1.AdminService, grpc.go) and
// HTTP/JSON (http.go), both authenticating bearer tokens (auth.go). It is
// the only place where errors become transport status codes (errors.go:
// HTTPStatus and toStatus).
//
// It reads the store through store.Store and uses the pure experiment and
// translate packages to build exactly the configuration proxies receive;
// it must not import xds or server.
package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/engine"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Service implements the admin operations over a store, independent of the
// transport. Every method takes the authenticated caller. Each write makes
// its store calls, the reads it is decided on and the write itself, under
// one store.WithWrite, so that a store with a request timeout (etcd,
// allotd -store-timeout) answers the whole write within it.
type Service struct {
	store    store.Store
	log      *slog.Logger
	mesh     translate.Mesh
	now      func() time.Time
	rollouts Rollouts
	outcomes Outcomes
	lists    *store.Lists // the experiments as last read, shared with the builder; nil: none
}

// ServiceOption configures a Service.
type ServiceOption func(*Service)

// WithMesh sets the mesh settings EvaluateExperiments builds proxy
// configurations with (the same allotd pushes).
func WithMesh(m translate.Mesh) ServiceOption { return func(s *Service) { s.mesh = m } }

// WithLists shares the experiments as the builder of the proxies'
// configuration last read them (reconcile.NewBuilder's lists): a write's
// check of its services starts from them rather than from a read of every
// experiment (checkServices).
func WithLists(l *store.Lists) ServiceOption { return func(s *Service) { s.lists = l } }

// WithClock sets the clock schedules are evaluated with (default time.Now).
func WithClock(now func() time.Time) ServiceOption { return func(s *Service) { s.now = now } }

// NewService returns a Service over st; log may be nil.
func NewService(st store.Store, log *slog.Logger, opts ...ServiceOption) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{store: st, log: log, now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}

// spec is the stored form of a definition: its proto3 JSON without output-only
// metadata.
func spec(e *experimentv1.Experiment) ([]byte, error) {
	return protojson.Marshal(experiment.Spec(e))
}

// defaultOwner fills an empty owner with the caller's only namespace.
func defaultOwner(p *Principal, e *experimentv1.Experiment) {
	if e.Owner == "" && p.Role == RoleOwner && len(p.Namespaces) == 1 {
		e.Owner = p.Namespaces[0]
	}
}

func (s *Service) deny(ctx context.Context, p *Principal, op, key, owner string) error {
	name := ""
	if p != nil {
		name = p.Name
	}
	s.log.WarnContext(ctx, "admin write denied", "principal", name, "op", op, "key", key, "owner", owner)
	return errorf(CodePermissionDenied, "%s may not %s experiments of owner %q", name, op, owner)
}

// Create validates and stores a new experiment.
func (s *Service) Create(ctx context.Context, p *Principal, e *experimentv1.Experiment) (*experimentv1.Experiment, error) {
	ctx = store.WithWrite(ctx)
	defaultOwner(p, e)
	if !p.CanWrite(e.Owner) {
		return nil, s.deny(ctx, p, "create", e.Key, e.Owner)
	}
	experiment.ClearState(e)
	experiment.FillRampCoverage(e)
	if err := translate.Validate(e, s.mesh); err != nil {
		return nil, err
	}
	experiment.NextAssignment(e, nil)
	b, err := spec(e)
	if err != nil {
		return nil, err
	}
	se, err := retryStale(ctx, func(ctx context.Context) (*store.Experiment, error) {
		wctx, err := s.checkServices(ctx, e, 0)
		if err != nil {
			return nil, err
		}
		return s.store.Create(wctx, &store.Experiment{Key: e.Key, Owner: e.Owner, Spec: b}, p.Name)
	})
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "experiment created", "key", e.Key, "principal", p.Name, "revision", se.Revision)
	return experiment.FromStore(se)
}

// WhoAmI returns the caller as its token authenticates it, so a client
// can tell what it may change before trying (CanWrite decides the same).
func (s *Service) WhoAmI(_ context.Context, p *Principal) (*adminv1.Caller, error) {
	if p == nil {
		return nil, errorf(CodeUnauthenticated, "missing or invalid bearer token")
	}
	return &adminv1.Caller{Name: p.Name, Role: string(p.Role), Namespaces: slices.Clone(p.Namespaces)}, nil
}

// Get returns one experiment.
func (s *Service) Get(ctx context.Context, p *Principal, key string) (*experimentv1.Experiment, error) {
	if !p.CanRead() {
		return nil, errorf(CodePermissionDenied, "reading needs a token")
	}
	se, err := s.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return experiment.FromStore(se)
}

// Filter selects experiments in List; empty fields do not filter.
type Filter struct {
	// Owner keeps experiments of this owner namespace.
	Owner string
	// Status keeps experiments with this status (empty stored status counts
	// as running).
	Status string
	// Service keeps experiments that apply to proxies of this cluster.
	Service string
}

// List returns the experiments matching f, sorted by key, and the store
// revision.
func (s *Service) List(ctx context.Context, p *Principal, f Filter) ([]*experimentv1.Experiment, int64, error) {
	if !p.CanRead() {
		return nil, 0, errorf(CodePermissionDenied, "reading needs a token")
	}
	if f.Status != "" && !experiment.KnownStatus(f.Status) {
		return nil, 0, &Error{Code: CodeInvalid, Message: "invalid filter", Details: []string{"status: " + strconv.Quote(f.Status) + ", want draft, running, paused or stopped"}}
	}
	return s.list(ctx, f)
}

// Running returns every running experiment, sorted by key, read with
// allotd's own authority rather than a caller's: control-plane/guardian
// checks them.
func (s *Service) Running(ctx context.Context) ([]*experimentv1.Experiment, error) {
	list, _, err := s.list(ctx, Filter{Status: experiment.StatusRunning})
	return list, err
}

// list returns the experiments matching f, sorted by key, and the store
// revision, for a caller already authorised.
func (s *Service) list(ctx context.Context, f Filter) ([]*experimentv1.Experiment, int64, error) {
	items, rev, err := s.store.List(ctx)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*experimentv1.Experiment, 0, len(items))
	for _, se := range items {
		e, err := experiment.FromStore(se)
		if err != nil {
			return nil, 0, fmt.Errorf("stored experiment %q: %w", se.Key, err)
		}
		switch {
		case f.Owner != "" && e.Owner != f.Owner,
			f.Status != "" && experiment.Status(e) != f.Status,
			f.Service != "" && !experiment.AppliesTo(e, f.Service):
			continue
		}
		out = append(out, e)
	}
	return out, rev, nil
}

// Update replaces an experiment. e.Revision must equal the stored revision
// (optimistic concurrency: a stale one is CodeConflict and nothing
// changes); the owner of both the stored and the new definition must be
// writable by p, and a status change must be an allowed transition. The
// write is a compare-and-swap on the revision the owner was checked on, so
// a concurrent change (an owner transfer) makes it a conflict.
func (s *Service) Update(ctx context.Context, p *Principal, e *experimentv1.Experiment) (*experimentv1.Experiment, error) {
	ctx = store.WithWrite(ctx)
	return retryStale(ctx, func(ctx context.Context) (*experimentv1.Experiment, error) { return s.update(ctx, p, e) })
}

func (s *Service) update(ctx context.Context, p *Principal, e *experimentv1.Experiment) (*experimentv1.Experiment, error) {
	if e.Revision <= 0 {
		return nil, &Error{Code: CodeInvalid, Message: "invalid experiment", Details: []string{"revision: required: send the revision you read (optimistic concurrency)"}}
	}
	cur, err := s.store.Get(ctx, e.Key)
	if err != nil {
		return nil, err
	}
	if e.Revision != cur.Revision {
		return nil, fmt.Errorf("update %q at revision %d, current %d: %w", e.Key, e.Revision, cur.Revision, store.ErrConflict)
	}
	if !p.CanWrite(cur.Owner) {
		return nil, s.deny(ctx, p, "update", e.Key, cur.Owner)
	}
	if e.Owner == "" {
		e.Owner = cur.Owner
	}
	if !p.CanWrite(e.Owner) {
		return nil, s.deny(ctx, p, "update", e.Key, e.Owner)
	}
	old, err := experiment.FromStore(cur)
	if err != nil {
		return nil, fmt.Errorf("stored experiment %q: %w", cur.Key, err)
	}
	experiment.CopyState(e, old)
	experiment.FillRampCoverage(e)
	if err := translate.Validate(e, s.mesh); err != nil {
		return nil, err
	}
	from, to := experiment.Status(old), experiment.Status(e)
	if from != to && !experiment.Allowed(from, to) {
		return nil, errorf(CodeFailedPrecond, "status %s → %s is not allowed (%s)", from, to, experiment.TransitionsHelp)
	}
	if from != to && to == experiment.StatusRunning && experiment.RollbackPending(old) {
		return nil, rollbackPending(old)
	}
	wctx, err := s.checkServices(ctx, e, cur.Revision)
	if err != nil {
		return nil, err
	}
	experiment.NextAssignment(e, old)
	b, err := spec(e)
	if err != nil {
		return nil, err
	}
	se, err := s.store.Update(wctx, &store.Experiment{Key: e.Key, Owner: e.Owner, Spec: b}, cur.Revision, p.Name)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "experiment updated", "key", e.Key, "principal", p.Name, "revision", se.Revision)
	return experiment.FromStore(se)
}

// Delete removes an experiment; a non-zero revision must match. The delete
// is a compare-and-swap on the revision the owner was checked on, so a
// concurrent change (an owner transfer) makes it a conflict.
func (s *Service) Delete(ctx context.Context, p *Principal, key string, revision int64) error {
	ctx = store.WithWrite(ctx)
	cur, err := s.store.Get(ctx, key)
	if err != nil {
		return err
	}
	if revision != 0 && revision != cur.Revision {
		return fmt.Errorf("delete %q at revision %d, current %d: %w", key, revision, cur.Revision, store.ErrConflict)
	}
	if !p.CanWrite(cur.Owner) {
		return s.deny(ctx, p, "delete", key, cur.Owner)
	}
	if err := s.store.Delete(ctx, key, cur.Revision, p.Name); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "experiment deleted", "key", key, "principal", p.Name)
	return nil
}

// Start sets a draft or paused experiment running. An experiment rolled
// back by a guardrail whose rollback is not acknowledged is
// CodeFailedPrecond: StartAcknowledgingRollback starts it.
func (s *Service) Start(ctx context.Context, p *Principal, key string, revision int64) (*experimentv1.Experiment, error) {
	return s.transition(ctx, p, "start", key, revision, experiment.StatusRunning, false)
}

// StartAcknowledgingRollback acknowledges the rollback of an experiment
// (rollback.acknowledgedBy and acknowledgeTime: p and now, in the same
// write) and sets it running, as Start does otherwise.
func (s *Service) StartAcknowledgingRollback(ctx context.Context, p *Principal, key string, revision int64) (*experimentv1.Experiment, error) {
	return s.transition(ctx, p, "start", key, revision, experiment.StatusRunning, true)
}

// rollbackPending is the error of a start of e while its rollback is not
// acknowledged.
func rollbackPending(e *experimentv1.Experiment) error {
	rb := e.GetRollback()
	return errorf(CodeFailedPrecond, "experiment %q was rolled back by guardrails[%d] (%s, variation %d against %d) at %s and nobody acknowledged it: "+
		"start it with acknowledgeRollback (allotctl start --acknowledge-rollback) to acknowledge and restart",
		e.GetKey(), rb.GetGuardrail(), rb.GetMetric(), rb.GetVariation(), rb.GetControl(), rb.GetTime().AsTime().Format(time.RFC3339))
}

// Pause pauses a running experiment.
func (s *Service) Pause(ctx context.Context, p *Principal, key string, revision int64) (*experimentv1.Experiment, error) {
	return s.transition(ctx, p, "pause", key, revision, experiment.StatusPaused, false)
}

// Stop ends a draft, running or paused experiment for good.
func (s *Service) Stop(ctx context.Context, p *Principal, key string, revision int64) (*experimentv1.Experiment, error) {
	return s.transition(ctx, p, "stop", key, revision, experiment.StatusStopped, false)
}

// transition moves an experiment to status to. A non-zero revision must
// match; an experiment already in status to is returned unchanged (no write).
// The write is a compare-and-swap on the revision the owner was checked on.
// Only a start checks the bounds of the services (checkServices): a pause
// or a stop never adds to them, and the document bound counts the longest
// status, so the emergency brake cannot be refused for size. With ack, a
// pending rollback is acknowledged in the same write.
func (s *Service) transition(ctx context.Context, p *Principal, op, key string, revision int64, to string, ack bool) (*experimentv1.Experiment, error) {
	ctx = store.WithWrite(ctx)
	return retryStale(ctx, func(ctx context.Context) (*experimentv1.Experiment, error) {
		return s.transitionOnce(ctx, p, op, key, revision, to, ack)
	})
}

func (s *Service) transitionOnce(ctx context.Context, p *Principal, op, key string, revision int64, to string, ack bool) (*experimentv1.Experiment, error) {
	cur, err := s.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if !p.CanWrite(cur.Owner) {
		return nil, s.deny(ctx, p, op, key, cur.Owner)
	}
	if revision != 0 && revision != cur.Revision {
		return nil, fmt.Errorf("%s %q at revision %d, current %d: %w", op, key, revision, cur.Revision, store.ErrConflict)
	}
	e, err := experiment.FromStore(cur)
	if err != nil {
		return nil, fmt.Errorf("stored experiment %q: %w", key, err)
	}
	from := experiment.Status(e)
	if from == to {
		return e, nil
	}
	if !experiment.Allowed(from, to) {
		return nil, errorf(CodeFailedPrecond, "cannot %s a %s experiment (%s)", op, from, experiment.TransitionsHelp)
	}
	old := proto.Clone(e).(*experimentv1.Experiment)
	if to == experiment.StatusRunning && experiment.RollbackPending(e) {
		if !ack {
			return nil, rollbackPending(e)
		}
		if err := experiment.Acknowledge(e, p.Name, s.now()); err != nil {
			return nil, err // ParseTokens admits no such name
		}
	}
	e.Status = to
	if to == experiment.StatusRunning && e.GetRampState() != nil {
		// The ramp's current step is held from the start again: time not
		// running never counts towards a step's minHold.
		e.RampState.StepStartTime = timestamppb.New(s.now())
	}
	wctx, err := s.checkServices(ctx, e, cur.Revision)
	if err != nil {
		return nil, err
	}
	experiment.NextAssignment(e, old)
	b, err := spec(e)
	if err != nil {
		return nil, err
	}
	se, err := s.store.Update(wctx, &store.Experiment{Key: key, Owner: cur.Owner, Spec: b}, cur.Revision, p.Name)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "experiment status changed", "key", key, "principal", p.Name, "from", from, "to", to, "revision", se.Revision)
	return experiment.FromStore(se)
}

// WriteState is how allotd writes what it keeps in an experiment
// (control-plane/guardian: a rollback, a ramp step): set changes a copy of
// the experiment stored at revision (0: whatever is stored), which is
// written with a compare-and-swap on that revision, as actor. It is never
// retried on a conflict: a write since revision makes it store.ErrConflict
// (read again and decide again), so that of several replicas deciding the
// same write on the same revision, exactly one makes it. set may change rampState,
// rollback, coverage (a ramp step) and the status to any the lifecycle
// allows but running (a rollback pauses or stops; only an owner's start
// runs it again); anything else is refused. A write that changes coverage
// must pass translate.Validate as an owner's write does (its coverage is
// the ramp step's); one that does not (a rollback) is never refused for
// validation, like a pause.
func (s *Service) WriteState(ctx context.Context, key string, revision int64, actor string, set func(e *experimentv1.Experiment)) (*experimentv1.Experiment, error) {
	ctx = store.WithWrite(ctx)
	return retryStale(ctx, func(ctx context.Context) (*experimentv1.Experiment, error) {
		cur, err := s.store.Get(ctx, key)
		if err != nil {
			return nil, err
		}
		if revision != 0 && cur.Revision != revision {
			return nil, fmt.Errorf("write state of %q at revision %d, current %d: %w", key, revision, cur.Revision, store.ErrConflict)
		}
		old, err := experiment.FromStore(cur)
		if err != nil {
			return nil, fmt.Errorf("stored experiment %q: %w", key, err)
		}
		e := proto.Clone(old).(*experimentv1.Experiment)
		set(e)
		if !sameButState(old, e) {
			return nil, fmt.Errorf("write state of %q: changes more than rampState, rollback, coverage and status", key)
		}
		from, to := experiment.Status(old), experiment.Status(e)
		if from != to && (to == experiment.StatusRunning || !experiment.Allowed(from, to)) {
			return nil, fmt.Errorf("write state of %q: status %s → %s (allotd may pause or stop, never start)", key, from, to)
		}
		if (e.Coverage == nil) != (old.Coverage == nil) || e.GetCoverage() != old.GetCoverage() {
			if err := translate.Validate(e, s.mesh); err != nil { // a ramp step adds exposure
				return nil, fmt.Errorf("write state of %q: %w", key, err)
			}
		}
		experiment.NextAssignment(e, old)
		b, err := spec(e)
		if err != nil {
			return nil, err
		}
		se, err := s.store.Update(ctx, &store.Experiment{Key: key, Owner: cur.Owner, Spec: b}, cur.Revision, actor)
		if err != nil {
			return nil, err
		}
		s.log.InfoContext(ctx, "experiment state written", "key", key, "principal", actor, "from", from, "to", to, "revision", se.Revision)
		return experiment.FromStore(se)
	})
}

// sameButState reports whether a and b differ at most in what WriteState
// may change: rampState, rollback, coverage and status.
func sameButState(a, b *experimentv1.Experiment) bool {
	a, b = experiment.Spec(a), experiment.Spec(b)
	for _, x := range []*experimentv1.Experiment{a, b} {
		experiment.ClearState(x)
		x.Coverage, x.Status = nil, ""
	}
	return proto.Equal(a, b)
}

// Evaluate previews what the proxies of cluster service would assign for
// attrs at time at (zero: now): it builds their configuration with
// translate.FilterConfig, decodes and compiles it as the filter does
// (translate.Compile) and runs Assign; headers carry the decoded
// configuration's prefix, defaults applied.
func (s *Service) Evaluate(ctx context.Context, p *Principal, service string, attrs map[string]any, at time.Time) (*adminv1.EvaluateExperimentsResponse, error) {
	if !p.CanRead() {
		return nil, errorf(CodePermissionDenied, "reading needs a token")
	}
	if at.IsZero() {
		at = s.now()
	}
	exps, _, err := s.List(ctx, p, Filter{})
	if err != nil {
		return nil, err
	}
	cfg, err := translate.FilterConfig(exps, service, at, s.mesh)
	if err != nil {
		return nil, err
	}
	f, set, err := translate.Compile(cfg)
	if err != nil {
		return nil, fmt.Errorf("compile filter configuration for %q: %w", service, err)
	}
	out := &adminv1.EvaluateExperimentsResponse{Version: f.Version}
	for _, a := range set.Assign(nil, engine.Attributes(attrs)) {
		out.Assignments = append(out.Assignments, &adminv1.Assignment{
			Experiment:    a.Key,
			VariationId:   int32(a.VariationID),
			Value:         a.Value,
			InExperiment:  a.InExperiment,
			HashUsed:      a.HashUsed,
			Header:        f.HeaderPrefix + a.Key,
			HashAttribute: a.HashAttribute,
			HashValue:     a.HashValue,
		})
	}
	return out, nil
}

// History returns the audit changes of key (every key if empty), oldest
// first. A key that was never written is CodeNotFound.
func (s *Service) History(ctx context.Context, p *Principal, key string) ([]*adminv1.Change, error) {
	if !p.CanRead() {
		return nil, errorf(CodePermissionDenied, "reading needs a token")
	}
	changes, err := s.store.History(ctx, key)
	if err != nil {
		return nil, err
	}
	if key != "" && len(changes) == 0 {
		return nil, errorf(CodeNotFound, "experiment %q has no history", key)
	}
	out := make([]*adminv1.Change, 0, len(changes))
	for _, c := range changes {
		ch := &adminv1.Change{Revision: c.Revision, Key: c.Key, Op: c.Op, Actor: c.Actor, Time: timestamppb.New(c.Time)}
		if ch.Before, err = fromChange(c.Before); err != nil {
			return nil, fmt.Errorf("history of %q at revision %d: %w", c.Key, c.Revision, err)
		}
		if ch.After, err = fromChange(c.After); err != nil {
			return nil, fmt.Errorf("history of %q at revision %d: %w", c.Key, c.Revision, err)
		}
		out = append(out, ch)
	}
	return out, nil
}

// fromChange rebuilds the resource from a Change's Before or After (nil for
// nil).
func fromChange(raw json.RawMessage) (*experimentv1.Experiment, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var se store.Experiment
	if err := json.Unmarshal(raw, &se); err != nil {
		return nil, err
	}
	return experiment.FromStore(&se)
}
