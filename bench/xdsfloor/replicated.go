package xdsfloor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// The replicated floor: the least a control plane of several go-control-plane
// servers sharing one etcd cluster does for a write to be live on every
// proxy, known to the writer. The writer commits the resource under
// ConfigKey; each server's watch delivers it, the server pushes it to its
// own fleet (Push) and, once all of its proxies acknowledged it, commits
// "<revision> <acked>" under SettledKey(id); the writer's watch of those
// delivers the last one. Two etcd commits one after the other and the
// push, as in a waited write of Allot's — no admin API, no validation, no
// registry of proxies, no snapshot per cluster.

// ConfigKey is where the writer commits the resource, under prefix.
func ConfigKey(prefix string) string { return prefix + "config" }

// SettledKey is where server id says its fleet applied a revision, under prefix.
func SettledKey(prefix, id string) string { return prefix + "settled/" + id }

// Follow pushes every resource committed under ConfigKey(prefix) from now
// on to s's fleet and, once every open stream acknowledged it, commits
// "<its revision> <acknowledged>" under SettledKey(prefix, id); it returns
// when ctx ends or the watch fails.
func Follow(ctx context.Context, c *clientv3.Client, s *Server, prefix, id string) error {
	for wr := range c.Watch(ctx, ConfigKey(prefix)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", ConfigKey(prefix), err)
		}
		for _, ev := range wr.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			ext := &corev3.TypedExtensionConfig{}
			if err := proto.Unmarshal(ev.Kv.Value, ext); err != nil {
				return fmt.Errorf("%s at revision %d: %w", ConfigKey(prefix), ev.Kv.ModRevision, err)
			}
			_, n, err := s.Push(ctx, ext)
			if err != nil {
				return err
			}
			v := strconv.FormatInt(ev.Kv.ModRevision, 10) + " " + strconv.Itoa(n)
			if _, err := c.Put(ctx, SettledKey(prefix, id), v); err != nil {
				return fmt.Errorf("put %s: %w", SettledKey(prefix, id), err)
			}
		}
	}
	return ctx.Err()
}

// Writer commits resources for the servers following prefix and learns
// when each of them settled, from one watch it keeps open (a watch opened
// after the write would start behind, and etcd catches such watches up
// only every 100 ms).
type Writer struct {
	c      *clientv3.Client
	prefix string

	mu      sync.Mutex
	settled map[string]settled // server id → what it said last
	changed chan struct{}      // closed at the next change
	err     error              // the watch's, once it failed
}

type settled struct {
	rev   int64
	acked int
}

// NewWriter watches prefix's settled records from now on, until ctx ends.
func NewWriter(ctx context.Context, c *clientv3.Client, prefix string) (*Writer, error) {
	w := &Writer{c: c, prefix: prefix, settled: map[string]settled{}, changed: make(chan struct{})}
	ch := c.Watch(clientv3.WithRequireLeader(ctx), SettledKey(prefix, ""), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	first, ok := <-ch
	if !ok || first.Err() != nil || !first.Created {
		return nil, fmt.Errorf("watch %s: %v", SettledKey(prefix, ""), first.Err())
	}
	go w.follow(ch)
	return w, nil
}

func (w *Writer) follow(ch clientv3.WatchChan) {
	for wr := range ch {
		w.mu.Lock()
		if err := wr.Err(); err != nil {
			w.err = err
		}
		for _, ev := range wr.Events {
			id := strings.TrimPrefix(string(ev.Kv.Key), SettledKey(w.prefix, ""))
			var s settled
			if _, err := fmt.Sscanf(string(ev.Kv.Value), "%d %d", &s.rev, &s.acked); err != nil {
				w.err = fmt.Errorf("%s: %q: %w", ev.Kv.Key, ev.Kv.Value, err)
			}
			w.settled[id] = s
		}
		close(w.changed)
		w.changed = make(chan struct{})
		w.mu.Unlock()
	}
	w.mu.Lock()
	if w.err == nil {
		w.err = fmt.Errorf("watch %s closed", SettledKey(w.prefix, ""))
	}
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// Write commits resource and waits until every server of ids said it
// settled on it or later; it returns how many proxies they acknowledged
// it on.
func (w *Writer) Write(ctx context.Context, resource []byte, ids []string) (int, error) {
	resp, err := w.c.Put(ctx, ConfigKey(w.prefix), string(resource))
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	for {
		w.mu.Lock()
		n, all, err, changed := 0, true, w.err, w.changed
		for _, id := range ids {
			s := w.settled[id]
			all = all && s.rev >= rev
			n += s.acked
		}
		w.mu.Unlock()
		switch {
		case err != nil:
			return 0, err
		case all:
			return n, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return n, fmt.Errorf("revision %d settled on %d of %d servers: %w", rev, len(ids)-w.pending(ids, rev), len(ids), ctx.Err())
		}
	}
}

// pending counts the servers of ids not yet settled on rev.
func (w *Writer) pending(ids []string, rev int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, id := range ids {
		if w.settled[id].rev < rev {
			n++
		}
	}
	return n
}
