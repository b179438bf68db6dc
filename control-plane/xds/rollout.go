package xds

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/allotmesh/allot/control-plane/rollout"
)

// The server is what rollout's waits use of it.
var _ rollout.Server = (*Server)(nil)

// Targets returns every known cluster's current version. Take it before a
// write and pass Targets().Changed(before) to WaitFor after Refresh.
func (s *Server) Targets() rollout.Targets {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.clusters)
}

// Status is the rollout of every cluster's current version to every
// connected proxy, without waiting.
func (s *Server) Status() rollout.Rollout {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rolloutLocked(maps.Clone(s.clusters), nil)
}

// rolloutLocked reports the identified streams of targets' clusters (only
// those in ids if ids is non-nil); s.mu must be held.
func (s *Server) rolloutLocked(targets rollout.Targets, ids map[int64]bool) rollout.Rollout {
	r := rollout.Rollout{Targets: targets, Proxies: []rollout.ProxyStatus{}}
	for id, st := range s.streams {
		if _, ok := targets[st.cluster]; !ok || !st.identified || (ids != nil && !ids[id]) {
			continue
		}
		r.Proxies = append(r.Proxies, st.status(s.clusters[st.cluster]))
	}
	rollout.SortProxies(r.Proxies)
	return r
}

// WaitFor waits until every proxy of targets' clusters that is connected
// now has applied or rejected its cluster's current version (the target,
// unless a later write superseded it), or until ctx ends. An unserved proxy
// is not waited for; it is reported. Proxies that
// connect later are not waited for; proxies that disconnect drop out.
//
// The error is nil if all applied, wraps ErrRejected if some rejected,
// ErrUnserved if some are unserved, and wraps ctx's error if some were still pending when ctx ended; the Rollout
// says which proxies and why either way.
//
// After a store write the admin API calls:
//
//	before := x.Targets()
//	// ... write ...
//	if err := x.Refresh(ctx); err != nil { ... }
//	rollout, err := x.WaitFor(ctx, x.Targets().Changed(before))
func (s *Server) WaitFor(ctx context.Context, targets rollout.Targets) (rollout.Rollout, error) {
	s.mu.Lock()
	ids := map[int64]bool{}
	for id, st := range s.streams {
		if _, ok := targets[st.cluster]; ok && st.identified {
			ids[id] = true
		}
	}
	s.mu.Unlock()
	// Each wake-up (every ACK anywhere) re-checks only the proxies still
	// pending, without building their status: with a thousand proxies,
	// rebuilding the whole rollout on every ACK made a write wait seconds.
	pending := make([]int64, 0, len(ids))
	for id := range ids {
		pending = append(pending, id)
	}
	for {
		s.mu.Lock()
		kept := pending[:0]
		for _, id := range pending {
			st, ok := s.streams[id]
			if ok && st.state(s.clusters[st.cluster]) == rollout.StatePending {
				kept = append(kept, id)
			}
		}
		pending = kept
		changed := s.changesLocked()
		if len(pending) == 0 {
			r := s.rolloutLocked(targets, ids)
			s.mu.Unlock()
			return r, r.Err()
		}
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			s.mu.Lock()
			r := s.rolloutLocked(targets, ids)
			s.mu.Unlock()
			return r, fmt.Errorf("wait for rollout: %w", errors.Join(ctx.Err(), r.Err()))
		}
	}
}
