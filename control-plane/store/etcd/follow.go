package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/internal/etcdkv"
	"github.com/allotmesh/allot/control-plane/store"
)

var _ store.Follower = (*Store)(nil)

// followWait bounds how long Followed waits for the watch of the
// experiments to deliver the write the watch of meta/revision delivered:
// both share one gRPC stream, so it is there within microseconds unless
// that watch is broken, and then the caller reads.
const followWait = 250 * time.Millisecond

// followed holds the stored experiments as the store's etcd watch of
// experiments/ delivers them (Followed): after a write, a replica's
// builder and outcomes aggregator take the list from here rather than
// read every experiment again. Its experiments are never modified, only
// replaced: the lists it hands out stay valid.
type followed struct {
	mu      sync.Mutex
	items   map[string]*store.Experiment // by etcd key
	sorted  []*store.Experiment          // items sorted by key; nil after a change
	applied int64                        // the etcd revision items are complete as of (0: none)
	failed  bool                         // a value did not decode: none until the next reset
	changed chan struct{}                // closed, and replaced, whenever applied grows
}

// reset replaces the experiments with those of kvs, read at etcd revision
// at; a value that does not decode leaves none (the callers read, and List
// reports the error).
func (f *followed) reset(kvs []*mvccpb.KeyValue, at int64) error {
	items := make(map[string]*store.Experiment, len(kvs))
	for _, kv := range kvs {
		e, err := store.DecodeExperiment(kv.Value)
		if err != nil {
			f.invalidate()
			return fmt.Errorf("follow experiments: decode %q: %w", kv.Key, err)
		}
		items[string(kv.Key)] = e
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// The read may be older than what the watch had applied (it broke,
	// and the read came from another member): the items are as of at,
	// no later, until the new watch brings them further.
	f.items, f.sorted, f.failed, f.applied = items, nil, false, 0
	f.advanceLocked(at)
	return nil
}

// apply applies one watch response: its events (those of whole etcd
// revisions) or, for a progress notification, its revision.
func (f *followed) apply(wr clientv3.WatchResponse) error {
	type change struct {
		key string
		e   *store.Experiment // nil: deleted
	}
	changes := make([]change, 0, len(wr.Events))
	at := int64(0)
	for _, ev := range wr.Events {
		c := change{key: string(ev.Kv.Key)}
		if ev.Type == mvccpb.PUT {
			e, err := store.DecodeExperiment(ev.Kv.Value)
			if err != nil {
				f.invalidate()
				return fmt.Errorf("follow experiments: decode %q: %w", ev.Kv.Key, err)
			}
			c.e = e
		}
		changes = append(changes, c)
		at = max(at, ev.Kv.ModRevision)
	}
	if wr.IsProgressNotify() {
		at = max(at, wr.Header.Revision)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(changes) > 0 {
		f.sorted = nil
	}
	for _, c := range changes {
		if c.e == nil {
			delete(f.items, c.key)
		} else {
			f.items[c.key] = c.e
		}
	}
	f.advanceLocked(at)
	return nil
}

// advanceLocked records that the experiments are complete as of etcd
// revision at, and wakes the callers waiting for it.
func (f *followed) advanceLocked(at int64) {
	if at <= f.applied {
		return
	}
	f.applied = at
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// invalidate forgets the experiments until the next reset, and wakes the
// callers waiting (they decline).
func (f *followed) invalidate() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items, f.sorted, f.applied, f.failed = nil, nil, 0, true
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// asOf returns the experiments, sorted by key, if they are complete as of
// etcd revision at; otherwise a channel closed when they may be (nil
// after a value did not decode: not before the next read).
func (f *followed) asOf(at int64) ([]*store.Experiment, <-chan struct{}, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed {
		return nil, nil, false
	}
	if f.items != nil && f.applied >= at {
		if f.sorted == nil {
			f.sorted = make([]*store.Experiment, 0, len(f.items))
			for _, e := range f.items {
				f.sorted = append(f.sorted, e)
			}
			slices.SortFunc(f.sorted, func(a, b *store.Experiment) int { return strings.Compare(a.Key, b.Key) })
		}
		return f.sorted, nil, true
	}
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return nil, f.changed, false
}

// Followed implements store.Follower: the experiments as of the last
// revision the store's Watch delivered, if it is atLeast, from the etcd
// watch of the experiments that every Watch starts along with that of
// meta/revision — no read. It waits (at most followWait) for that watch
// to deliver the write, and is not ok if it did not, or if no Watch runs.
// The experiments may include writes the Watch has not delivered yet
// (never the other way round): the revision returned is then behind
// them, and a caller asking for a later one gets them again.
func (s *Store) Followed(ctx context.Context, atLeast int64) ([]*store.Experiment, int64, bool) {
	rev, at := s.w.mark()
	if rev < 0 || rev < atLeast {
		return nil, 0, false
	}
	var timeout <-chan time.Time
	for {
		items, changed, ok := s.f.asOf(at)
		switch {
		case ok:
			return items, rev, true
		case changed == nil: // a value did not decode
			return nil, 0, false
		case timeout == nil:
			t := time.NewTimer(followWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, 0, false
		case <-ctx.Done():
			return nil, 0, false
		}
	}
}

// followExperiments keeps s.f up to date: it reads every experiment, then
// follows their changes from there, until ctx ends (rewatch). The read is
// linearizable, never a member's last state: the watch needs a leader
// anyway, and Lists reads itself meanwhile.
func (s *Store) followExperiments(ctx context.Context) {
	prefix := s.key("experiments/")
	rewatch(ctx, func(ctx context.Context) error {
		octx, cancel := s.kv.OpContext(ctx)
		resp, err := s.cli.Txn(octx).Then(etcdkv.Get{Key: prefix, Prefix: true}.Op(false)).Commit()
		err = s.kv.Wrap(octx, err)
		cancel()
		if err != nil {
			return err
		}
		if err := s.f.reset(resp.Responses[0].GetResponseRange().GetKvs(), resp.Header.Revision); err != nil {
			return err
		}
		return s.followFrom(ctx, prefix, resp.Header.Revision+1)
	})
}

// followFrom applies every change under prefix from etcd revision from on,
// until the watch breaks.
func (s *Store) followFrom(ctx context.Context, prefix string, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			return err
		}
		if err := s.f.apply(wr); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch closed")
}
