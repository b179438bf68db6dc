package xds

import (
	"context"
	"sync"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// holdCache is a cachev3.SnapshotCache that does not answer a state-of-the-
// world request for a version the proxy already has or has just rejected.
//
// The snapshot cache answers every request whose version_info differs from
// the snapshot's version. Two requests must not be answered that way:
//
//   - A NACK. Envoy rejects version V by re-sending its last accepted
//     version with error_detail set; the cache would send V again at once,
//     Envoy would reject it again, and so on. Here the watch is held until the
//     proxy's snapshot version is no longer V.
//   - The first request of a new stream (no response nonce) whose
//     version_info is the snapshot's version: a proxy reconnecting, e.g. after
//     allotd restarted. The cache would re-send the same configuration
//     because the new stream has not returned anything yet. Versions are
//     content digests, so an equal version means the proxy has exactly this
//     configuration; the watch is held until the version changes.
//
// Everything else, including the delta protocol, is the snapshot cache's.
type holdCache struct {
	cachev3.SnapshotCache
	hash cachev3.NodeHash

	mu     sync.Mutex
	nextID int64
	held   map[string]map[int64]*heldWatch // node hash (artifact/cluster) → held watches
}

var _ cachev3.SnapshotCache = (*holdCache)(nil)

// heldWatch is a request the snapshot cache has not seen yet. Once released
// it is the snapshot cache's watch, cancelled through cancel.
type heldWatch struct {
	req     *cachev3.Request
	sub     cachev3.Subscription
	out     chan cachev3.Response
	version string // answer once the snapshot version differs from this
	cancel  func()
}

func newHoldCache(inner cachev3.SnapshotCache, hash cachev3.NodeHash) *holdCache {
	return &holdCache{SnapshotCache: inner, hash: hash, held: map[string]map[int64]*heldWatch{}}
}

// CreateWatch implements cachev3.ConfigWatcher.
func (c *holdCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if req.GetErrorDetail() == nil && req.GetResponseNonce() != "" {
		// An ACK (the request after every response): never held, and the
		// snapshot need not be looked up (holdVersion).
		return c.SnapshotCache.CreateWatch(req, sub, out)
	}
	node := c.hash.ID(req.GetNode())
	hold, ok := c.holdVersion(node, req, sub)
	if !ok {
		return c.SnapshotCache.CreateWatch(req, sub, out)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Check again under c.mu: SetSnapshot may have moved on meanwhile.
	if c.currentVersion(node, req.GetTypeUrl()) != hold {
		return c.SnapshotCache.CreateWatch(req, sub, out)
	}
	c.nextID++
	id := c.nextID
	w := &heldWatch{req: req, sub: sub, out: out, version: hold}
	if c.held[node] == nil {
		c.held[node] = map[int64]*heldWatch{}
	}
	c.held[node][id] = w
	return func() {
		c.mu.Lock()
		c.unholdLocked(node, id)
		cancel := w.cancel
		w.cancel = func() {}
		c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}, nil
}

// holdVersion reports whether req must not be answered while node's
// snapshot has the returned version.
func (c *holdCache) holdVersion(node string, req *cachev3.Request, sub cachev3.Subscription) (string, bool) {
	current := c.currentVersion(node, req.GetTypeUrl())
	if current == "" {
		return "", false
	}
	if req.GetErrorDetail() != nil {
		// The server passes only requests that answer its latest response, so
		// what it returned last on this stream is what the proxy rejected.
		for _, name := range req.GetResourceNames() {
			if v, ok := sub.ReturnedResources()[name]; ok && v == current {
				return current, true
			}
		}
		if len(req.GetResourceNames()) == 0 {
			for _, v := range sub.ReturnedResources() {
				if v == current {
					return current, true
				}
			}
		}
		return "", false
	}
	if req.GetResponseNonce() == "" && req.GetVersionInfo() == current {
		return current, true
	}
	return "", false
}

// currentVersion is node's snapshot version for typeURL ("" if none).
func (c *holdCache) currentVersion(node, typeURL string) string {
	snap, err := c.SnapshotCache.GetSnapshot(node)
	if err != nil {
		return ""
	}
	return snap.GetVersion(typeURL)
}

// SetSnapshot implements cachev3.SnapshotCache: it sets the snapshot, then
// hands the held watches whose version it changes to the snapshot cache,
// which answers them.
func (c *holdCache) SetSnapshot(ctx context.Context, node string, snap cachev3.ResourceSnapshot) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.SnapshotCache.SetSnapshot(ctx, node, snap); err != nil {
		return err
	}
	for id, w := range c.held[node] {
		if snap.GetVersion(w.req.GetTypeUrl()) == w.version {
			continue
		}
		c.unholdLocked(node, id)
		cancel, err := c.SnapshotCache.CreateWatch(w.req, w.sub, w.out)
		if err != nil {
			return err
		}
		w.cancel = cancel
	}
	return nil
}

// ClearSnapshot implements cachev3.SnapshotCache.
func (c *holdCache) ClearSnapshot(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.SnapshotCache.ClearSnapshot(node)
	for id, w := range c.held[node] {
		c.unholdLocked(node, id)
		if cancel, err := c.SnapshotCache.CreateWatch(w.req, w.sub, w.out); err == nil {
			w.cancel = cancel
		}
	}
}

// unholdLocked forgets held watch id of node, and node once it holds
// none: a node hash per cluster ever seen would outlive the cluster
// (Server.forgetIdle). c.mu must be held.
func (c *holdCache) unholdLocked(node string, id int64) {
	delete(c.held[node], id)
	if len(c.held[node]) == 0 {
		delete(c.held, node)
	}
}

// heldNodes is the number of node hashes with held watches (for tests).
func (c *holdCache) heldNodes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// heldCount is the number of held watches (for tests).
func (c *holdCache) heldCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ws := range c.held {
		n += len(ws)
	}
	return n
}
