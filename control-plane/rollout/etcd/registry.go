package etcd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/internal/etcdkv"
	"github.com/allotmesh/allot/control-plane/rollout"
)

// DefaultLeaseTTL is how long a replica's records outlive it.
const DefaultLeaseTTL = 10 * time.Second

// maxTxnsInFlight bounds the transactions one Publish has in flight.
const maxTxnsInFlight = 8

// proxyShards is the number of groups a replica's proxies are spread over
// (by node id). One record per proxy made a rollout to 10,000 proxies
// 10,000 etcd writes, whose per-key cost in etcd (index, bbolt, watch) was
// a third of the benchmark's CPU; 64 groups of ~50 proxies each cost far
// less.
const proxyShards = 64

// maxPartBytes bounds the record of one part of a shard: a shard's
// proxies, sorted, are cut into parts of at most this many bytes (or one
// proxy, if larger; the limits on what proxies send keep a proxy's record
// under 10 KB). However many proxies hash to one shard (node ids are the
// proxies' to choose, and the hash is unkeyed), no record outgrows etcd's
// request limit; 64 KiB holds about 300 typical proxies, so a shard of a
// 10,000-proxy replica is one part, and an ACK rewrites at most 64 KiB.
const maxPartBytes = 64 << 10

// Registry implements rollout.Registry for one replica in the experiment
// store's cluster, under the mesh/ keys the package doc lays out.
type Registry struct {
	kv  *etcdkv.Conn
	id  string
	ttl time.Duration

	mu       sync.Mutex
	lease    clientv3.LeaseID
	lost     chan struct{} // closed when the lease's keep-alive ends
	stopKeep context.CancelFunc
	// What was written under the lease: the replica's record and each
	// cluster's, encoded, each shard's parts, encoded, and each proxy's
	// record; gen counts the publishes.
	replica  string
	clusters map[string]string
	parts    map[int]shardParts
	proxies  map[proxyID]*publishedProxy
	acks     []string // the parts of the acknowledgements (acks.go), encoded
	gen      uint64
	// unknown is set while what etcd holds under the replica's prefixes
	// may differ from what was written (before the first publish, after a
	// failed one, with a new lease): the next publish reads the replica's
	// keys and deletes those it does not write (reconcileLocked).
	unknown bool

	// txnHook, when set (tests), runs each transaction of a publish in
	// place of commit(): its error is the transaction's.
	txnHook func(ops []clientv3.Op, commit func() error) error

	// watchers are the channels Watch handed out, signalled by the one
	// watch of the replicas' records (followAll) while following.
	watchMu   sync.Mutex
	watchers  map[chan struct{}]bool
	following bool
	// seen are the replicas' records by key as the watch delivered them
	// (Settled), while seenOK.
	seen   map[string]replicaRecord
	seenOK bool

	// decoded holds the parts the last View decoded, by key, so that a
	// View decodes only the parts that changed since.
	viewMu  sync.Mutex
	decoded map[string]*decodedShard
	viewGen uint64
}

// proxyID identifies a proxy record: its node and stream (its key).
type proxyID struct {
	node   string
	stream int64
}

// publishedProxy is a proxy record written under the lease, in shard,
// encoded as raw, with its node key; gen is the last publish that listed
// it. The record leaves out the proxy's acknowledgement, which the parts of
// the acknowledgements hold (acked, ackedAt).
type publishedProxy struct {
	shard   int
	nodeKey string
	p       rollout.Proxy
	raw     []byte
	gen     uint64
	acked   string
	ackedAt time.Time
	// inRecord marks a proxy whose acknowledgement its record holds (its
	// stream number is shared: sharedStreams), left out of the parts.
	inRecord bool
}

// shardParts are the parts of a shard as written: each one's value and
// first proxy.
type shardParts struct {
	values []string
	first  []proxyID
}

// decodedShard is a part decoded from its value at etcd revision mod (a
// key's value at a revision never changes); gen is the last View that
// read it.
type decodedShard struct {
	mod     int64
	proxies []rollout.Proxy
	gen     uint64
}

