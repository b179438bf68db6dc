package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/internal/etcdkv"
	"github.com/allotmesh/allot/control-plane/rollout"
)

// View implements rollout.Registry: one read of the whole mesh. Proxies whose
// replica has no record are left out.
func (g *Registry) View(ctx context.Context) (rollout.View, error) {
	resp, err := g.kv.Read(ctx, etcdkv.Get{Key: g.replicasPrefix(), Prefix: true}, etcdkv.Get{Key: g.clustersPrefix(), Prefix: true},
		etcdkv.Get{Key: g.proxiesPrefix(), Prefix: true}, etcdkv.Get{Key: g.acksPrefix(), Prefix: true})
	if err != nil {
		return rollout.View{}, fmt.Errorf("read the mesh registry: %w", err)
	}
	replicas, err := g.decodeReplicas(resp.Responses[0], resp.Responses[1])
	if err != nil {
		return rollout.View{}, err
	}
	v := rollout.View{Replicas: replicas}
	g.viewMu.Lock()
	defer g.viewMu.Unlock()
	g.viewGen++
	// Records count only under their replica's current lease: those of a
	// run before a restart under the same ID live on until its lease
	// expires, and their stream numbers are another run's.
	current := func(id string, lease int64) bool {
		r, live := v.Replicas[id]
		return live && (r.Lease == 0 || r.Lease == lease)
	}
	acks := map[string]map[int64]ack{}
	for _, kv := range resp.Responses[3].GetResponseRange().GetKvs() {
		id, ok := g.acksReplica(string(kv.Key))
		if !ok || !current(id, kv.Lease) {
			continue
		}
		if acks[id] == nil {
			acks[id] = map[int64]ack{}
		}
		if err := decodeAcks(kv.Value, kv.ModRevision, acks[id]); err != nil {
			return rollout.View{}, fmt.Errorf("read the mesh registry: decode %q: %w", kv.Key, err)
		}
	}
	var ps []rollout.Proxy
	for _, kv := range resp.Responses[2].GetResponseRange().GetKvs() {
		d := g.decoded[string(kv.Key)]
		if d == nil || d.mod != kv.ModRevision {
			var part []rollout.Proxy
			if err := json.Unmarshal(kv.Value, &part); err != nil {
				return rollout.View{}, fmt.Errorf("read the mesh registry: decode %q: %w", kv.Key, err)
			}
			if d == nil {
				d = &decodedShard{}
				g.decoded[string(kv.Key)] = d
			}
			d.mod, d.proxies = kv.ModRevision, part
		}
		d.gen = g.viewGen
		for _, p := range d.proxies {
			if current(p.Replica, kv.Lease) {
				withAcks(&p, acks)
				ps = append(ps, p)
			}
		}
	}
	for k, d := range g.decoded {
		if d.gen != g.viewGen {
			delete(g.decoded, k)
		}
	}
	v.Proxies = rollout.Dedup(ps)
	return v, nil
}

// Replicas implements rollout.Registry: one read of the replicas' and their
// clusters' records.
func (g *Registry) Replicas(ctx context.Context) (map[string]rollout.Replica, error) {
	resp, err := g.kv.Read(ctx, etcdkv.Get{Key: g.replicasPrefix(), Prefix: true}, etcdkv.Get{Key: g.clustersPrefix(), Prefix: true})
	if err != nil {
		return nil, fmt.Errorf("read the mesh registry: %w", err)
	}
	return g.decodeReplicas(resp.Responses[0], resp.Responses[1])
}

