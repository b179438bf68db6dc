package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/internal/etcdkv"
)

// Watch implements store.Store. The first value is the store revision when
// the watch starts (read then; if that read fails, the revision the shared
// etcd watch delivered last); each later write delivers its revision.
// Every Watch of
// the store shares one etcd watch of meta/revision (a replica's builder
// and its outcomes aggregator each follow the store: one watch event per
// write for all of them), started by the first and kept for the session's
// life, along with one of the experiments (Followed), from which they
// take the experiments of the revision delivered. Over a broken
// connection, a lost leader or a compacted history each of those watches
// reads again and resumes from there.
func (s *Store) Watch(ctx context.Context) <-chan int64 {
	ch := make(chan int64, 1)
	if !s.kv.Go(ctx, func(wctx context.Context) {
		s.w.add(ch)
		defer s.w.remove(ch)
		s.w.start(func() bool {
			if !s.kv.Go(context.Background(), func(fctx context.Context) { s.watch(fctx, s.w.send) }) {
				return false
			}
			s.kv.Go(context.Background(), s.followExperiments) // Followed
			return true
		})
		// The current revision, which the shared watch may not have
		// delivered yet (it delivered every earlier one).
		rev, err := s.revision(wctx)
		if err != nil {
			rev = s.w.latest()
		}
		s.w.sendTo(ch, rev)
		<-wctx.Done()
	}) {
		close(ch)
	}
	return ch
}

// watchers are the channels of a store's Watch calls, which one etcd watch
// feeds.
type watchers struct {
	mu      sync.Mutex
	subs    map[chan int64]int64 // each channel's last value sent
	last    int64                // the revision the etcd watch delivered last (-1: none yet)
	lastAt  int64                // the etcd revision meta/revision took it at
	started bool
}

// add registers ch: it receives every revision the etcd watch delivers
// from now on.
func (w *watchers) add(ch chan int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs == nil {
		w.subs = map[chan int64]int64{}
	}
	w.subs[ch] = -1
}

// latest is the revision the etcd watch delivered last (-1: none yet).
func (w *watchers) latest() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// mark is the revision the etcd watch delivered last (-1: none yet), and
// the etcd revision meta/revision took it at.
func (w *watchers) mark() (rev, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.lastAt
}

// remove unregisters ch and closes it.
func (w *watchers) remove(ch chan int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.subs, ch)
	close(ch)
}

// start runs the etcd watch (run) unless it runs already or ran until the
// session closed.
func (w *watchers) start(run func() bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started {
		w.started = run()
	}
}

// send delivers rev, which meta/revision took at etcd revision at, to
// every channel.
func (w *watchers) send(rev, at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rev > w.last {
		w.last, w.lastAt = rev, at
	}
	for ch := range w.subs {
		w.sendLocked(ch, rev)
	}
}

// sendTo delivers rev to ch alone, if ch is still registered.
func (w *watchers) sendTo(ch chan int64, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.subs[ch]; ok && rev >= 0 {
		w.sendLocked(ch, rev)
	}
}

// sendLocked delivers rev to ch unless ch received it or a later one: a
// value ch's reader has not taken yet is replaced (coalesced), so values
// strictly increase and sending never blocks.
func (w *watchers) sendLocked(ch chan int64, rev int64) {
	if rev <= w.subs[ch] {
		return
	}
	w.subs[ch] = rev
	select {
	case <-ch:
	default:
	}
	ch <- rev
}

// watch delivers the current revision, then every later one, to send
// (with the etcd revision meta/revision took it at), until ctx ends.
func (s *Store) watch(ctx context.Context, send func(rev, at int64)) {
	rewatch(ctx, func(ctx context.Context) error {
		resp, err := s.kv.Read(ctx, etcdkv.Get{Key: s.revKey()})
		if err != nil {
			return err
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		rev, err := parseRevision(kvs)
		if err != nil {
			return err
		}
		var at int64 // when meta/revision took its value (0: never)
		if len(kvs) > 0 {
			at = kvs[0].ModRevision
		}
		send(rev, at)
		return s.follow(ctx, resp.Header.Revision+1, send)
	})
}

// rewatch runs once — a read, then a watch from there — again and again
// until ctx ends: at once after a watch that ended, after a backoff
// (50 ms, doubling up to 2 s) after a failure. Over a broken connection, a
// lost leader or a compacted history a watch thus reads the current state
// again and resumes from there.
func rewatch(ctx context.Context, once func(context.Context) error) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := once(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = 50 * time.Millisecond
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// follow delivers every change of meta/revision from etcd revision from on,
// until the watch breaks.
func (s *Store) follow(ctx context.Context, from int64, send func(rev, at int64)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range s.cli.Watch(wctx, s.revKey(), clientv3.WithRev(from)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			rev, err := strconv.ParseInt(string(ev.Kv.Value), 10, 64)
			if err != nil {
				return fmt.Errorf("meta/revision %q: %w", ev.Kv.Value, err)
			}
			send(rev, ev.Kv.ModRevision)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch closed")
}