// replicaRecord is what mesh/replicas/<replica> holds: rollout.Replica's
// fixed-size fields.
type replicaRecord struct {
	ID        string `json:"id"`
	AdminAddr string `json:"admin_addr,omitempty"`
	XDSAddr   string `json:"xds_addr,omitempty"`
	Revision  int64  `json:"revision"`
	Settled   bool   `json:"settled,omitempty"`
	Applied   int    `json:"applied_proxies,omitempty"`
	Lease     int64  `json:"lease,omitempty"`
}

// clusterRecord is what mesh/clusters/<replica>/<cluster> holds: the
// cluster's entries of rollout.Replica's Targets and Proxies (each absent when
// the replica does not list it there).
type clusterRecord struct {
	Target  *string          `json:"target,omitempty"`
	Proxies *rollout.Summary `json:"proxies,omitempty"`
}

// Registry returns the mesh registry of replica id, whose records live as
// long as it renews a lease of ttl (DefaultLeaseTTL if ttl is not
// positive). Its first Publish grants the lease.
func New(kv *etcdkv.Conn, id string, ttl time.Duration) *Registry {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	g := &Registry{kv: kv, id: id, ttl: ttl, clusters: map[string]string{}, parts: map[int]shardParts{},
		proxies: map[proxyID]*publishedProxy{}, decoded: map[string]*decodedShard{}, unknown: true}
	g.watchMu.Lock() // followAll's end, if the session is closed already, waits for this
	defer g.watchMu.Unlock()
	g.following = kv.Go(kv.Context(), g.followAll) // the one watch of the replicas' records (Watch)
	return g
}

func (g *Registry) replicasPrefix() string { return g.kv.Key(etcdkv.ReplicasPrefix) }
func (g *Registry) clustersPrefix() string { return g.kv.Key("mesh/clusters/") }
func (g *Registry) proxiesPrefix() string  { return g.kv.Key("mesh/proxies/") }
func (g *Registry) nodesPrefix() string    { return g.kv.Key("mesh/nodes/") }

func (g *Registry) replicaKey(id string) string { return g.replicasPrefix() + url.PathEscape(id) }

// ownClusters, ownShards and ownNodes are the prefixes of the replica's
// own cluster, part and node keys.
func (g *Registry) ownClusters() string { return g.clustersPrefix() + url.PathEscape(g.id) + "/" }
func (g *Registry) ownShards() string   { return g.proxiesPrefix() + url.PathEscape(g.id) + "/" }
func (g *Registry) ownNodes() string    { return g.nodesPrefix() + url.PathEscape(g.id) + "/" }

func (g *Registry) clusterKey(cluster string) string {
	return g.ownClusters() + url.PathEscape(cluster)
}

func (g *Registry) partKey(shard, part int) string {
	return g.ownShards() + strconv.Itoa(shard) + "/" + strconv.Itoa(part)
}

func (g *Registry) nodeKey(p rollout.Proxy) string {
	return g.ownNodes() + url.PathEscape(p.NodeID) + "/" + strconv.FormatInt(p.Stream, 10) + "/" + url.PathEscape(p.Cluster)
}

// shardOf is the shard of a node's records.
func shardOf(node string) int {
	h := fnv.New32a()
	h.Write([]byte(node))
	return int(h.Sum32() % proxyShards)
}

// Publish implements rollout.Registry. It grants a new lease (and writes every
// record again) when the previous one was lost.
func (g *Registry) Publish(ctx context.Context, r rollout.Replica, proxies []rollout.Proxy) error {
	if err := g.kv.Check(ctx); err != nil {
		return err
	}
	rec := replicaRecord{ID: g.id, AdminAddr: r.AdminAddr, XDSAddr: r.XDSAddr, Revision: r.Revision,
		Settled: r.Settled, Applied: r.AppliedProxies}
	clusters, err := encodeClusters(r)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	err = g.publishLocked(ctx, rec, clusters, proxies)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) || (err != nil && strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error())) {
		g.dropLeaseLocked()
		err = g.publishLocked(ctx, rec, clusters, proxies)
	}
	if err != nil {
		return fmt.Errorf("publish replica %q to the mesh registry: %w", g.id, err)
	}
	return nil
}

