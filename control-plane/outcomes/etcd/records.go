package etcd

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/internal/etcdkv"
	"github.com/allotmesh/allot/control-plane/store"
)

// Bounds of the outcome records (control-plane/README.md, "Outcomes across
// replicas").
const (
	// MaxRecordBytes bounds one outcome record's value: the largest
	// (64 variations, each 6 counts and 20 latency buckets of up to 20
	// digits) is about 35 KB. Commit refuses a larger one; Read reports
	// one as an error.
	MaxRecordBytes = 64 << 10
	// MaxPage bounds the records of one page of Read, which is one
	// request to etcd: at most 64 × MaxRecordBytes (4 MiB; about 2.2 MB
	// at the largest record), the retired record aside. It bounds what a
	// reader holds of the records at once, not how many Read reads: an
	// experiment's totals and each minute's records (the live replicas,
	// the dead ones not folded yet, the retired record) are read in as
	// many pages as they take, about one per MaxPage records.
	MaxPage = 64
	// maxOutcomeRanges bounds the ranges (the totals, a minute) one page
	// reads, each at most MaxPage/n records for n ranges: a
	// 61-minute read takes at least 8 pages, the default 5-minute
	// report's one.
	maxOutcomeRanges = 8
	// maxOutcomeMinutes bounds the minutes one Read covers.
	maxOutcomeMinutes = 61
	// maxSweepKeys bounds the keys (keys only) one request of Sweep reads,
	// looking for the experiments that have total records.
	maxSweepKeys = 1000
)

// retiredSegment is the key segment of store.RetiredReplica's records: an
// escaped replica id never holds "%" followed by "r".
const retiredSegment = "%retired"

// Records keeps one replica's outcome records, and reads every replica's,
// under the outcomes/ keys the package doc lays out.
type Records struct {
	kv *etcdkv.Conn
	id string
}

// New returns the outcome records of replica id in kv's cluster (the
// experiment store's session, store/etcd.Store.Conn); the replicas the
// mesh registry lists (control-plane/rollout/etcd) are the live ones.
func New(kv *etcdkv.Conn, id string) *Records { return &Records{kv: kv, id: id} }

// Replica is the id of the replica whose records this writes.
func (o *Records) Replica() string { return o.id }

func (o *Records) totalsRoot() string             { return o.kv.Key("outcomes/t/") }
func (o *Records) minutesRoot() string            { return o.kv.Key("outcomes/m/") }
func (o *Records) totalsPrefix(key string) string { return o.totalsRoot() + key + "/" }
func (o *Records) minutePrefix(m int64, key string) string {
	return o.minutesRoot() + etcdkv.Pad(m) + "/" + key + "/"
}

func replicaSegment(id string) string {
	if id == store.RetiredReplica {
		return retiredSegment
	}
	return url.PathEscape(id)
}

// recordKey is r's key.
func (o *Records) recordKey(r store.OutcomeRecord) string {
	if r.Minute == 0 {
		return o.totalsPrefix(r.Key) + replicaSegment(r.Replica)
	}
	return o.minutePrefix(r.Minute, r.Key) + replicaSegment(r.Replica)
}

