package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/internal/etcdkv"
	"github.com/allotmesh/allot/control-plane/store"
)

var (
	// ErrNotEmpty reports that Import found the prefix holding a store (a
	// revision, experiments or history that no unfinished Import wrote) or
	// live allotd replicas. The error says what it found.
	ErrNotEmpty = errors.New("prefix not empty")
	// ErrUnfinishedImport reports that Open found the marker of an Import
	// that did not finish.
	ErrUnfinishedImport = errors.New("an import into the prefix did not finish")
)

// importTxnBytes bounds the keys and values of one Import transaction,
// under etcd's default --max-request-bytes (1.5 MiB).
const importTxnBytes = 1 << 20

// Unfinished describes an Import that did not finish, as its marker
// (meta/import) records it.
type Unfinished struct {
	// From names the source, as the importer named it.
	From string `json:"from"`
	// Revision is the revision of the history being imported.
	Revision int64 `json:"revision"`
	// Started is when the Import began (UTC).
	Started time.Time `json:"started"`
}

// String describes the unfinished import for errors and messages.
func (u *Unfinished) String() string {
	return fmt.Sprintf("the import of revision %d from %s started %s", u.Revision, u.From, u.Started.Format(time.RFC3339))
}

// Unfinished returns the unfinished Import that Open found (opened
// ForImport), nil if none: the next Import removes what it wrote.
func (s *Store) Unfinished() *Unfinished { return s.unfinished }

func decodeMarker(kvs []*mvccpb.KeyValue) (*Unfinished, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	var u Unfinished
	if err := json.Unmarshal(kvs[0].Value, &u); err != nil {
		return nil, fmt.Errorf("corrupt store: meta/import %q: %w", kvs[0].Value, err)
	}
	return &u, nil
}

// Import writes the complete history of another store — its History(ctx,
// ""), oldest first — into this store, which must be empty, together with
// the experiments the history leaves behind (store.Replay, which also
// rejects a history that contradicts itself) and its revision. Afterwards
// Revision, List, Get and History answer what the source answered, and the
// next write takes the next revision. from names the source in the marker.
//
// A history rarely fits one etcd transaction, so Import writes it in
// several, fenced by a marker key, meta/import:
//
//  1. one transaction checks that the prefix is empty (no meta/revision, no
//     experiment, history or index key, no live replica) and writes the
//     marker;
//  2. transactions of at most etcdkv.MaxTxnOps keys and importTxnBytes bytes
//     write the history, its per-key index and then the experiments, each
//     on the condition that the marker is still this Import's and that
//     meta/revision is still absent;
//  3. one writes meta/revision, on the same condition;
//  4. verify, unless nil, checks the copy through this store (opened
//     ForImport, it reads as any store);
//  5. the last deletes the marker, on the condition that it is still this
//     Import's and meta/revision still the imported one.
//
// Until the last step Open refuses the prefix (ErrUnfinishedImport), so no
// allotd serves a partial or unverified copy; a write by anyone else (an
// allotd already running on the prefix, another Import) makes the next
// step fail instead of mixing with the copy. If Import fails or is
// interrupted before the last step, the marker stays, and the next Import
// on a store opened ForImport deletes what it finds under the prefix's
// meta/revision, experiments, history and index, and starts again. A
// prefix with a revision or data but no marker is never touched
// (ErrNotEmpty).
//
// Import holds the history in memory as the caller passes it, and the
// experiments; it encodes one transaction's keys at a time.
func (s *Store) Import(ctx context.Context, from string, history []store.Change, verify func(context.Context) error) error {
	if err := s.kv.Check(ctx); err != nil {
		return err
	}
	exps, err := store.Replay(history)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	rev := int64(len(history))
	marker := Unfinished{From: from, Revision: rev, Started: s.now().UTC().Round(0)}
	if err := s.importSteps(ctx, marker, s.importPuts(history, exps), verify); err != nil {
		return fmt.Errorf("import revision %d from %s into %s prefix %q: %w", rev, from, s.name, s.prefix, err)
	}
	s.unfinished = nil
	return nil
}