// encodeClusters returns the cluster records of r by cluster: one per
// cluster of its Targets or Proxies.
func encodeClusters(r rollout.Replica) (map[string]string, error) {
	recs := make(map[string]clusterRecord, len(r.Targets))
	for c, v := range r.Targets {
		recs[c] = clusterRecord{Target: &v}
	}
	for c, s := range r.Proxies {
		rec := recs[c]
		rec.Proxies = &s
		recs[c] = rec
	}
	out := make(map[string]string, len(recs))
	for c, rec := range recs {
		b, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("encode cluster %q: %w", c, err)
		}
		out[c] = string(b)
	}
	return out, nil
}

// publishLocked writes what differs from what was written under the
// lease — the parts of the shards whose proxies changed, the cluster
// records that changed, the replica's record — and deletes the records of
// the proxies and clusters that left. A proxy is encoded only when it
// differs from the record written for it, so that a publish after a few
// ACKs costs those few, not the whole fleet.
func (g *Registry) publishLocked(ctx context.Context, rec replicaRecord, clusters map[string]string, proxies []rollout.Proxy) error {
	replica, err := g.leaseLocked(ctx, rec)
	if err != nil {
		return err
	}
	// Every record is brought up to date at once: if the commit fails,
	// all of them are forgotten and written again next time.
	g.gen++
	ops, dirty, acksChanged, err := g.proxyOpsLocked(proxies)
	if err != nil {
		return err
	}
	clusterOps := g.clusterOpsLocked(clusters)
	// After a failed commit, the parts etcd holds are read back as the old
	// parts of their shards (reconcileLocked): each shard goes from what
	// etcd holds to what is published in partOrder's order, its stale
	// parts deleted in its own group after the puts that take their
	// proxies, so that no reader misses a proxy meanwhile.
	var stale []clientv3.Op
	heldAcks := 0
	if g.unknown {
		var held map[int]shardParts
		if stale, held, heldAcks, err = g.reconcileLocked(ctx); err != nil {
			g.forgetLocked()
			return err
		}
		g.parts = held
		for shard := range held {
			dirty[shard] = true
		}
		acksChanged = true
	}
	if acksChanged {
		acksOps, err := g.acksOpsLocked(heldAcks)
		if err != nil {
			g.forgetLocked()
			return err
		}
		ops = append(ops, acksOps...)
	}
	// A part's value is its proxies' encodings, each made when the proxy
	// changed: after a rollout's first ACKs every shard is dirty, and each
	// later publish would encode them all again.
	shards := map[int][]*publishedProxy{}
	for _, e := range g.proxies {
		if dirty[e.shard] {
			shards[e.shard] = append(shards[e.shard], e)
		}
	}
	groups := make([][]clientv3.Op, 0, len(ops)+len(stale)+len(dirty))
	for _, op := range slices.Concat(ops, stale) {
		groups = append(groups, []clientv3.Op{op})
	}
	for shard := range dirty {
		es := shards[shard]
		slices.SortFunc(es, func(a, b *publishedProxy) int {
			return cmp.Or(cmp.Compare(a.p.NodeID, b.p.NodeID), cmp.Compare(a.p.Stream, b.p.Stream))
		})
		old, now := g.parts[shard], cutParts(es)
		if len(now.values) == 0 {
			delete(g.parts, shard)
		} else {
			g.parts[shard] = now
		}
		if ops := g.partOps(shard, old, now); len(ops) > 0 {
			groups = append(groups, ops)
		}
	}
	// The cluster records follow the proxies' records, and the replica's
	// record follows them: a reader that sees a summary of the proxies
	// sees their records too, and Watch signals once all are written.
	var last [][]clientv3.Op
	if g.replica != replica || len(clusterOps) > 0 {
		last = append(last, []clientv3.Op{clientv3.OpPut(g.replicaKey(g.id), replica, clientv3.WithLease(g.lease))})
	}
	clusterGroups := make([][]clientv3.Op, len(clusterOps))
	for i, op := range clusterOps {
		clusterGroups[i] = []clientv3.Op{op}
	}
	if err := g.commit(ctx, groups, clusterGroups, last); err != nil {
		g.forgetLocked() // what was written is unknown
		return err
	}
	g.replica = replica
	g.unknown = false
	return nil
}

