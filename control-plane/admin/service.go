// Package admin is the control plane's admin API for experiment owners:
// create, read, list, update and delete experiments, validated with the same
// engine.Compile the filter runs, authorized per owner namespace. It is the
// only place where errors become transport status codes.
package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/filter/engine"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Service implements the admin operations over a store, independent of the
// transport.
type Service struct {
	store store.Store
	log   *slog.Logger
}

// NewService returns a Service over st; log may be nil.
func NewService(st store.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: st, log: log}
}

// Validate checks a definition with the engine's Compile and Allot's own
// rules, returning an *Error listing every field error.
func Validate(e *experimentv1.Experiment) error {
	var details []string
	def, err := engineDefinition(e)
	if err != nil {
		return errorf(CodeInvalid, "experiment: %v", err)
	}
	if _, err := engine.Compile(engine.Config{Experiments: []engine.Experiment{def}}); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			details = append(details, strings.TrimPrefix(line, "experiments[0]."))
		}
	}
	if e.GetStartTime() != nil && e.GetEndTime() != nil && !e.GetEndTime().AsTime().After(e.GetStartTime().AsTime()) {
		details = append(details, "endTime: must be after startTime")
	}
	if len(details) > 0 {
		return &Error{Code: CodeInvalid, Message: "invalid experiment", Details: details}
	}
	return nil
}

// engineDefinition converts the resource to the engine's definition through
// its proto3 JSON form — the same JSON the filter decodes.
func engineDefinition(e *experimentv1.Experiment) (engine.Experiment, error) {
	var def engine.Experiment
	b, err := protojson.Marshal(e)
	if err != nil {
		return def, err
	}
	err = json.Unmarshal(b, &def)
	return def, err
}

// spec is the stored form of a definition: its proto3 JSON without output-only
// metadata.
func spec(e *experimentv1.Experiment) ([]byte, error) {
	d := proto.Clone(e).(*experimentv1.Experiment)
	d.Revision, d.CreateTime, d.UpdateTime, d.CreatedBy, d.UpdatedBy = 0, nil, nil, "", ""
	return protojson.Marshal(d)
}

// FromStore rebuilds the resource from a stored document.
func FromStore(se *store.Experiment) (*experimentv1.Experiment, error) {
	e := &experimentv1.Experiment{}
	if err := protojson.Unmarshal(se.Spec, e); err != nil {
		return nil, err
	}
	e.Revision = se.Revision
	e.CreateTime = timestamppb.New(se.CreatedAt)
	e.UpdateTime = timestamppb.New(se.UpdatedAt)
	e.CreatedBy, e.UpdatedBy = se.CreatedBy, se.UpdatedBy
	return e, nil
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
	defaultOwner(p, e)
	if !p.CanWrite(e.Owner) {
		return nil, s.deny(ctx, p, "create", e.Key, e.Owner)
	}
	if err := Validate(e); err != nil {
		return nil, err
	}
	b, err := spec(e)
	if err != nil {
		return nil, err
	}
	se, err := s.store.Create(ctx, &store.Experiment{Key: e.Key, Owner: e.Owner, Spec: b}, p.Name)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "experiment created", "key", e.Key, "principal", p.Name, "revision", se.Revision)
	return FromStore(se)
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
	return FromStore(se)
}

// List returns every experiment, sorted by key, and the store revision.
func (s *Service) List(ctx context.Context, p *Principal) ([]*experimentv1.Experiment, int64, error) {
	if !p.CanRead() {
		return nil, 0, errorf(CodePermissionDenied, "reading needs a token")
	}
	items, rev, err := s.store.List(ctx)
	if err != nil {
		return nil, 0, err
	}
	out := make([]*experimentv1.Experiment, 0, len(items))
	for _, se := range items {
		e, err := FromStore(se)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, e)
	}
	return out, rev, nil
}

// Update replaces an experiment. A non-zero e.Revision must equal the stored
// revision (optimistic concurrency); the owner of both the stored and the
// new definition must be writable by p.
func (s *Service) Update(ctx context.Context, p *Principal, e *experimentv1.Experiment) (*experimentv1.Experiment, error) {
	cur, err := s.store.Get(ctx, e.Key)
	if err != nil {
		return nil, err
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
	if err := Validate(e); err != nil {
		return nil, err
	}
	b, err := spec(e)
	if err != nil {
		return nil, err
	}
	se, err := s.store.Update(ctx, &store.Experiment{Key: e.Key, Owner: e.Owner, Spec: b}, e.Revision, p.Name)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "experiment updated", "key", e.Key, "principal", p.Name, "revision", se.Revision)
	return FromStore(se)
}

// Delete removes an experiment; a non-zero revision must match.
func (s *Service) Delete(ctx context.Context, p *Principal, key string, revision int64) error {
	cur, err := s.store.Get(ctx, key)
	if err != nil {
		return err
	}
	if !p.CanWrite(cur.Owner) {
		return s.deny(ctx, p, "delete", key, cur.Owner)
	}
	if err := s.store.Delete(ctx, key, revision, p.Name); err != nil {
		return err
	}
	s.log.InfoContext(ctx, "experiment deleted", "key", key, "principal", p.Name)
	return nil
}

