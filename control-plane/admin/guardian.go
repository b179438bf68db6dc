package admin

import (
	"context"
	"fmt"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/translate"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// GuardianWrite is allotd's own write of an experiment (control-plane/guardian:
// a rollback, a ramp step): change edits the experiment stored at revision
// — it may set the fields a client's write cannot (ramp_state, rollback) —
// and the result is validated, its status change checked against the
// lifecycle, and stored with actor in the history, as a client's update
// is. It is a compare-and-swap on revision, never retried: another write
// since makes it store.ErrConflict, so that of several replicas deciding
// the same write, exactly one makes it.
func (s *Service) GuardianWrite(ctx context.Context, actor, key string, revision int64, change func(*experimentv1.Experiment) error) (*experimentv1.Experiment, error) {
	cur, err := s.store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if cur.Revision != revision {
		return nil, fmt.Errorf("%s: %q at revision %d, current %d: %w", actor, key, revision, cur.Revision, store.ErrConflict)
	}
	old, err := FromStore(cur)
	if err != nil {
		return nil, fmt.Errorf("stored experiment %q: %w", key, err)
	}
	e, err := FromStore(cur)
	if err != nil {
		return nil, err
	}
	if err := change(e); err != nil {
		return nil, err
	}
	if err := translate.Validate(e, s.mesh); err != nil {
		return nil, err
	}
	if from, to := experiment.Status(old), experiment.Status(e); from != to && !experiment.Allowed(from, to) {
		return nil, errorf(CodeFailedPrecond, "status %s → %s is not allowed (%s)", from, to, experiment.TransitionsHelp)
	}
	b, err := spec(e)
	if err != nil {
		return nil, err
	}
	se, err := s.store.Update(ctx, &store.Experiment{Key: key, Owner: cur.Owner, Spec: b}, cur.Revision, actor)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "experiment written by allotd", "key", key, "actor", actor, "revision", se.Revision)
	return FromStore(se)
}
