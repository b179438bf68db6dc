package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/store"
)

// Bounds of the outcome records (control-plane/README.md, "Outcomes across
// replicas").
const (
	// MaxOutcomeBytes bounds one outcome record's value: the largest
	// (64 variations, each 6 counts and 20 latency buckets of up to 20
	// digits) is about 35 KB. Commit refuses a larger one; Read reports
	// one as an error.
	MaxOutcomeBytes = maxPartBytes
	// MaxOutcomeReplicas bounds the records of one experiment that Read
	// reads in each range (its totals; each minute's records): the live
	// replicas, the dead ones not folded yet and the retired record. Read
	// fails when there are more, naming the experiment.
	MaxOutcomeReplicas = 64
	// maxOutcomeMinutes bounds the minutes one Read covers (each minute is
	// one range of the read's transaction, under etcd's --max-txn-ops).
	maxOutcomeMinutes = 61
	// maxSweepKeys bounds the keys (keys only) one request of Sweep reads,
	// looking for the experiments that have total records.
	maxSweepKeys = 1000
)

// retiredSegment is the key segment of store.RetiredReplica's records: an
// escaped replica id never holds "%" followed by "r".
const retiredSegment = "%retired"

// Outcomes keeps the replicas' outcome records (outcomes.Shared) in the
// store's cluster, beside the experiments and the mesh registry:
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
type Outcomes struct {
	g *Registry
}

// Outcomes returns the outcome records of the replica of g's id; the
// replicas g's registry lists are the live ones.
func (g *Registry) Outcomes() *Outcomes { return &Outcomes{g: g} }

// Replica is the id of the replica whose records this writes.
func (o *Outcomes) Replica() string { return o.g.id }

func (o *Outcomes) totalsRoot() string             { return o.g.s.key("outcomes/t/") }
func (o *Outcomes) minutesRoot() string            { return o.g.s.key("outcomes/m/") }
func (o *Outcomes) totalsPrefix(key string) string { return o.totalsRoot() + key + "/" }
func (o *Outcomes) minutePrefix(m int64, key string) string {
	return o.minutesRoot() + revString(m) + "/" + key + "/"
}

func replicaSegment(id string) string {
	if id == store.RetiredReplica {
		return retiredSegment
	}
	return url.PathEscape(id)
}

// recordKey is r's key.
func (o *Outcomes) recordKey(r store.OutcomeRecord) string {
	if r.Minute == 0 {
		return o.totalsPrefix(r.Key) + replicaSegment(r.Replica)
	}
	return o.minutePrefix(r.Minute, r.Key) + replicaSegment(r.Replica)
}

// Read returns, in one read, experiment key's total records, its minute
// records of minutes from to to (Unix minutes, at most 61 of them), and
// the ids of the live replicas (those the mesh registry lists).
func (o *Outcomes) Read(ctx context.Context, key string, from, to int64) ([]store.OutcomeRecord, map[string]bool, error) {
	if to < from || to-from >= maxOutcomeMinutes {
		return nil, nil, fmt.Errorf("read outcomes of %q: minutes %d to %d: at most %d", key, from, to, maxOutcomeMinutes)
	}
	gets := []get{{key: o.g.replicasPrefix(), prefix: true, keysOnly: true},
		{key: o.totalsPrefix(key), prefix: true, limit: MaxOutcomeReplicas + 1}}
	for m := from; m <= to; m++ {
		gets = append(gets, get{key: o.minutePrefix(m, key), prefix: true, limit: MaxOutcomeReplicas + 1})
	}
	resp, err := o.g.s.read(ctx, gets...)
	if err != nil {
		return nil, nil, fmt.Errorf("read outcomes of %q: %w", key, err)
	}
	live := map[string]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		if id, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), o.g.replicasPrefix())); err == nil {
			live[id] = true
		}
	}
	var recs []store.OutcomeRecord
	for i, r := range resp.Responses[1:] {
		kvs := r.GetResponseRange().GetKvs()
		if len(kvs) > MaxOutcomeReplicas {
			return nil, nil, fmt.Errorf("read outcomes of %q: more than %d records of one minute or of its totals", key, MaxOutcomeReplicas)
		}
		prefix, minute := o.totalsPrefix(key), int64(0)
		if i > 0 {
			minute = from + int64(i-1)
			prefix = o.minutePrefix(minute, key)
		}
		for _, kv := range kvs {
			seg := strings.TrimPrefix(string(kv.Key), prefix)
			id := store.RetiredReplica
			if seg != retiredSegment {
				if id, err = url.PathUnescape(seg); err != nil || id == store.RetiredReplica {
					return nil, nil, fmt.Errorf("read outcomes of %q: key %q: not a replica's", key, kv.Key)
				}
			}
			if len(kv.Value) > MaxOutcomeBytes {
				return nil, nil, fmt.Errorf("read outcomes of %q: record %q: %d bytes, at most %d", key, kv.Key, len(kv.Value), MaxOutcomeBytes)
			}
			recs = append(recs, store.OutcomeRecord{Key: key, Replica: id, Minute: minute, Value: kv.Value, Mod: kv.ModRevision})
		}
	}
	return recs, live, nil
}

