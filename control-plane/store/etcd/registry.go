package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/mesh"
)

// DefaultLeaseTTL is how long a replica's records outlive it.
const DefaultLeaseTTL = 10 * time.Second

// maxTxnOps stays under etcd's default --max-txn-ops (128).
const maxTxnOps = 100

var _ mesh.Registry = (*Registry)(nil)

// Registry implements mesh.Registry in the store's cluster, beside the
// experiments:
//
//	mesh/replicas/<replica>                    mesh.Replica as JSON
//	mesh/proxies/<replica>/<node>/<stream>     mesh.Proxy as JSON (node escaped)
//
// Every key a replica writes is attached to a lease of its own, kept alive
// by the client. When the replica dies or loses the cluster for longer than
// the lease's TTL, etcd deletes its keys, and its proxies leave the live
// set. Keys are deleted when a proxy disconnects and overwritten only when
// its record changes, so the keyspace holds one key per live proxy; etcd's
// auto-compaction (see the mesh admin docs) bounds the history of their
// changes.
type Registry struct {
	s   *Store
	id  string
	ttl time.Duration

	mu        sync.Mutex
	lease     clientv3.LeaseID
	lost      chan struct{} // closed when the lease's keep-alive ends
	stopKeep  context.CancelFunc
	published map[string]string // key → value written under lease
}

// Registry returns the mesh registry of replica id, whose records live as
// long as it renews a lease of ttl (DefaultLeaseTTL if ttl is not
// positive). Its first Publish grants the lease.
func (s *Store) Registry(id string, ttl time.Duration) *Registry {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	return &Registry{s: s, id: id, ttl: ttl, published: map[string]string{}}
}

func (g *Registry) meshPrefix() string { return g.s.key("mesh/") }

func (g *Registry) replicaKey(id string) string { return g.s.key("mesh/replicas/", url.PathEscape(id)) }

func (g *Registry) proxyKey(p mesh.Proxy) string {
	return g.s.key("mesh/proxies/", url.PathEscape(p.Replica), "/", url.PathEscape(p.NodeID), "/", fmt.Sprint(p.Stream))
}

// Publish implements mesh.Registry. It grants a new lease (and writes every
// record again) when the previous one was lost.
func (g *Registry) Publish(ctx context.Context, r mesh.Replica, proxies []mesh.Proxy) error {
	if err := g.s.check(ctx); err != nil {
		return err
	}
	r.ID = g.id
	want := map[string]string{}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode replica: %w", err)
	}
	want[g.replicaKey(g.id)] = string(b)
	for _, p := range proxies {
		p.Replica = g.id
		b, err := json.Marshal(p)
		if err != nil {
			return fmt.Errorf("encode proxy %q: %w", p.NodeID, err)
		}
		want[g.proxyKey(p)] = string(b)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	err = g.publishLocked(ctx, want)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) || (err != nil && strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error())) {
		g.dropLeaseLocked()
		err = g.publishLocked(ctx, want)
	}
	if err != nil {
		return fmt.Errorf("publish replica %q to the mesh registry: %w", g.id, err)
	}
	return nil
}

