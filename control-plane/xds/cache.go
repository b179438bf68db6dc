package xds

import (
	"context"
	"fmt"
	"slices"
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// holdCache is a cachev3.SnapshotCache that answers state-of-the-world ECDS
// requests itself, from resources encoded once per snapshot, and does not
// answer one for a version the proxy already has or has just rejected.
//
// The snapshot cache encodes a snapshot's resources again for every
// response, that is for every proxy at every push; here each response
// shares its snapshot's encoded resources (the gRPC stream only reads
// them), and a push to a cluster's proxies encodes nothing.
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
// Every other request is answered as the snapshot cache would: at once
// when its version differs from the snapshot's or it subscribes to a
// resource not returned on its stream yet, otherwise at the next snapshot
// of another version. Other types, and the delta protocol, are the
// snapshot cache's, which holds every snapshot too.
type holdCache struct {
	cachev3.SnapshotCache
	hash cachev3.NodeHash

	mu     sync.Mutex
	nextID int64
	nodes  map[string]*ecdsNode // node hash (artifact/cluster) → its snapshot's ECDS resources and watches
}

var _ cachev3.SnapshotCache = (*holdCache)(nil)

// ecdsNode is what holdCache keeps of one node hash: its snapshot's ECDS
// resources, encoded, and its open ECDS watches. It is forgotten once it
// has neither (forgetLocked).
type ecdsNode struct {
	set       bool   // a snapshot is set
	version   string // its version
	names     []string
	resources []*anypb.Any // names[i]'s resource, encoded; shared by every response, never changed
	watches   map[int64]*ecdsWatch
}

// ecdsWatch is an open state-of-the-world ECDS request.
type ecdsWatch struct {
	req  *cachev3.Request
	sub  cachev3.Subscription
	out  chan cachev3.Response
	hold string // look at it again once the node's version differs from this
	held bool   // held although the snapshot cache would have answered it (a NACK or a reconnect)
}

func newHoldCache(inner cachev3.SnapshotCache, hash cachev3.NodeHash) *holdCache {
	return &holdCache{SnapshotCache: inner, hash: hash, nodes: map[string]*ecdsNode{}}
}

// CreateWatch implements cachev3.ConfigWatcher.
func (c *holdCache) CreateWatch(req *cachev3.Request, sub cachev3.Subscription, out chan cachev3.Response) (func(), error) {
	if req.GetTypeUrl() != resource.ExtensionConfigType {
		return c.SnapshotCache.CreateWatch(req, sub, out)
	}
	node := c.hash.ID(req.GetNode())
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[node]
	if n == nil {
		n = &ecdsNode{watches: map[int64]*ecdsWatch{}}
		c.nodes[node] = n
	}
	w := &ecdsWatch{req: req, sub: sub, out: out, hold: req.GetVersionInfo()}
	if v, ok := n.heldVersion(req, sub); ok {
		w.hold, w.held = v, true
	} else if n.answers(req, sub) { // so n has a snapshot, and is kept
		n.respond(req, out)
		return func() {}, nil
	}
	c.nextID++
	id := c.nextID
	n.watches[id] = w
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if n := c.nodes[node]; n != nil {
			delete(n.watches, id)
			c.forgetLocked(node)
		}
	}, nil
}

// heldVersion reports whether req must not be answered, although the
// snapshot cache would answer it, while node's snapshot has the returned
// version.
func (n *ecdsNode) heldVersion(req *cachev3.Request, sub cachev3.Subscription) (string, bool) {
	if !n.set {
		return "", false
	}
	if req.GetErrorDetail() != nil && rejected(req, sub, n.version) {
		return n.version, true
	}
	if req.GetResponseNonce() == "" && req.GetVersionInfo() == n.version {
		return n.version, true
	}
	return "", false
}

// answers reports whether the snapshot cache would answer req at once:
// its version differs from the snapshot's, or it asks for a resource not
// returned on its stream yet. Without a snapshot it waits for one.
func (n *ecdsNode) answers(req *cachev3.Request, sub cachev3.Subscription) bool {
	return n.set && (req.GetVersionInfo() != n.version || n.unreturned(sub))
}

// rejected reports whether req, a NACK, rejects version current: the
// server passes only requests that answer its latest response, so what it
// returned last on this stream is what the proxy rejected.
func rejected(req *cachev3.Request, sub cachev3.Subscription, current string) bool {
	returned := sub.ReturnedResources()
	for _, name := range req.GetResourceNames() {
		if v, ok := returned[name]; ok && v == current {
			return true
		}
	}
	if len(req.GetResourceNames()) == 0 {
		for _, v := range returned {
			if v == current {
				return true
			}
		}
	}
	return false
}

// unreturned reports whether sub asks for a resource of the snapshot that
// was not returned on its stream yet (newly subscribed, or newly wildcard).
func (n *ecdsNode) unreturned(sub cachev3.Subscription) bool {
	returned := sub.ReturnedResources()
	if sub.IsWildcard() {
		for _, name := range n.names {
			if _, ok := returned[name]; !ok {
				return true
			}
		}
		return false
	}
	for name := range sub.SubscribedResources() {
		if _, ok := returned[name]; !ok && slices.Contains(n.names, name) {
			return true
		}
	}
	return false
}