// leaseLocked makes sure the replica holds a live lease (granting a new one
// if it lost it) and returns its record encoded, naming that lease: readers
// take only the records written under it (View), and count a replica whose
// lease changed (it restarted under the same ID) as gone (rollout.Node).
func (g *Registry) leaseLocked(ctx context.Context, rec replicaRecord) (string, error) {
	if g.lease != 0 {
		select {
		case <-g.lost:
			g.dropLeaseLocked()
		default:
		}
	}
	if g.lease == 0 {
		if err := g.grantLocked(ctx); err != nil {
			return "", err
		}
	}
	rec.Lease = int64(g.lease)
	b, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("encode replica: %w", err)
	}
	return string(b), nil
}

// proxyOpsLocked brings the proxy records up to date with proxies for
// publish g.gen: it returns the writes of the node keys of the proxies
// that came, moved or left, and the shards whose parts changed. It
// forgets what was written if a proxy cannot be encoded.
func (g *Registry) proxyOpsLocked(proxies []rollout.Proxy) ([]clientv3.Op, map[int]bool, bool, error) {
	var ops []clientv3.Op
	dirty := map[int]bool{}
	acks := false // an acknowledgement changed, or a proxy came or left
	shared := sharedStreams(proxies)
	for _, p := range proxies {
		p.Replica = g.id
		acked, ackedAt := p.Acked, p.AckedAt
		if !shared[p.Stream] { // the parts hold it (acks.go)
			p.Acked, p.AckedAt = "", time.Time{}
		}
		id := proxyID{p.NodeID, p.Stream}
		e := g.proxies[id]
		if e == nil || e.acked != acked || !e.ackedAt.Equal(ackedAt) {
			acks = true
		}
		switch {
		case e == nil:
			e = &publishedProxy{shard: shardOf(p.NodeID), nodeKey: g.nodeKey(p)}
			g.proxies[id] = e
			ops = append(ops, clientv3.OpPut(e.nodeKey, "", clientv3.WithLease(g.lease)))
		case sameProxy(e.p, p):
			if e.inRecord != shared[p.Stream] {
				acks = true
			}
			e.gen, e.acked, e.ackedAt, e.inRecord = g.gen, acked, ackedAt, shared[p.Stream]
			continue
		case e.p.Cluster != p.Cluster: // the stream's node moved to another cluster
			ops = append(ops, clientv3.OpDelete(e.nodeKey))
			e.nodeKey = g.nodeKey(p)
			ops = append(ops, clientv3.OpPut(e.nodeKey, "", clientv3.WithLease(g.lease)))
		}
		if e.inRecord != shared[p.Stream] {
			acks = true
		}
		b, err := json.Marshal(p)
		if err != nil {
			g.forgetLocked()
			return nil, nil, false, fmt.Errorf("encode proxy %q: %w", p.NodeID, err)
		}
		e.p, e.raw, e.gen, e.acked, e.ackedAt, e.inRecord = p, b, g.gen, acked, ackedAt, shared[p.Stream]
		dirty[e.shard] = true
	}
	for id, e := range g.proxies {
		if e.gen != g.gen {
			ops = append(ops, clientv3.OpDelete(e.nodeKey))
			dirty[e.shard] = true
			delete(g.proxies, id)
			acks = true
		}
	}
	return ops, dirty, acks, nil
}