func (g *Registry) publishLocked(ctx context.Context, want map[string]string) error {
	if g.lease != 0 {
		select {
		case <-g.lost:
			g.dropLeaseLocked()
		default:
		}
	}
	if g.lease == 0 {
		if err := g.grantLocked(ctx); err != nil {
			return err
		}
	}
	var ops []clientv3.Op
	for k, v := range want {
		if g.published[k] != v {
			ops = append(ops, clientv3.OpPut(k, v, clientv3.WithLease(g.lease)))
		}
	}
	for k := range g.published {
		if _, ok := want[k]; !ok {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	for len(ops) > 0 {
		n := min(len(ops), maxTxnOps)
		octx, cancel := g.s.opContext(ctx)
		_, err := g.s.cli.Txn(octx).Then(ops[:n]...).Commit()
		err = g.s.wrap(octx, err)
		cancel()
		if err != nil {
			// What this batch wrote is unknown: write it all next time.
			clear(g.published)
			return err
		}
		for _, op := range ops[:n] {
			k := string(op.KeyBytes())
			if op.IsDelete() {
				delete(g.published, k)
			} else {
				g.published[k] = want[k]
			}
		}
		ops = ops[n:]
	}
	return nil
}

// grantLocked grants a lease and keeps it alive until it is lost or the
// store closes.
func (g *Registry) grantLocked(ctx context.Context) error {
	octx, cancel := g.s.opContext(ctx)
	defer cancel()
	lease, err := g.s.cli.Grant(octx, int64(g.ttl.Seconds()+0.5))
	if err != nil {
		return fmt.Errorf("grant lease: %w", g.s.wrap(octx, err))
	}
	kctx, stop := context.WithCancel(g.s.stopCtx)
	keep, err := g.s.cli.KeepAlive(kctx, lease.ID)
	if err != nil {
		stop()
		return fmt.Errorf("keep lease alive: %w", g.s.wrap(kctx, err))
	}
	lost := make(chan struct{})
	go func() {
		for range keep {
		}
		close(lost)
	}()
	g.lease, g.lost, g.stopKeep = lease.ID, lost, stop
	clear(g.published)
	return nil
}

func (g *Registry) dropLeaseLocked() {
	if g.stopKeep != nil {
		g.stopKeep()
	}
	g.lease, g.lost, g.stopKeep = 0, nil, nil
	clear(g.published)
}

// Lease reports the replica's lease: its ID (0 before the first Publish or
// after it was lost) and whether its keep-alive still runs.
func (g *Registry) Lease() (id int64, alive bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lease == 0 {
		return 0, false
	}
	select {
	case <-g.lost:
		return int64(g.lease), false
	default:
		return int64(g.lease), true
	}
}

// Withdraw revokes the replica's lease, so that its proxies leave the live
// set at once (a graceful shutdown) rather than when the lease expires.
func (g *Registry) Withdraw(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lease == 0 {
		return nil
	}
	octx, cancel := g.s.opContext(ctx)
	defer cancel()
	_, err := g.s.cli.Revoke(octx, g.lease)
	g.dropLeaseLocked()
	if err != nil {
		return fmt.Errorf("revoke lease of replica %q: %w", g.id, g.s.wrap(octx, err))
	}
	return nil
}

// View implements mesh.Registry: one read of the whole mesh. Proxies whose
// replica has no record are left out.
func (g *Registry) View(ctx context.Context) (mesh.View, error) {
	resp, err := g.s.read(ctx, get{key: g.meshPrefix(), prefix: true})
	if err != nil {
		return mesh.View{}, fmt.Errorf("read the mesh registry: %w", err)
	}
	v := mesh.View{Replicas: map[string]mesh.Replica{}}
	replicas, proxies := g.s.key("mesh/replicas/"), g.s.key("mesh/proxies/")
	var ps []mesh.Proxy
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, replicas):
			var r mesh.Replica
			if err := json.Unmarshal(kv.Value, &r); err != nil {
				return mesh.View{}, fmt.Errorf("read the mesh registry: decode %q: %w", k, err)
			}
			v.Replicas[r.ID] = r
		case strings.HasPrefix(k, proxies):
			var p mesh.Proxy
			if err := json.Unmarshal(kv.Value, &p); err != nil {
				return mesh.View{}, fmt.Errorf("read the mesh registry: decode %q: %w", k, err)
			}
			ps = append(ps, p)
		}
	}
	live := ps[:0]
	for _, p := range ps {
		if _, ok := v.Replicas[p.Replica]; ok {
			live = append(live, p)
		}
	}
	v.Proxies = mesh.Dedup(live)
	return v, nil
}

// Watch implements mesh.Registry.
func (g *Registry) Watch(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	if g.s.closed.Load() || ctx.Err() != nil {
		close(ch)
		return ch
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.s.stopCtx, cancel)
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	g.s.watches.Add(1)
	go func() {
		defer g.s.watches.Done()
		defer close(ch)
		defer stop()
		defer cancel()
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
	}()
	return ch
}

// follow signals once the watch position is known (changes while no watch
// ran are not replayed, so a reader must read the view again), then after
// every change until the watch breaks.
func (g *Registry) follow(ctx context.Context, signal func()) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	at, err := g.s.cli.Get(wctx, g.meshPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	signal()
	for wr := range g.s.cli.Watch(wctx, g.meshPrefix(), clientv3.WithPrefix(), clientv3.WithRev(at.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) > 0 {
			signal()
		}
	}
	return ctx.Err()
}