// respond answers req on out with the snapshot's resources it asks for
// (all of them if it names none). out has room: the server reads one
// response per watch.
func (n *ecdsNode) respond(req *cachev3.Request, out chan cachev3.Response) {
	// The server's subscription keeps the returned map and changes it: one
	// per response.
	r := &ecdsResponse{req: req, version: n.version, resources: n.resources, returned: make(map[string]string, len(n.names))}
	names := req.GetResourceNames()
	all := len(names) == 0 || n.allNamed(names)
	if !all {
		r.resources = nil
	}
	for i, name := range n.names {
		if all || slices.Contains(names, name) {
			if !all {
				r.resources = append(r.resources, n.resources[i])
			}
			r.returned[name] = n.version
		}
	}
	out <- r
}

// allNamed reports whether names holds every resource of the snapshot.
func (n *ecdsNode) allNamed(names []string) bool {
	for _, name := range n.names {
		if !slices.Contains(names, name) {
			return false
		}
	}
	return true
}

// SetSnapshot implements cachev3.SnapshotCache: it encodes the snapshot's
// ECDS resources once, sets the snapshot, then answers the watches whose
// version it changes.
func (c *holdCache) SetSnapshot(ctx context.Context, node string, snap cachev3.ResourceSnapshot) error {
	set := &ecdsNode{set: true, version: snap.GetVersion(resource.ExtensionConfigType)}
	for name, r := range snap.GetResourcesAndTTL(resource.ExtensionConfigType) {
		if r.TTL != nil {
			return fmt.Errorf("snapshot %q: resource %q has a TTL, which this cache does not serve", node, name)
		}
		b, err := cachev3.MarshalResource(r.Resource)
		if err != nil {
			return fmt.Errorf("snapshot %q: encode %q: %w", node, name, err)
		}
		set.names = append(set.names, name)
		set.resources = append(set.resources, &anypb.Any{TypeUrl: resource.ExtensionConfigType, Value: b})
	}
	set.resources = slices.Clip(set.resources) // shared: an append must copy
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.SnapshotCache.SetSnapshot(ctx, node, snap); err != nil {
		return err
	}
	if n := c.nodes[node]; n != nil {
		set.watches = n.watches
	} else {
		set.watches = map[int64]*ecdsWatch{}
	}
	c.nodes[node] = set
	for id, w := range set.watches {
		if set.version == w.hold {
			continue
		}
		if w.held && !set.answers(w.req, w.sub) {
			// No longer held, and the proxy runs this version.
			w.hold, w.held = w.req.GetVersionInfo(), false
			continue
		}
		delete(set.watches, id)
		set.respond(w.req, w.out)
	}
	return nil
}

// ClearSnapshot implements cachev3.SnapshotCache. The node's watches stay
// open until a snapshot of another version is set.
func (c *holdCache) ClearSnapshot(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.SnapshotCache.ClearSnapshot(node)
	if n := c.nodes[node]; n != nil {
		c.nodes[node] = &ecdsNode{watches: n.watches}
		c.forgetLocked(node)
	}
}

// forgetLocked forgets node once it has neither a snapshot nor a watch: a
// node hash per cluster ever seen would outlive the cluster
// (Server.forgetIdle). c.mu must be held.
func (c *holdCache) forgetLocked(node string) {
	if n := c.nodes[node]; n != nil && !n.set && len(n.watches) == 0 {
		delete(c.nodes, node)
	}
}

// heldNodes is the number of node hashes the cache keeps (for tests).
func (c *holdCache) heldNodes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// heldCount is the number of watches held although the snapshot cache
// would have answered them (for tests).
func (c *holdCache) heldCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, node := range c.nodes {
		for _, w := range node.watches {
			if w.held {
				n++
			}
		}
	}
	return n
}

// ecdsResponse is a cachev3.Response whose resources are its snapshot's,
// encoded once and shared.
type ecdsResponse struct {
	req       *cachev3.Request
	version   string
	resources []*anypb.Any
	returned  map[string]string
	out       *discoveryv3.DiscoveryResponse
}

var _ cachev3.Response = (*ecdsResponse)(nil)

// GetDiscoveryResponse implements cachev3.Response: a message of its own
// (the server sets its nonce) around the shared resources. Only the
// stream's goroutine calls it, so r.out needs no lock.
func (r *ecdsResponse) GetDiscoveryResponse() (*discoveryv3.DiscoveryResponse, error) {
	if r.out == nil {
		r.out = &discoveryv3.DiscoveryResponse{VersionInfo: r.version, Resources: r.resources, TypeUrl: r.req.GetTypeUrl()}
	}
	return r.out, nil
}

// GetRequest implements cachev3.Response.
func (r *ecdsResponse) GetRequest() *discoveryv3.DiscoveryRequest { return r.req }

// GetVersion implements cachev3.Response.
func (r *ecdsResponse) GetVersion() (string, error) { return r.version, nil }

// GetResponseVersion implements cachev3.Response.
func (r *ecdsResponse) GetResponseVersion() string { return r.version }

// GetReturnedResources implements cachev3.Response.
func (r *ecdsResponse) GetReturnedResources() map[string]string { return r.returned }

// GetContext implements cachev3.Response.
func (r *ecdsResponse) GetContext() context.Context { return context.Background() }