// Roster implements rollout.Registry: one read of the replicas' and their
// clusters' records and of the node keys alone.
func (g *Registry) Roster(ctx context.Context) (rollout.Roster, error) {
	resp, err := g.kv.Read(ctx, etcdkv.Get{Key: g.replicasPrefix(), Prefix: true}, etcdkv.Get{Key: g.clustersPrefix(), Prefix: true},
		etcdkv.Get{Key: g.nodesPrefix(), Prefix: true}) // values are empty; keys-only reads leave out the lease
	if err != nil {
		return rollout.Roster{}, fmt.Errorf("read the mesh registry: %w", err)
	}
	replicas, err := g.decodeReplicas(resp.Responses[0], resp.Responses[1])
	if err != nil {
		return rollout.Roster{}, err
	}
	ro := rollout.Roster{Replicas: replicas, Nodes: map[rollout.NodeKey]rollout.Node{}}
	for _, kv := range resp.Responses[2].GetResponseRange().GetKvs() {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), g.nodesPrefix()), "/") // replica, node, stream, cluster
		if len(parts) != 4 {
			return rollout.Roster{}, fmt.Errorf("read the mesh registry: key %q: want replica/node/stream/cluster", kv.Key)
		}
		r, err1 := url.PathUnescape(parts[0])
		node, err2 := url.PathUnescape(parts[1])
		cluster, err3 := url.PathUnescape(parts[3])
		if err := errors.Join(err1, err2, err3); err != nil {
			return rollout.Roster{}, fmt.Errorf("read the mesh registry: key %q: %w", kv.Key, err)
		}
		key := rollout.NodeKey{Cluster: cluster, NodeID: node}
		rep, live := ro.Replicas[r]
		if !live {
			continue
		}
		// A node on two replicas (it moved): either will do, one on its
		// replica's current run first (a key of the run before a restart
		// under the same ID lives on until that run's lease expires).
		n := rollout.Node{Replica: r, Lease: kv.Lease}
		if was, ok := ro.Nodes[key]; !ok || better(n, rep, was, ro.Replicas[was.Replica]) {
			ro.Nodes[key] = n
		}
	}
	return ro, nil
}

// better reports whether node n (on replica r) is to stand for a node key
// rather than was (on replica wr): one on its replica's current run first,
// then the larger replica ID.
func better(n rollout.Node, r rollout.Replica, was rollout.Node, wr rollout.Replica) bool {
	if on, wasOn := n.On(r), was.On(wr); on != wasOn {
		return on
	}
	return was.Replica < n.Replica
}

// decodeReplicas decodes the replicas' records and adds to each its
// clusters' (a cluster record of a replica without one is left out: it
// has not written it yet, or its lease is running out). A replica record
// of the layout before cluster records lists its clusters itself.
func (g *Registry) decodeReplicas(replicas, clusters *etcdserverpb.ResponseOp) (map[string]rollout.Replica, error) {
	out := map[string]rollout.Replica{}
	for _, kv := range replicas.GetResponseRange().GetKvs() {
		var r rollout.Replica
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("read the mesh registry: decode %q: %w", kv.Key, err)
		}
		if r.Targets == nil {
			r.Targets = map[string]string{}
		}
		out[r.ID] = r
	}
	for _, kv := range clusters.GetResponseRange().GetKvs() {
		id, cluster, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), g.clustersPrefix()), "/")
		id, err1 := url.PathUnescape(id)
		cluster, err2 := url.PathUnescape(cluster)
		if err := errors.Join(err1, err2); !ok || err != nil {
			return nil, fmt.Errorf("read the mesh registry: key %q: want replica/cluster (%v)", kv.Key, err)
		}
		r, live := out[id]
		if !live {
			continue
		}
		var rec clusterRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, fmt.Errorf("read the mesh registry: decode %q: %w", kv.Key, err)
		}
		if rec.Target != nil {
			r.Targets[cluster] = *rec.Target
		}
		if rec.Proxies != nil {
			if r.Proxies == nil {
				r.Proxies = map[string]rollout.Summary{}
				out[id] = r
			}
			r.Proxies[cluster] = *rec.Proxies
		}
	}
	return out, nil
}