// Read reads experiment key's total records, its minute records of
// minutes from to to (Unix minutes, at most 61 of them) and the ids of
// the live replicas (those the mesh registry lists), all as the store
// held them at one revision (the first page's), in pages of at most
// MaxPage records: it calls page with the live replicas and each
// page in turn — the retired record (store.RetiredReplica), if there is
// one, first of the first page — and returns page's first error. A page
// is called once, with no records, if there are none. Any number of
// records is read; the live replicas' ids are read whole with the first
// page (a key each, of the replicas running now: no bound of Read's
// own). A read that outlasts etcd's compaction of its revision fails (the
// next read starts from the current one).
func (o *Records) Read(ctx context.Context, key string, from, to int64, page func(live map[string]bool, recs []store.OutcomeRecord) error) error {
	if to < from || to-from >= maxOutcomeMinutes {
		return fmt.Errorf("read outcomes of %q: minutes %d to %d: at most %d", key, from, to, maxOutcomeMinutes)
	}
	// span is one range still to read: the totals (minute 0) or a
	// minute's records, from start on.
	type span struct {
		prefix, start string
		minute        int64
	}
	spans := []span{{prefix: o.totalsPrefix(key), start: o.totalsPrefix(key)}}
	for m := from; m <= to; m++ {
		spans = append(spans, span{prefix: o.minutePrefix(m, key), start: o.minutePrefix(m, key), minute: m})
	}
	retiredKey := o.totalsPrefix(key) + retiredSegment
	var live map[string]bool
	var rev int64 // of the first page; every later page reads at it
	for len(spans) > 0 {
		n := min(len(spans), maxOutcomeRanges)
		var gets []etcdkv.Get
		if rev == 0 {
			gets = append(gets, etcdkv.Get{Key: o.kv.Key(etcdkv.ReplicasPrefix), Prefix: true, KeysOnly: true}, etcdkv.Get{Key: retiredKey})
		}
		for _, s := range spans[:n] {
			gets = append(gets, etcdkv.Get{Key: s.start, End: clientv3.GetPrefixRangeEnd(s.prefix), Limit: MaxPage / int64(n), Rev: rev})
		}
		resp, err := o.kv.Read(ctx, gets...)
		if err != nil {
			return fmt.Errorf("read outcomes of %q (revision %d): %w", key, rev, err)
		}
		rs := resp.Responses
		var recs []store.OutcomeRecord
		if rev == 0 {
			rev = resp.Header.Revision
			live = map[string]bool{}
			for _, kv := range rs[0].GetResponseRange().GetKvs() {
				if id, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), o.kv.Key(etcdkv.ReplicasPrefix))); err == nil {
					live[id] = true
				}
			}
			for _, kv := range rs[1].GetResponseRange().GetKvs() {
				rec, err := o.decodeRecord(key, o.totalsPrefix(key), 0, kv)
				if err != nil {
					return err
				}
				recs = append(recs, rec)
			}
			rs = rs[2:]
		}
		var more []span // the ranges read in part: on from their last key
		for i, r := range rs {
			s := spans[i]
			kvs := r.GetResponseRange().GetKvs()
			for _, kv := range kvs {
				if string(kv.Key) == retiredKey {
					continue // first of the first page
				}
				rec, err := o.decodeRecord(key, s.prefix, s.minute, kv)
				if err != nil {
					return err
				}
				recs = append(recs, rec)
			}
			if r.GetResponseRange().GetMore() && len(kvs) > 0 {
				s.start = string(kvs[len(kvs)-1].Key) + "\x00"
				more = append(more, s)
			}
		}
		spans = append(more, spans[n:]...)
		if err := page(live, recs); err != nil {
			return err
		}
	}
	return nil
}

// Own returns, in one read, the records of experiment key of this
// replica (Replica): its total and its minute records of minutes from to
// to (Unix minutes, at most 61 of them).
func (o *Records) Own(ctx context.Context, key string, from, to int64) ([]store.OutcomeRecord, error) {
	if to < from || to-from >= maxOutcomeMinutes {
		return nil, fmt.Errorf("read outcomes of %q: minutes %d to %d: at most %d", key, from, to, maxOutcomeMinutes)
	}
	seg := replicaSegment(o.id)
	gets := []etcdkv.Get{{Key: o.totalsPrefix(key) + seg}}
	for m := from; m <= to; m++ {
		gets = append(gets, etcdkv.Get{Key: o.minutePrefix(m, key) + seg})
	}
	resp, err := o.kv.Read(ctx, gets...)
	if err != nil {
		return nil, fmt.Errorf("read outcomes of %q of replica %q: %w", key, o.id, err)
	}
	var recs []store.OutcomeRecord
	for i, r := range resp.Responses {
		prefix, minute := o.totalsPrefix(key), int64(0)
		if i > 0 {
			minute = from + int64(i-1)
			prefix = o.minutePrefix(minute, key)
		}
		for _, kv := range r.GetResponseRange().GetKvs() {
			rec, err := o.decodeRecord(key, prefix, minute, kv)
			if err != nil {
				return nil, err
			}
			recs = append(recs, rec)
		}
	}
	return recs, nil
}

// decodeRecord is kv, a record of experiment key under prefix (its totals
// or minute's).
func (o *Records) decodeRecord(key, prefix string, minute int64, kv *mvccpb.KeyValue) (store.OutcomeRecord, error) {
	seg := strings.TrimPrefix(string(kv.Key), prefix)
	id := store.RetiredReplica
	if seg != retiredSegment {
		var err error
		if id, err = url.PathUnescape(seg); err != nil || id == store.RetiredReplica {
			return store.OutcomeRecord{}, fmt.Errorf("read outcomes of %q: key %q: not a replica's", key, kv.Key)
		}
	}
	if len(kv.Value) > MaxRecordBytes {
		return store.OutcomeRecord{}, fmt.Errorf("read outcomes of %q: record %q: %d bytes, at most %d", key, kv.Key, len(kv.Value), MaxRecordBytes)
	}
	return store.OutcomeRecord{Key: key, Replica: id, Minute: minute, Value: kv.Value, Mod: kv.ModRevision}, nil
}