// importPuts returns the puts of an import in order — each change under
// history/ and under key_history/, then each experiment — as a function
// of their index that encodes the put (store.Marshal); ok is false past
// the last. Replay checked every document, so encoding cannot fail.
func (s *Store) importPuts(history []store.Change, exps []*store.Experiment) func(i int) (op clientv3.Op, ok bool, err error) {
	return func(i int) (clientv3.Op, bool, error) {
		var (
			key string
			v   any
		)
		switch c := i / 2; {
		case c < len(history) && i%2 == 0:
			key, v = s.histKey(history[c].Revision), history[c]
		case c < len(history):
			key, v = s.keyHistPrefix(history[c].Key)+revString(history[c].Revision), history[c]
		case i-2*len(history) < len(exps):
			e := exps[i-2*len(history)]
			key, v = s.expKey(e.Key), e
		default:
			return clientv3.Op{}, false, nil
		}
		data, err := store.Marshal(v)
		if err != nil {
			return clientv3.Op{}, false, fmt.Errorf("encode %s: %w", key, err)
		}
		return clientv3.OpPut(key, string(data)), true, nil
	}
}

// importSteps runs the steps of Import, taking the puts from puts.
func (s *Store) importSteps(ctx context.Context, marker Unfinished, puts func(int) (clientv3.Op, bool, error), verify func(context.Context) error) error {
	fence, err := s.claim(ctx, marker)
	if err != nil {
		return err
	}
	rk, mk := s.revKey(), s.importKey()
	held := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(mk), "=", fence),
		clientv3.Compare(clientv3.CreateRevision(rk), "=", 0),
	}
	revision := "" // meta/revision once imported: absent for an empty history
	if marker.Revision > 0 {
		revision = strconv.FormatInt(marker.Revision, 10)
	}
	// step runs one transaction under cmps; done says, when cmps fail,
	// whether the fence state shows the step committed on an attempt whose
	// answer was lost.
	step := func(cmps []clientv3.Cmp, ops []clientv3.Op, done func(fenceState) bool) error {
		resp, err := s.txn(ctx, cmps, ops...)
		if err != nil || resp.Succeeded {
			return err
		}
		st, err := s.fenceState(ctx)
		if err != nil {
			return err
		}
		if done != nil && done(st) {
			return nil
		}
		return st.broken(fence)
	}
	for written := 0; ; {
		var batch []clientv3.Op
		for size := 0; len(batch) < etcdkv.MaxTxnOps; {
			op, ok, err := puts(written + len(batch))
			if err != nil {
				return fmt.Errorf("after %d keys: %w", written, err)
			}
			if size += len(op.KeyBytes()) + len(op.ValueBytes()); !ok || (len(batch) > 0 && size > importTxnBytes) {
				break // op, if any, opens the next batch
			}
			batch = append(batch, op)
		}
		if len(batch) == 0 {
			break
		}
		if err := step(held, batch, nil); err != nil {
			return fmt.Errorf("after %d keys: %w", written, err)
		}
		written += len(batch)
		if s.importStep != nil {
			s.importStep(written)
		}
	}
	if revision != "" {
		err := step(held, []clientv3.Op{clientv3.OpPut(rk, revision)}, func(st fenceState) bool {
			return st.markerMod == fence && st.revision == revision
		})
		if err != nil {
			return fmt.Errorf("write the revision: %w", err)
		}
	}
	if verify != nil {
		if err := verify(ctx); err != nil {
			return fmt.Errorf("verify: %w", err)
		}
	}
	unchanged := held[1]
	if revision != "" {
		unchanged = clientv3.Compare(clientv3.Value(rk), "=", revision)
	}
	err = step([]clientv3.Cmp{held[0], unchanged}, []clientv3.Op{clientv3.OpDelete(mk)}, func(st fenceState) bool {
		return st.marker == nil && st.revision == revision
	})
	if err != nil {
		return fmt.Errorf("remove the marker: %w", err)
	}
	return nil
}