// Watch implements rollout.Registry. It follows the replicas' records alone:
// in a rollout the proxies' records change by the thousand, and each
// replica's record is rewritten after its proxies' and its clusters'
// records whenever a summary changes. Every Watch of a registry shares one
// etcd watch, which New starts and which is kept for the session's life:
// a watch opened when a waited write begins, even a replica's first,
// starts behind the writes of the rollout under way, and etcd catches such
// a watch up only every 100 ms.
// The channel receives once at once (the registry may have changed
// before), then after every change.
func (g *Registry) Watch(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	ch <- struct{}{}
	g.watchMu.Lock()
	if g.watchers == nil {
		g.watchers = map[chan struct{}]bool{}
	}
	if !g.following || ctx.Err() != nil { // New started the watch; it stops only with the session
		g.watchMu.Unlock()
		close(ch)
		return ch
	}
	g.watchers[ch] = true
	g.watchMu.Unlock()
	context.AfterFunc(ctx, func() { g.unwatch(ch) })
	return ch
}

// unwatch closes ch and stops signalling it (once).
func (g *Registry) unwatch(ch chan struct{}) {
	g.watchMu.Lock()
	defer g.watchMu.Unlock()
	if g.watchers[ch] {
		delete(g.watchers, ch)
		close(ch)
	}
}

// signalAll signals every watcher (coalesced: one pending value at most).
func (g *Registry) signalAll() {
	g.watchMu.Lock()
	defer g.watchMu.Unlock()
	for ch := range g.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// followAll follows the replicas' records for every watcher until ctx
// (the session) ends, watching again after a break; then it closes every
// watcher's channel.
func (g *Registry) followAll(ctx context.Context) {
	defer func() {
		g.watchMu.Lock()
		defer g.watchMu.Unlock()
		for ch := range g.watchers {
			delete(g.watchers, ch)
			close(ch)
		}
		g.following = false
	}()
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := g.follow(ctx, g.signalAll)
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if err == nil {
			backoff = 50 * time.Millisecond
		} else {
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// follow reads the replicas' records, signals once the watch position is
// known (changes while no watch ran are not replayed, so a reader must read
// the view again), then keeps the records it saw (Settled) and signals
// after every change of one until the watch breaks.
func (g *Registry) follow(ctx context.Context, signal func()) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	defer g.see(nil, false)
	replicas := g.replicasPrefix()
	at, err := g.kv.Client().Get(wctx, replicas, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	seen := map[string]replicaRecord{}
	for _, kv := range at.Kvs {
		var rec replicaRecord
		if json.Unmarshal(kv.Value, &rec) == nil {
			seen[string(kv.Key)] = rec
		}
	}
	g.see(seen, true)
	signal()
	for wr := range g.kv.Client().Watch(wctx, replicas, clientv3.WithPrefix(), clientv3.WithRev(at.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) == 0 {
			continue
		}
		g.watchMu.Lock()
		for _, ev := range wr.Events {
			var rec replicaRecord
			if ev.Type == clientv3.EventTypeDelete || json.Unmarshal(ev.Kv.Value, &rec) != nil {
				delete(g.seen, string(ev.Kv.Key))
				continue
			}
			g.seen[string(ev.Kv.Key)] = rec
		}
		g.watchMu.Unlock()
		signal()
	}
	return ctx.Err()
}

// see replaces the records the watch delivered (ok false: none is known).
func (g *Registry) see(seen map[string]replicaRecord, ok bool) {
	g.watchMu.Lock()
	defer g.watchMu.Unlock()
	g.seen, g.seenOK = seen, ok
}

// Settled implements rollout.Registry.
func (g *Registry) Settled(rev int64) (map[string]rollout.Replica, bool) {
	g.watchMu.Lock()
	defer g.watchMu.Unlock()
	if !g.seenOK {
		return nil, false
	}
	out := make(map[string]rollout.Replica, len(g.seen))
	all := true
	for _, rec := range g.seen {
		out[rec.ID] = rollout.Replica{ID: rec.ID, AdminAddr: rec.AdminAddr, XDSAddr: rec.XDSAddr, Revision: rec.Revision,
			Settled: rec.Settled, AppliedProxies: rec.Applied, Lease: rec.Lease}
		all = all && rec.Settled && rec.Revision >= rev
	}
	return out, all
}