// MaxOutcomeCommit bounds the records of one Commit (each is a comparison
// and a write: under etcd's default --max-txn-ops, 128).
const MaxOutcomeCommit = maxTxnOps / 2

// Commit writes recs (a nil Value deletes the record) in one transaction
// if each record's revision is still its Mod (0: absent), and returns the
// revision the written records have; ok is false, with nothing written,
// if one is not. At most MaxOutcomeCommit records, each value at most
// MaxOutcomeBytes, and 1 MiB of keys and values in all (under etcd's
// default --max-request-bytes).
func (o *Outcomes) Commit(ctx context.Context, recs []store.OutcomeRecord) (rev int64, ok bool, err error) {
	if len(recs) > MaxOutcomeCommit {
		return 0, false, fmt.Errorf("commit outcomes: %d records, at most %d", len(recs), MaxOutcomeCommit)
	}
	if err := o.g.s.check(ctx); err != nil {
		return 0, false, err
	}
	conds := make([]clientv3.Cmp, len(recs))
	ops := make([]clientv3.Op, len(recs))
	size := 0
	for i, r := range recs {
		k := o.recordKey(r)
		if len(r.Value) > MaxOutcomeBytes {
			return 0, false, fmt.Errorf("commit outcomes: record %q: %d bytes, at most %d", k, len(r.Value), MaxOutcomeBytes)
		}
		if size += len(k) + len(r.Value); size > maxTxnBytes {
			return 0, false, fmt.Errorf("commit outcomes: more than %d bytes of keys and values", maxTxnBytes)
		}
		conds[i] = clientv3.Compare(clientv3.ModRevision(k), "=", r.Mod)
		ops[i] = clientv3.OpDelete(k)
		if r.Value != nil {
			ops[i] = clientv3.OpPut(k, string(r.Value))
		}
	}
	octx, cancel := o.g.s.opContext(ctx)
	defer cancel()
	resp, err := o.g.s.cli.Txn(octx).If(conds...).Then(ops...).Commit()
	if err = o.g.s.wrap(octx, err); err != nil {
		return 0, false, fmt.Errorf("commit outcomes: %w", err)
	}
	return resp.Header.Revision, resp.Succeeded, nil
}

// Sweep deletes the minute records of every experiment older than minute
// before, and, if the store is still at revision rev, every record of the
// experiments not in keep (deleted, or no longer observed) — in one
// transaction, which deletes at most maxTxnOps-1 experiments' records (the
// rest at the next sweep). It reads the experiments with total records
// in requests of at most maxSweepKeys keys, from each on to the next.
func (o *Outcomes) Sweep(ctx context.Context, keep map[string]bool, rev int64, before int64) error {
	gone := map[string]bool{}
	for start := o.totalsRoot(); start != "" && len(gone) < maxTxnOps-1; {
		resp, err := o.g.s.read(ctx, get{key: start, end: clientv3.GetPrefixRangeEnd(o.totalsRoot()), keysOnly: true, limit: maxSweepKeys})
		if err != nil {
			return fmt.Errorf("sweep outcomes: %w", err)
		}
		r := resp.Responses[0].GetResponseRange()
		start = ""
		for _, kv := range r.GetKvs() {
			key, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), o.totalsRoot()), "/")
			if !keep[key] && len(gone) < maxTxnOps-1 {
				gone[key] = true
			}
			if r.GetMore() {
				start = clientv3.GetPrefixRangeEnd(o.totalsPrefix(key)) // past the rest of its records
			}
		}
	}
	expire := clientv3.OpDelete(o.minutesRoot(), clientv3.WithRange(o.minutesRoot()+revString(before)))
	ops := []clientv3.Op{expire}
	for key := range gone {
		ops = append(ops, clientv3.OpDelete(o.totalsPrefix(key), clientv3.WithPrefix()))
	}
	rk := o.g.s.revKey()
	cond := clientv3.Compare(clientv3.Value(rk), "=", strconv.FormatInt(rev, 10))
	if rev == 0 {
		cond = clientv3.Compare(clientv3.CreateRevision(rk), "=", 0)
	}
	octx, cancel := o.g.s.opContext(ctx)
	defer cancel()
	_, err := o.g.s.cli.Txn(octx).If(cond).Then(ops...).Else(expire).Commit()
	if err = o.g.s.wrap(octx, err); err != nil {
		return fmt.Errorf("sweep outcomes: %w", err)
	}
	return nil
}
