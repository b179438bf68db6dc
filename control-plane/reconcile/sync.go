// Package reconcile keeps every connected proxy's configuration in step
// with the store: it builds each cluster's filter configuration from the
// stored experiments (Builder, through translate), pushes it to the xDS
// server after every store write and at every schedule boundary (Sync),
// says when the served configuration has caught up with the store (Ready,
// /readyz), and for a replica publishes its proxies and itself to the mesh
// registry (Publish) and exports its view of the mesh as metrics.
//
// It imports experiment (for FromStore, the stored experiment's decoder),
// translate, xds, rollout and the store; never the admin API, the
// listeners, TLS or the web console (server wires them).
package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/xds"
)

// Sync refreshes proxies after every store write and at every schedule
// boundary (an experiment's start or end time), with no write needed,
// and records in b the store revision the pushed configuration is built
// from; it returns when ctx ends or the store's watch closes.
func Sync(ctx context.Context, st store.Store, x *xds.Server, b *Builder, log *slog.Logger) {
	revs := st.Watch(ctx)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var rev int64
		var err error
		select {
		case <-ctx.Done():
			return
		case r, ok := <-revs:
			if !ok {
				return
			}
			rev = r // the watch's revision: no read of the store's
		case <-timer.C:
			rev, err = st.Revision(ctx)
		}
		if err == nil {
			err = x.RefreshFrom(ctx, rev) // no read of the store's revision again
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("refresh proxies", "error", err)
			timer.Reset(time.Second) // the store may be back by then
			continue
		}
		b.setApplied(rev)
		next := b.nextBoundary()
		d := time.Hour
		if !next.IsZero() {
			d = max(next.Sub(b.now()), 0)
		}
		timer.Reset(d)
	}
}

// quorumChecker is a store that can tell whether it can commit now
// (store/etcd: a linearizable read), where its reads would fall back to a
// member's last known state.
type quorumChecker interface {
	Check(ctx context.Context) error
}

// Ready is /readyz: the store answers (with a quorum, for a replicated
// store), and the configuration served to proxies is built from the
// store's current revision (it may take up to a second to catch up with a
// write just made).
func Ready(ctx context.Context, db store.Store, b *Builder) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if c, ok := db.(quorumChecker); ok {
		if err := c.Check(ctx); err != nil {
			return err // names the store and why
		}
	}
	rev, err := db.Revision(ctx)
	if err != nil {
		return fmt.Errorf("store unavailable: %w", err)
	}
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
	for {
		applied := b.Applied()
		got := b.AppliedRevision()
		if got >= rev {
			return nil
		}
		select {
		case <-applied:
		case <-deadline.C:
			return fmt.Errorf("proxies' configuration is built from store revision %d, the store is at %d", got, rev)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
