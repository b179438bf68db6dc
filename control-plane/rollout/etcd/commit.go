package etcd

import (
	"context"
	"fmt"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/internal/etcdkv"
)

// commit runs stages of groups of operations one stage after the other.
// A group that fits in one transaction (etcdkv.MaxTxnOps operations,
// etcdkv.MaxTxnBytes of keys and values) commits in one, packed with
// others; a larger group
// commits in transactions one after the other, in its order. A stage's
// transactions run up to maxTxnsInFlight at once (etcd commits concurrent
// proposals together) and all commit before any of the next stage's,
// which hold other keys — unless the next stage fits in one transaction
// with one of this stage's: then they commit together, atomically, after
// the rest of this stage (so a publish after a few ACKs is one
// transaction).
func (g *Registry) commit(ctx context.Context, stages ...[][]clientv3.Op) error {
	var steps [][][][]clientv3.Op // steps of chains of transactions: a step's chains run at once, after the previous step
	for _, groups := range stages {
		chains := pack(groups)
		if len(chains) == 0 {
			continue
		}
		if n := len(steps); n > 0 && len(chains) == 1 && len(chains[0]) == 1 {
			prev := steps[n-1]
			if i := slices.IndexFunc(prev, func(c [][]clientv3.Op) bool { return len(c) == 1 }); i >= 0 {
				one := prev[i][0]
				if merged := append(one[:len(one):len(one)], chains[0][0]...); len(batch(merged)) == 1 {
					if len(prev) == 1 {
						steps[n-1] = [][][]clientv3.Op{{merged}}
					} else {
						steps[n-1] = slices.Delete(slices.Clone(prev), i, i+1)
						steps = append(steps, [][][]clientv3.Op{{merged}})
					}
					continue
				}
			}
		}
		steps = append(steps, chains)
	}
	txn := func(batch []clientv3.Op) error {
		commit := func() error {
			octx, cancel := g.kv.OpContext(ctx)
			defer cancel()
			_, err := g.kv.Client().Txn(octx).Then(batch...).Commit()
			return g.kv.Wrap(octx, err)
		}
		if g.txnHook != nil {
			return g.txnHook(batch, commit)
		}
		return commit()
	}
	chain := func(c [][]clientv3.Op) error {
		for _, b := range c {
			if err := txn(b); err != nil {
				return err
			}
		}
		return nil
	}
	for _, step := range steps {
		if len(step) == 1 {
			if err := chain(step[0]); err != nil {
				return err
			}
			continue
		}
		var (
			wg   sync.WaitGroup
			sem  = make(chan struct{}, maxTxnsInFlight)
			mu   sync.Mutex
			errs []error
		)
		for _, c := range step {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := chain(c); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(errs) > 0 {
			return errs[0]
		}
	}
	return nil
}

// pack returns the transactions of groups as chains, each committed in
// order: the groups that fit in one transaction packed together, each
// chain one transaction, and each larger group a chain of its own.
func pack(groups [][]clientv3.Op) [][][]clientv3.Op {
	var chains [][][]clientv3.Op
	var cur []clientv3.Op
	size := 0
	for _, grp := range groups {
		if bs := batch(grp); len(bs) > 1 {
			chains = append(chains, bs)
			continue
		}
		n := 0
		for _, op := range grp {
			n += len(op.KeyBytes()) + len(op.ValueBytes())
		}
		if len(cur) > 0 && (len(cur)+len(grp) > etcdkv.MaxTxnOps || size+n > etcdkv.MaxTxnBytes) {
			chains = append(chains, [][]clientv3.Op{cur})
			cur, size = nil, 0
		}
		cur, size = append(cur, grp...), size+n
	}
	if len(cur) > 0 {
		chains = append(chains, [][]clientv3.Op{cur})
	}
	return chains
}

// batch cuts ops into transactions of at most etcdkv.MaxTxnOps operations and
// etcdkv.MaxTxnBytes of keys and values (or one operation, if larger), in order.
func batch(ops []clientv3.Op) [][]clientv3.Op {
	var batches [][]clientv3.Op
	for len(ops) > 0 {
		n, size := 0, 0
		for n < len(ops) && n < etcdkv.MaxTxnOps {
			size += len(ops[n].KeyBytes()) + len(ops[n].ValueBytes())
			if n > 0 && size > etcdkv.MaxTxnBytes {
				break
			}
			n++
		}
		batches = append(batches, ops[:n])
		ops = ops[n:]
	}
	return batches
}

// grantLocked grants a lease and keeps it alive until it is lost or the
// store closes.
func (g *Registry) grantLocked(ctx context.Context) error {
	octx, cancel := g.kv.OpContext(ctx)
	defer cancel()
	lease, err := g.kv.Client().Grant(octx, int64(g.ttl.Seconds()+0.5))
	if err != nil {
		return fmt.Errorf("grant lease: %w", g.kv.Wrap(octx, err))
	}
	kctx, stop := context.WithCancel(g.kv.Context())
	keep, err := g.kv.Client().KeepAlive(kctx, lease.ID)
	if err != nil {
		stop()
		return fmt.Errorf("keep lease alive: %w", g.kv.Wrap(kctx, err))
	}
	lost := make(chan struct{})
	go func() {
		for range keep {
		}
		close(lost)
	}()
	g.lease, g.lost, g.stopKeep = lease.ID, lost, stop
	g.forgetLocked()
	return nil
}

func (g *Registry) dropLeaseLocked() {
	if g.stopKeep != nil {
		g.stopKeep()
	}
	g.lease, g.lost, g.stopKeep = 0, nil, nil
	g.forgetLocked()
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
	octx, cancel := g.kv.OpContext(ctx)
	defer cancel()
	_, err := g.kv.Client().Revoke(octx, g.lease)
	g.dropLeaseLocked()
	if err != nil {
		return fmt.Errorf("revoke lease of replica %q: %w", g.id, g.kv.Wrap(octx, err))
	}
	return nil
}
