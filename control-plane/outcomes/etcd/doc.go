// Package etcd implements the replicas' shared outcome records
// (outcomes.Shared: the interface is the outcome aggregation's, the
// record type store.OutcomeRecord) in the etcd cluster of the experiment
// store (control-plane/store/etcd), through the session that store
// shares (store/etcd.Store.Conn), beside the experiments and the mesh
// registry (control-plane/rollout/etcd). New returns a replica's Records.
//
// Layout under the store's prefix:
//
//	outcomes/t/<key>/<replica>            a replica's totals of experiment key
//	                                      since its assignment revision
//	outcomes/t/<key>/%retired             the totals folded from replicas no
//	                                      longer live (store.RetiredReplica)
//	outcomes/m/<minute>/<key>/<replica>   a replica's tallies of one Unix minute
//	                                      (20 digits, so that keys sort by minute)
//
// No record is attached to a lease: a replica that dies leaves the figures
// it counted, which a live one folds into the retired record. Minutes come
// first in the minute records' keys so that those older than the window,
// of every experiment, are deleted with one range (Sweep). Every write is
// a compare-and-swap on the records' revisions (Commit).
//
// Read lists the live replicas from the registry's mesh/replicas/ keys
// (etcdkv.ReplicasPrefix), and Sweep compares the experiment store's
// revision (etcdkv.RevisionKey), each in the same transaction as the
// records.
//
// It imports only control-plane/store (the record type) and
// control-plane/internal/etcdkv (the shared session); not outcomes, whose
// tests run against it.
package etcd
