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

// NewLists shares st's List among its callers.
func NewLists(st Store) *Lists { return &Lists{st: st} }

// List returns the stored experiments and the store revision they are as
// of, atLeast or later: those read last if that recent, or those of a
// read that begins after the call (or that a caller waiting for the same
// revision began). Nothing is read while another read is under way; the
// caller waits for it, and reads again if it is not recent enough. A store
// that can serve only an older state (etcd without a quorum answers from a
// member's last one) returns that, with its revision, which the caller
// compares with atLeast; it is not kept over a more recent one.
func (l *Lists) List(ctx context.Context, atLeast int64) ([]*Experiment, int64, error) {
	for {
		l.mu.Lock()
		if l.items != nil && l.rev >= atLeast {
			items, rev := l.items, l.rev
			l.mu.Unlock()
			return items, rev, nil
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
