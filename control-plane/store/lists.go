package store

import (
	"context"
	"sync"
)

// Lists shares reads of the stored experiments among the parts of one
// allotd that follow the store (the builder of the proxies' configuration,
// the outcomes aggregator): after a write each of them wants the list as
// of that write, and one read serves them all. List returns what was read
// last when it is as recent as asked; otherwise it reads, once for every
// caller asking meanwhile. The experiments it returns are shared: callers
// must not modify them.
type Lists struct {
	st Store

	mu      sync.Mutex
	rev     int64
	items   []*Experiment
	reading chan struct{} // closed when the read under way ends; nil if none
}

// Follower is a store that keeps the experiments as its Watch delivers
// them (store/etcd, whose reads are round trips to a cluster).
type Follower interface {
	// Followed returns the experiments as of the revision the store's
	// Watch delivered last, and that revision, if it is atLeast, without
	// a read; ok is false when it cannot (no Watch runs, or it has not
	// delivered that revision). The experiments may be newer than the
	// revision, never older, and are shared: callers must not modify them.
	Followed(ctx context.Context, atLeast int64) (items []*Experiment, rev int64, ok bool)
}

// NewLists shares st's List among its callers.
func NewLists(st Store) *Lists { return &Lists{st: st} }

// List returns the stored experiments and the store revision they are as
// of, atLeast or later: those read last if that recent, or those of a
// read that begins after the call (or that a caller waiting for the same
// revision began). Nothing is read while another read is under way; the
// caller waits for it, and reads again if it is not recent enough. A store
// that can serve only an older state (etcd without a quorum answers from a
// member's last one) returns that, with its revision, which the caller
// compares with atLeast; it is not kept over a more recent one. A store
// that is a Follower answers from what its Watch delivered, when that is
// as recent, without a read; those experiments may include writes after
// the revision returned (never miss one before it).
func (l *Lists) List(ctx context.Context, atLeast int64) ([]*Experiment, int64, error) {
	for {
		l.mu.Lock()
		if l.items != nil && l.rev >= atLeast {
			items, rev := l.items, l.rev
			l.mu.Unlock()
			return items, rev, nil
		}
		if f, ok := l.st.(Follower); ok && l.reading == nil {
			l.mu.Unlock()
			if items, rev, ok := f.Followed(ctx, atLeast); ok {
				l.mu.Lock()
				if l.items == nil || rev > l.rev {
					l.items, l.rev = items, rev
				}
				l.mu.Unlock()
				return items, rev, nil
			}
			l.mu.Lock()
			if l.items != nil && l.rev >= atLeast {
				items, rev := l.items, l.rev
				l.mu.Unlock()
				return items, rev, nil
			}
		}
		if ch := l.reading; ch != nil {
			l.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
		done := make(chan struct{})
		l.reading = done
		l.mu.Unlock()
		items, rev, err := l.st.List(ctx)
		l.mu.Lock()
		l.reading = nil
		if err == nil && (l.items == nil || rev >= l.rev) {
			if items == nil {
				items = []*Experiment{}
			}
			l.items, l.rev = items, rev
		}
		l.mu.Unlock()
		close(done)
		return items, rev, err
	}
}