// acksOpsLocked returns the writes that bring the parts of the
// acknowledgements up to date (held of them in etcd, if more than were
// written): the parts whose value changed are put, those beyond the new
// count deleted.
func (g *Registry) acksOpsLocked(held int) ([]clientv3.Op, error) {
	acks := make([]ack, 0, len(g.proxies))
	for _, e := range g.proxies {
		if !e.inRecord {
			acks = append(acks, ack{stream: e.p.Stream, version: e.acked, at: e.ackedAt})
		}
	}
	slices.SortFunc(acks, func(a, b ack) int { return cmp.Compare(a.stream, b.stream) })
	parts, err := cutAcks(acks)
	if err != nil {
		return nil, err
	}
	var ops []clientv3.Op
	for i, v := range parts {
		if i >= len(g.acks) || g.acks[i] != v {
			ops = append(ops, clientv3.OpPut(g.acksKey(i), v, clientv3.WithLease(g.lease)))
		}
	}
	for i := len(parts); i < max(held, len(g.acks)); i++ {
		ops = append(ops, clientv3.OpDelete(g.acksKey(i)))
	}
	g.acks = parts
	return ops, nil
}

// clusterOpsLocked brings the cluster records up to date with clusters: it
// returns the writes of those that changed and the deletes of those that
// left.
func (g *Registry) clusterOpsLocked(clusters map[string]string) []clientv3.Op {
	var clusterOps []clientv3.Op
	for c, rec := range clusters {
		if g.clusters[c] != rec {
			clusterOps = append(clusterOps, clientv3.OpPut(g.clusterKey(c), rec, clientv3.WithLease(g.lease)))
			g.clusters[c] = rec
		}
	}
	for c := range g.clusters {
		if _, ok := clusters[c]; !ok {
			clusterOps = append(clusterOps, clientv3.OpDelete(g.clusterKey(c)))
			delete(g.clusters, c)
		}
	}
	return clusterOps
}

// cutParts returns the parts of a shard whose proxies are es (sorted):
// JSON arrays of their records, each at most maxPartBytes unless it holds
// one proxy only.
func cutParts(es []*publishedProxy) shardParts {
	var sp shardParts
	for len(es) > 0 {
		n, size := 0, 1
		for n < len(es) && (n == 0 || size+len(es[n].raw)+1 <= maxPartBytes) {
			size += len(es[n].raw) + 1
			n++
		}
		var b strings.Builder
		b.Grow(size)
		b.WriteByte('[')
		for i, e := range es[:n] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(e.raw)
		}
		b.WriteByte(']')
		sp.values = append(sp.values, b.String())
		sp.first = append(sp.first, proxyID{es[0].p.NodeID, es[0].p.Stream})
		es = es[n:]
	}
	return sp
}

// partOps returns the writes that turn a shard's parts from old into now:
// the parts whose value changed are put, those beyond now's deleted. They
// commit in one transaction when they fit; when they do not (a shard past
// etcdkv.MaxTxnBytes), in the order partOrder gives, so that no reader ever
// misses a proxy that moved from one part to another: a waited write
// would take it for disconnected, and stop waiting for it.
func (g *Registry) partOps(shard int, old, now shardParts) []clientv3.Op {
	var ops []clientv3.Op
	for _, i := range partOrder(old.first, now.first) {
		switch {
		case i >= len(now.values):
			ops = append(ops, clientv3.OpDelete(g.partKey(shard, i)))
		case i >= len(old.values) || old.values[i] != now.values[i]:
			ops = append(ops, clientv3.OpPut(g.partKey(shard, i), now.values[i], clientv3.WithLease(g.lease)))
		}
	}
	return ops
}

