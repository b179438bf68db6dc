// Package etcd implements rollout.Registry, the mesh registry every allotd
// replica publishes its proxies to and reads the others' from, in the etcd
// cluster of the experiment store (control-plane/store/etcd), through the
// session that store shares (store/etcd.Store.Conn). New returns a
// replica's Registry.
//
// Layout under the store's prefix:
//
//	mesh/replicas/<replica>               the replica's fixed-size fields (rollout.Replica without
//	                                      Targets and Proxies: its revision, and whether all its
//	                                      proxies settled on what it serves, with their count) as JSON
//	mesh/clusters/<replica>/<cluster>     one per cluster the replica lists (cluster escaped):
//	                                      its target version and its proxies' rollout.Summary
//	mesh/proxies/<replica>/<shard>/<part> the replica's proxies whose node id hashes to shard
//	                                      (proxyShards of them), sorted by node id and stream,
//	                                      cut into parts of at most maxPartBytes: a JSON
//	                                      array of rollout.Proxy each, without its
//	                                      acknowledgement
//	mesh/acks/<replica>/<part>            the replica's proxies' acknowledgements (version and
//	                                      time), by stream, maxAcksPerPart to a part (acks.go)
//	mesh/nodes/<replica>/<node>/<stream>/<cluster>
//	                                      empty, one per proxy (node and cluster escaped):
//	                                      what Roster reads
//
// No record's size depends on the number of proxies or clusters: what
// grows is split into keys of bounded size, so no count of proxies,
// however they hash, nor of clusters, makes a publish exceed etcd's
// request limit. A publish writes proxies' records first, then the
// cluster records, then the replica's record (which it rewrites whenever
// a cluster record changed, so that Watch, which follows the replicas'
// records, sees every change of a summary): a reader that sees a
// summary sees the records of the proxies it counts, and one that sees
// the replica's revision sees the targets built for it. Readers read
// every prefix in one transaction (View, Roster, Replicas).
//
// Every key a replica writes is attached to a lease of its own, kept alive
// by the client. When the replica dies or loses the cluster for longer than
// the lease's TTL, etcd deletes its keys, and its proxies leave the live
// set. A part is rewritten only when its proxies changed, a cluster
// record only when its target or summary did, a node key only when its
// proxy connects or disconnects; after a failed publish (or with a new
// lease) the next one also deletes whatever of the replica's keys it does
// not write (reconcileLocked); etcd's auto-compaction (see the mesh admin
// docs) bounds the history of their changes.
//
// A shard's parts that do not fit one transaction commit in an order that
// never hides a moved proxy from a reader (partOps). A proxy's record
// changes only when it connects, disconnects, is left unserved or rejects a
// version; its acknowledgements, which a rollout changes for every proxy,
// go to the few acks parts (a proxy whose stream number another of the
// replica's proxies shares keeps its acknowledgement in its record), so a
// rollout rewrites about 20 bytes a proxy rather than every shard. The acks
// parts are written with the proxies' records, before the cluster and
// replica records.
//
// A replica of a build before the acks parts reads this layout's proxies as
// acknowledging nothing: in a rolling upgrade its waited writes still settle
// from the summaries and node keys, but its status and its read of every
// proxy show the new replicas' proxies pending.
//
// Every Watch of a Registry shares one etcd watch of the replicas' records,
// opened by New and kept for the session's life (a watch opened by a
// waited write, even a replica's first, starts behind the rollout's
// writes, and etcd catches such a watch up only every 100 ms); it keeps
// the records it delivers, from which Settled answers without a read.
//
// Readers also take the layout without cluster records and parts
// (clusters inline in the replica's record, a shard in one record); a
// replica that writes that layout reads this one as listing no clusters,
// so the two cannot share a mesh (its waited writes would not wait for
// the proxies of a replica writing this one).
//
// It imports only control-plane/rollout (the interface and its types) and
// control-plane/internal/etcdkv (the shared session).
package etcd
