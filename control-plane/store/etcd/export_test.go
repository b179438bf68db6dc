package etcd

import clientv3 "go.etcd.io/etcd/client/v3"

// SetImportStep has fn called after each committed transaction of s.Import
// that writes the history, the index or the experiments, with the number
// of keys written so far: a test's way to act in the middle of an Import.
func SetImportStep(s *Store, fn func(written int)) { s.importStep = fn }

// SetRegistryTxn has fn run each transaction of g's publishes in place of
// committing it (commit commits it): a test's way to fail one, before or
// after etcd applied it.
func SetRegistryTxn(g *Registry, fn func(ops []clientv3.Op, commit func() error) error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.txnHook = fn
}