// MaxCommit bounds the records of one Commit (each is a comparison
// and a write: under etcd's default --max-txn-ops, 128).
const MaxCommit = etcdkv.MaxTxnOps / 2

// Commit writes recs (a nil Value deletes the record) in one transaction
// if each record's revision is still its Mod (0: absent), and returns the
// revision the written records have; ok is false, with nothing written,
// if one is not. At most MaxCommit records, each value at most
// MaxRecordBytes, and 1 MiB of keys and values in all (under etcd's
// default --max-request-bytes).
func (o *Records) Commit(ctx context.Context, recs []store.OutcomeRecord) (rev int64, ok bool, err error) {
	if len(recs) > MaxCommit {
		return 0, false, fmt.Errorf("commit outcomes: %d records, at most %d", len(recs), MaxCommit)
	}
	if err := o.kv.Check(ctx); err != nil {
		return 0, false, err
	}
	conds := make([]clientv3.Cmp, len(recs))
	ops := make([]clientv3.Op, len(recs))
	size := 0
	for i, r := range recs {
		k := o.recordKey(r)
		if len(r.Value) > MaxRecordBytes {
			return 0, false, fmt.Errorf("commit outcomes: record %q: %d bytes, at most %d", k, len(r.Value), MaxRecordBytes)
		}
		if size += len(k) + len(r.Value); size > etcdkv.MaxTxnBytes {
			return 0, false, fmt.Errorf("commit outcomes: more than %d bytes of keys and values", etcdkv.MaxTxnBytes)
		}
		conds[i] = clientv3.Compare(clientv3.ModRevision(k), "=", r.Mod)
		ops[i] = clientv3.OpDelete(k)
		if r.Value != nil {
			ops[i] = clientv3.OpPut(k, string(r.Value))
		}
	}
	octx, cancel := o.kv.OpContext(ctx)
	defer cancel()
	resp, err := o.kv.Client().Txn(octx).If(conds...).Then(ops...).Commit()
	if err = o.kv.Wrap(octx, err); err != nil {
		return 0, false, fmt.Errorf("commit outcomes: %w", err)
	}
	return resp.Header.Revision, resp.Succeeded, nil
}

// Sweep deletes the minute records of every experiment older than minute
// before, and, if the store is still at revision rev, every record of the
// experiments not in keep (deleted, or no longer observed) — in one
// transaction, which deletes at most etcdkv.MaxTxnOps-1 experiments' records (the
// rest at the next sweep). It reads the experiments with total records
// in requests of at most maxSweepKeys keys, from each on to the next.
func (o *Records) Sweep(ctx context.Context, keep map[string]bool, rev int64, before int64) error {
	gone := map[string]bool{}
	for start := o.totalsRoot(); start != "" && len(gone) < etcdkv.MaxTxnOps-1; {
		resp, err := o.kv.Read(ctx, etcdkv.Get{Key: start, End: clientv3.GetPrefixRangeEnd(o.totalsRoot()), KeysOnly: true, Limit: maxSweepKeys})
		if err != nil {
			return fmt.Errorf("sweep outcomes: %w", err)
		}
		r := resp.Responses[0].GetResponseRange()
		start = ""
		for _, kv := range r.GetKvs() {
			key, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), o.totalsRoot()), "/")
			if !keep[key] && len(gone) < etcdkv.MaxTxnOps-1 {
				gone[key] = true
			}
			if r.GetMore() {
				start = clientv3.GetPrefixRangeEnd(o.totalsPrefix(key)) // past the rest of its records
			}
		}
	}
	expire := clientv3.OpDelete(o.minutesRoot(), clientv3.WithRange(o.minutesRoot()+etcdkv.Pad(before)))
	ops := []clientv3.Op{expire}
	for key := range gone {
		ops = append(ops, clientv3.OpDelete(o.totalsPrefix(key), clientv3.WithPrefix()))
	}
	rk := o.kv.Key(etcdkv.RevisionKey)
	cond := clientv3.Compare(clientv3.Value(rk), "=", strconv.FormatInt(rev, 10))
	if rev == 0 {
		cond = clientv3.Compare(clientv3.CreateRevision(rk), "=", 0)
	}
	octx, cancel := o.kv.OpContext(ctx)
	defer cancel()
	_, err := o.kv.Client().Txn(octx).If(cond).Then(ops...).Else(expire).Commit()
	if err = o.kv.Wrap(octx, err); err != nil {
		return fmt.Errorf("sweep outcomes: %w", err)
	}
	return nil
}
