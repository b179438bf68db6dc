package etcd

import clientv3 "go.etcd.io/etcd/client/v3"

// SetRegistryTxn has fn run each transaction of g's publishes in place of
// committing it (commit commits it): a test's way to fail one, before or
// after etcd applied it.
func SetRegistryTxn(g *Registry, fn func(ops []clientv3.Op, commit func() error) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.txnHook = fn
}