// claim checks that the prefix is empty, or holds only what an unfinished
// Import wrote (which it deletes), and writes marker; it returns the
// marker's mod revision, the fence of the later steps.
func (s *Store) claim(ctx context.Context, marker Unfinished) (int64, error) {
	rk, mk := s.revKey(), s.importKey()
	areas := []string{s.key("experiments/"), s.key("history/"), s.key("key_history/")}
	replicas := s.key("mesh/replicas/")
	reads := []clientv3.Op{clientv3.OpGet(rk), clientv3.OpGet(mk), clientv3.OpGet(replicas, clientv3.WithPrefix(), clientv3.WithKeysOnly())}
	for _, a := range areas {
		reads = append(reads, clientv3.OpGet(a, clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	resp, err := s.txn(ctx, nil, reads...)
	if err != nil {
		return 0, err
	}
	res := func(i int) *clientv3.GetResponse {
		return (*clientv3.GetResponse)(resp.Responses[i].GetResponseRange())
	}
	revKVs, markerKVs, replicaKVs := res(0).Kvs, res(1).Kvs, res(2).Kvs
	exps, changes, index := res(3).Count, res(4).Count, res(5).Count
	old, err := decodeMarker(markerKVs)
	if err != nil {
		return 0, err
	}
	switch {
	case len(replicaKVs) > 0:
		var ids []string
		for _, kv := range replicaKVs {
			id, _ := url.PathUnescape(strings.TrimPrefix(string(kv.Key), replicas))
			ids = append(ids, id)
		}
		return 0, fmt.Errorf("%w: allotd replicas %s are running on it", ErrNotEmpty, strings.Join(ids, ", "))
	case old == nil && len(revKVs) > 0:
		rev, err := parseRevision(revKVs)
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: it holds revision %d (experiments: %d, changes: %d)", ErrNotEmpty, rev, exps, changes)
	case old == nil && exps+changes+index > 0:
		return 0, fmt.Errorf("%w: it holds keys without a revision or the marker of an unfinished import (experiments: %d, changes: %d, index: %d)",
			ErrNotEmpty, exps, changes, index)
	}
	data, err := json.Marshal(marker)
	if err != nil {
		return 0, fmt.Errorf("encode marker: %w", err)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(replicas), "=", 0).WithPrefix()}
	var ops []clientv3.Op
	if old != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(mk), "=", markerKVs[0].ModRevision))
		ops = append(ops, clientv3.OpDelete(rk))
		for _, a := range areas {
			ops = append(ops, clientv3.OpDelete(a, clientv3.WithPrefix()))
		}
	} else {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(mk), "=", 0), clientv3.Compare(clientv3.CreateRevision(rk), "=", 0))
		for _, a := range areas {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(a), "=", 0).WithPrefix())
		}
	}
	ops = append(ops, clientv3.OpPut(mk, string(data)))
	octx, cancel := s.kv.OpContext(ctx)
	defer cancel()
	// Not retried: an attempt whose answer was lost may have written the
	// marker, and the next Import clears after it.
	tresp, err := s.cli.Txn(octx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, s.kv.Wrap(octx, err)
	}
	if !tresp.Succeeded {
		return 0, errors.New("the prefix changed while it was checked (another import, or an allotd on it?): try again")
	}
	return tresp.Header.Revision, nil
}

// fenceState is what the conditions of an Import's steps read.
type fenceState struct {
	revision  string // meta/revision's value, "" when absent
	marker    *Unfinished
	markerMod int64
}

func (s *Store) fenceState(ctx context.Context) (fenceState, error) {
	resp, err := s.txn(ctx, nil, clientv3.OpGet(s.revKey()), clientv3.OpGet(s.importKey()))
	if err != nil {
		return fenceState{}, err
	}
	var st fenceState
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		st.revision = string(kvs[0].Value)
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	if st.marker, err = decodeMarker(kvs); err != nil {
		return fenceState{}, err
	}
	if len(kvs) == 1 {
		st.markerMod = kvs[0].ModRevision
	}
	return st, nil
}

// broken explains why the fence of an Import whose marker was written at
// fence no longer holds.
func (st fenceState) broken(fence int64) error {
	switch {
	case st.marker == nil:
		return errors.New("the import's marker was deleted during the import")
	case st.markerMod != fence:
		return fmt.Errorf("another import took over the prefix: %s", st.marker)
	}
	return fmt.Errorf("the store was written during the import (meta/revision %q): is an allotd running on the prefix? Stop it and import again", st.revision)
}

// txn runs one transaction of ops under cmps (none: a linearizable read),
// retried while the cluster cannot serve within the request timeout, so
// ops must be idempotent under cmps.
func (s *Store) txn(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := s.kv.Check(ctx); err != nil {
		return nil, err
	}
	octx, cancel := s.kv.OpContext(ctx)
	defer cancel()
	retry := s.retrier(octx)
	for {
		resp, err := s.cli.Txn(octx).If(cmps...).Then(ops...).Commit()
		if err == nil {
			return resp, nil
		}
		if err := retry(err); err != nil {
			return nil, err
		}
	}
}