// partOrder orders the parts of a shard, given the first proxy of each
// part before (old) and after (now) a change, so that a proxy's new part
// comes before its old one. Parts are cut from the proxies in order, so a
// proxy moves only across the boundaries between its old and its new part,
// each of which moved the same way: the start of part k+1 moving down
// (to a smaller proxy, or from none) moves proxies from part k into k+1,
// which goes first; moving up, part k goes first. Each boundary orders
// two neighbours only, so the order exists.
func partOrder(old, now []proxyID) []int {
	n := max(len(old), len(now))
	// start is the first proxy of part k, or none (nil: after every proxy).
	start := func(ids []proxyID, k int) *proxyID {
		if k < len(ids) {
			return &ids[k]
		}
		return nil
	}
	compare := func(a, b *proxyID) int {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return 1
		case b == nil:
			return -1
		}
		return cmp.Or(cmp.Compare(a.node, b.node), cmp.Compare(a.stream, b.stream))
	}
	// Kahn's algorithm on the path 0 … n-1, each edge oriented by its
	// boundary.
	after := make([][]int, n)
	waits := make([]int, n)
	for k := 0; k+1 < n; k++ {
		switch c := compare(start(now, k+1), start(old, k+1)); {
		case c < 0:
			after[k+1], waits[k] = append(after[k+1], k), waits[k]+1
		case c > 0:
			after[k], waits[k+1] = append(after[k], k+1), waits[k+1]+1
		}
	}
	order := make([]int, 0, n)
	for k := range n {
		if waits[k] == 0 {
			order = append(order, k)
		}
	}
	for i := 0; i < len(order); i++ {
		for _, next := range after[order[i]] {
			if waits[next]--; waits[next] == 0 {
				order = append(order, next)
			}
		}
	}
	return order
}

// forgetLocked forgets what was written, so that the next Publish writes
// every record and reconciles the replica's keys (the records of proxies
// that left meanwhile are still in etcd, under a lease that lives on).
func (g *Registry) forgetLocked() {
	g.replica = ""
	clear(g.clusters)
	clear(g.parts)
	clear(g.proxies)
	g.acks = nil
	g.unknown = true
}

