package rollout

import (
	"context"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// Server is an xDS server that tracks its proxies (xds.Server): the
// version it serves each cluster, a push of the store's current state, the
// wait until its own proxies applied a write, and their rollout now.
type Server interface {
	// Targets is every known cluster's current version.
	Targets() Targets
	// Refresh rebuilds and pushes every cluster's configuration.
	Refresh(ctx context.Context) error
	// WaitFor waits until every proxy of targets' clusters connected now
	// applied or rejected its cluster's current version, or ctx ends; the
	// error wraps ErrRejected, ErrUnserved or ctx's error.
	WaitFor(ctx context.Context, targets Targets) (Rollout, error)
	// Status is the rollout of every cluster's current version to every
	// connected proxy, without waiting.
	Status() Rollout
}

// Local waits for the proxies of one allotd running alone: its own proxies
// are the whole mesh. It implements admin.Rollouts.
type Local struct{ x Server }

// NewLocal is the rollout of x's proxies.
func NewLocal(x Server) *Local { return &Local{x: x} }

// Mark is the version each cluster's proxies should run now.
func (l *Local) Mark() Mark { return Mark{Targets: l.x.Targets()} }

// Wait pushes the current configuration and waits until every proxy of a
// cluster whose version changed since mark applied or rejected it, or ctx
// ends. The write's revision is not needed: the push is this one's.
func (l *Local) Wait(ctx context.Context, mark Mark, _ int64) *adminv1.Rollout {
	if err := l.x.Refresh(ctx); err != nil {
		return Failed(err)
	}
	return Waited(l.x.WaitFor(ctx, l.x.Targets().Changed(mark.Targets)))
}

// Status reports every connected proxy against its cluster's current
// version.
func (l *Local) Status() *adminv1.Rollout { return Snapshot(l.x.Status()) }
