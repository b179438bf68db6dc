package xds

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
)

// ErrRejected reports that a proxy refused a configuration (a NACK).
var ErrRejected = errors.New("configuration rejected")

// ErrUnserved reports that a proxy runs a filter artifact the server does
// not serve (StateUnserved).
var ErrUnserved = errors.New("filter artifact not served")

// Targets maps a proxy cluster to the configuration version its proxies
// should run.
type Targets map[string]string

// Changed returns the entries of t that are new or differ from before: the
// clusters a write between the two moments reconfigures.
func (t Targets) Changed(before Targets) Targets {
	out := Targets{}
	for c, v := range t {
		if before[c] != v {
			out[c] = v
		}
	}
	return out
}

// Rollout is where the proxies of some clusters stand with their target
// versions.
type Rollout struct {
	// Targets are the versions waited for, per cluster.
	Targets Targets `json:"targets"`
	// Proxies are the proxies of those clusters (connected when the wait
	// began and still connected), sorted; each State is against its
	// cluster's current version (its Target field).
	Proxies []ProxyStatus `json:"proxies"`
}

// Count is the number of proxies in state st.
func (r Rollout) Count(st State) int {
	n := 0
	for _, p := range r.Proxies {
		if p.State == st {
			n++
		}
	}
	return n
}

// Unfinished returns the proxies that have not applied their target.
func (r Rollout) Unfinished() []ProxyStatus {
	var out []ProxyStatus
	for _, p := range r.Proxies {
		if p.State != StateApplied {
			out = append(out, p)
		}
	}
	return out
}

// Err is nil if every proxy applied its target, else an error naming every
// proxy that did not and why; it wraps ErrRejected if any proxy refused and
// ErrUnserved if any runs an artifact the server does not serve.
func (r Rollout) Err() error {
	var rejected, unserved, pending []string
	for _, p := range r.Proxies {
		switch p.State {
		case StateRejected:
			rejected = append(rejected, fmt.Sprintf("%s (cluster %s) rejected version %s: %s", p.NodeID, p.Cluster, p.Rejected.Version, p.Rejected.Error))
		case StateUnserved:
			unserved = append(unserved, fmt.Sprintf("%s (cluster %s): %s", p.NodeID, p.Cluster, p.Error))
		case StatePending:
			pending = append(pending, fmt.Sprintf("%s (cluster %s) has not applied version %s", p.NodeID, p.Cluster, p.Target))
		}
	}
	var errs []error
	if len(rejected) > 0 {
		errs = append(errs, fmt.Errorf("%w by %d of %d proxies: %s", ErrRejected, len(rejected), len(r.Proxies), strings.Join(rejected, "; ")))
	}
	if len(unserved) > 0 {
		errs = append(errs, fmt.Errorf("%w for %d of %d proxies: %s", ErrUnserved, len(unserved), len(r.Proxies), strings.Join(unserved, "; ")))
	}
	if len(pending) > 0 {
		errs = append(errs, fmt.Errorf("%d of %d proxies pending: %s", len(pending), len(r.Proxies), strings.Join(pending, "; ")))
	}
	return errors.Join(errs...)
}

// Targets returns every known cluster's current version. Take it before a
// write and pass Targets().Changed(before) to WaitFor after Refresh.
func (s *Server) Targets() Targets {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.clusters)
}

// Status is the rollout of every cluster's current version to every
// connected proxy, without waiting.
func (s *Server) Status() Rollout {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rolloutLocked(maps.Clone(s.clusters), nil)
}

// rolloutLocked reports the identified streams of targets' clusters (only
// those in ids if ids is non-nil); s.mu must be held.
func (s *Server) rolloutLocked(targets Targets, ids map[int64]bool) Rollout {
	r := Rollout{Targets: targets, Proxies: []ProxyStatus{}}
	for id, st := range s.streams {
		if _, ok := targets[st.cluster]; !ok || !st.identified || (ids != nil && !ids[id]) {
			continue
		}
		r.Proxies = append(r.Proxies, st.status(s.clusters[st.cluster]))
	}
	SortProxies(r.Proxies)
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
func (s *Server) WaitFor(ctx context.Context, targets Targets) (Rollout, error) {
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
			if ok && st.state(s.clusters[st.cluster]) == StatePending {
				kept = append(kept, id)
			}
		}
		pending = kept
		changed := s.changed
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