// reconcileLocked reads the replica's keys in etcd, to bring them to what
// the publish under way writes, after a failed commit (its outcome
// unknown) or under an earlier lease, and only when g.unknown: a publish
// after a successful one knows what etcd holds. It returns the deletions
// of the node keys and cluster records the publish does not write (and of
// any key under the replica's shards that is not a part), and the parts
// etcd holds, by shard, for the publish to turn into its own (partOps):
// a part's value counts as written only if it is under the current lease
// (else it is put again, so that it lives as long as the lease). It reads
// node keys and cluster keys alone (about 100 bytes per proxy) and the
// parts whole (a shard's parts hold its proxies' records: at most what the
// publish writes). g.proxies and g.clusters must hold this publish's
// records; as they were forgotten before, the publish puts every node key
// and cluster record it keeps, and deletes none, so that no key is both
// deleted and written.
func (g *Registry) reconcileLocked(ctx context.Context) ([]clientv3.Op, map[int]shardParts, int, error) {
	// A linearizable read, never the serializable fallback of etcdkv.Conn.Read:
	// a member behind the cluster would miss the keys to delete.
	octx, cancel := g.kv.OpContext(ctx)
	defer cancel()
	reads := []clientv3.Op{
		etcdkv.Get{Key: g.ownNodes(), Prefix: true, KeysOnly: true}.Op(false),
		etcdkv.Get{Key: g.ownClusters(), Prefix: true, KeysOnly: true}.Op(false),
		etcdkv.Get{Key: g.ownShards(), Prefix: true}.Op(false),
		etcdkv.Get{Key: g.ownAcks(), Prefix: true, KeysOnly: true}.Op(false),
	}
	resp, err := g.kv.Client().Txn(octx).Then(reads...).Commit()
	if err = g.kv.Wrap(octx, err); err != nil {
		return nil, nil, 0, fmt.Errorf("read the replica's keys to reconcile them: %w", err)
	}
	keep := make(map[string]bool, len(g.proxies)+len(g.clusters))
	for _, e := range g.proxies {
		keep[e.nodeKey] = true
	}
	for c := range g.clusters {
		keep[g.clusterKey(c)] = true
	}
	var ops []clientv3.Op
	for _, r := range resp.Responses[:2] {
		for _, kv := range r.GetResponseRange().GetKvs() {
			if !keep[string(kv.Key)] {
				ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			}
		}
	}
	// held[shard][part] is the part's value ("" when it must be put again)
	// and first proxy; ok marks the parts etcd holds.
	type heldPart struct {
		value string
		first proxyID
		ok    bool
	}
	held := map[int][]heldPart{}
	kvs := resp.Responses[2].GetResponseRange().GetKvs()
	for _, kv := range kvs {
		// A replica's parts are numbered from 0 in each shard: a number
		// past the count of keys read is not one of them.
		shard, part, ok := g.parsePartKey(string(kv.Key))
		if !ok || part >= len(kvs) {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			continue
		}
		if len(held[shard]) <= part {
			held[shard] = append(held[shard], make([]heldPart, part+1-len(held[shard]))...)
		}
		var first []struct {
			NodeID string `json:"node_id"`
			Stream int64  `json:"stream"`
		}
		if err := json.Unmarshal(kv.Value, &first); err != nil || len(first) == 0 {
			continue // holds no proxy: an empty part
		}
		hp := heldPart{first: proxyID{first[0].NodeID, first[0].Stream}, ok: true}
		if clientv3.LeaseID(kv.Lease) == g.lease {
			hp.value = string(kv.Value)
		}
		held[shard][part] = hp
	}
	parts := make(map[int]shardParts, len(held))
	for shard, hps := range held {
		// Trailing parts that hold no proxy hide none: deleted at once.
		for len(hps) > 0 && !hps[len(hps)-1].ok {
			ops = append(ops, clientv3.OpDelete(g.partKey(shard, len(hps)-1)))
			hps = hps[:len(hps)-1]
		}
		// A part etcd lacks, or that holds no proxy, is an empty one: it
		// starts where the next one does.
		for k := len(hps) - 2; k >= 0; k-- {
			if !hps[k].ok {
				hps[k].first = hps[k+1].first
			}
		}
		var sp shardParts
		for _, hp := range hps {
			sp.values = append(sp.values, hp.value)
			sp.first = append(sp.first, hp.first)
		}
		if len(hps) > 0 {
			parts[shard] = sp
		}
	}
	// The parts of the acknowledgements are all written again; those past
	// the publish's count are deleted (acksOpsLocked), and any other key
	// under the replica's prefix now.
	heldAcks := 0
	for _, kv := range resp.Responses[3].GetResponseRange().GetKvs() {
		n, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), g.ownAcks()))
		if err != nil || n < 0 || g.acksKey(n) != string(kv.Key) {
			ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			continue
		}
		heldAcks = max(heldAcks, n+1)
	}
	return ops, parts, heldAcks, nil
}

// parsePartKey returns the shard and part of one of the replica's part
// keys (partKey).
func (g *Registry) parsePartKey(key string) (shard, part int, ok bool) {
	rest, ok := strings.CutPrefix(key, g.ownShards())
	if !ok {
		return 0, 0, false
	}
	s, p, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	shard, err1 := strconv.Atoi(s)
	part, err2 := strconv.Atoi(p)
	if err1 != nil || err2 != nil || shard < 0 || shard >= proxyShards || part < 0 || g.partKey(shard, part) != key {
		return 0, 0, false
	}
	return shard, part, true
}

// sameProxy reports whether a and b are the same record, which encode
// alike: every field equal, the rejection compared by value.
func sameProxy(a, b rollout.Proxy) bool {
	ra, rb := a.Rejected, b.Rejected
	a.Rejected, b.Rejected = nil, nil
	return a == b && (ra == rb || ra != nil && rb != nil && *ra == *rb)
}
