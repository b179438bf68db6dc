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
		etcdkv.Get{Key: g.proxiesPrefix(), Prefix: true})
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
			if _, ok := v.Replicas[p.Replica]; ok {
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
		etcdkv.Get{Key: g.nodesPrefix(), Prefix: true, KeysOnly: true})
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
		if _, live := ro.Replicas[r]; live && ro.Nodes[key].Replica < r { // a node on two replicas (it moved): either will do
			ro.Nodes[key] = rollout.Node{Replica: r}
		}
	}
	return ro, nil
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
// records whenever a summary changes.
func (g *Registry) Watch(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	if !g.kv.Go(ctx, func(wctx context.Context) {
		defer close(ch)
		backoff := 50 * time.Millisecond
		for wctx.Err() == nil {
			err := g.follow(wctx, signal)
			if wctx.Err() != nil {
				return
			}
			select {
			case <-wctx.Done():
				return
			case <-time.After(backoff):
			}
			if err == nil {
				backoff = 50 * time.Millisecond
			} else {
				backoff = min(2*backoff, 2*time.Second)
			}
		}
	}) {
		close(ch)
	}
	return ch
}

// follow signals once the watch position is known (changes while no watch
// ran are not replayed, so a reader must read the view again), then after
// every change of a replica's record until the watch breaks.
func (g *Registry) follow(ctx context.Context, signal func()) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	replicas := g.replicasPrefix()
	at, err := g.kv.Client().Get(wctx, replicas, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	signal()
	for wr := range g.kv.Client().Watch(wctx, replicas, clientv3.WithPrefix(), clientv3.WithRev(at.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			signal()
		}
	}
	return ctx.Err()
}
