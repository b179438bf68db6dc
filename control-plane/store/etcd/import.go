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
//  2. transactions of at most maxTxnOps keys and importTxnBytes bytes
//     write the history, its per-key index and then the experiments, each
//     on the condition that the marker is still this Import's and that
//     meta/revision is still absent;
//  3. the last one writes meta/revision and deletes the marker, on the same
//     condition.
//
// Until the last step the store's revision is 0 and Open refuses the
// prefix (ErrUnfinishedImport), so no allotd serves a partial copy; a
// write by anyone else (an allotd on the prefix, another Import) makes the
// next step fail instead of mixing with the copy. If Import fails midway,
// the marker stays; the next Import on a store opened ForImport deletes
// what it finds under the prefix's experiments, history and index, and
// starts again. A prefix with data but no marker is never touched
// (ErrNotEmpty).
//
// Import holds the whole history in memory, twice (decoded and encoded).
func (s *Store) Import(ctx context.Context, from string, history []store.Change) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	exps, err := store.Replay(history)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	var ops []clientv3.Op
	for _, c := range history {
		data, err := store.Marshal(c)
		if err != nil {
			return fmt.Errorf("import: encode change %d: %w", c.Revision, err)
		}
		ops = append(ops,
			clientv3.OpPut(s.histKey(c.Revision), string(data)),
			clientv3.OpPut(s.keyHistPrefix(c.Key)+revString(c.Revision), string(data)))
	}
	for _, e := range exps {
		data, err := store.Marshal(e)
		if err != nil {
			return fmt.Errorf("import: encode experiment %q: %w", e.Key, err)
		}
		ops = append(ops, clientv3.OpPut(s.expKey(e.Key), string(data)))
	}
	rev := int64(len(history))
	if err := s.importOps(ctx, Unfinished{From: from, Revision: rev, Started: s.now().UTC().Round(0)}, ops); err != nil {
		return fmt.Errorf("import revision %d from %s into %s prefix %q: %w", rev, from, s.name, s.prefix, err)
	}
	s.unfinished = nil
	return nil
}

// importOps runs the steps of Import.
func (s *Store) importOps(ctx context.Context, marker Unfinished, ops []clientv3.Op) error {
	fence, err := s.claim(ctx, marker)
	if err != nil {
		return err
	}
	rk, mk := s.revKey(), s.importKey()
	held := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(mk), "=", fence),
		clientv3.Compare(clientv3.CreateRevision(rk), "=", 0),
	}
	done := 0
	for len(ops) > 0 {
		n, size := 0, 0
		for n < len(ops) && n < maxTxnOps {
			size += len(ops[n].KeyBytes()) + len(ops[n].ValueBytes())
			if n > 0 && size > importTxnBytes {
				break
			}
			n++
		}
		resp, err := s.txn(ctx, held, ops[:n]...)
		if err == nil && !resp.Succeeded {
			err = s.lost(ctx, marker)
		}
		if err != nil {
			return fmt.Errorf("after %d of %d keys: %w", done, done+len(ops), err)
		}
		done += n
		ops = ops[n:]
		if s.importStep != nil {
			s.importStep(done)
		}
	}
	last := []clientv3.Op{clientv3.OpDelete(mk)}
	if marker.Revision > 0 {
		last = append(last, clientv3.OpPut(rk, strconv.FormatInt(marker.Revision, 10)))
	}
	resp, err := s.txn(ctx, held, last...)
	if err == nil && !resp.Succeeded {
		// An attempt whose answer was lost may have committed: then the
		// marker is gone and meta/revision holds the imported revision.
		err = s.lost(ctx, marker)
	}
	if err != nil {
		return fmt.Errorf("write the revision: %w", err)
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
	if len(replicaKVs) > 0 {
		var ids []string
		for _, kv := range replicaKVs {
			id, _ := url.PathUnescape(strings.TrimPrefix(string(kv.Key), replicas))
			ids = append(ids, id)
		}
		return 0, fmt.Errorf("%w: allotd replicas %s are running on it", ErrNotEmpty, strings.Join(ids, ", "))
	}
	if len(revKVs) > 0 {
		rev, err := parseRevision(revKVs)
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: it holds revision %d, %d experiments, %d changes", ErrNotEmpty, rev, exps, changes)
	}
	old, err := decodeMarker(markerKVs)
	if err != nil {
		return 0, err
	}
	if old == nil && exps+changes+index > 0 {
		return 0, fmt.Errorf("%w: it holds %d experiments, %d changes and %d index keys, without a revision or the marker of an unfinished import",
			ErrNotEmpty, exps, changes, index)
	}
	data, err := json.Marshal(marker)
	if err != nil {
		return 0, fmt.Errorf("encode marker: %w", err)
	}
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(rk), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(replicas), "=", 0).WithPrefix(),
	}
	var ops []clientv3.Op
	if old != nil {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(mk), "=", markerKVs[0].ModRevision))
		for _, a := range areas {
			ops = append(ops, clientv3.OpDelete(a, clientv3.WithPrefix()))
		}
	} else {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(mk), "=", 0))
		for _, a := range areas {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(a), "=", 0).WithPrefix())
		}
	}
	ops = append(ops, clientv3.OpPut(mk, string(data)))
	octx, cancel := s.opContext(ctx)
	defer cancel()
	// Not retried: an attempt whose answer was lost may have written the
	// marker, and the next Import clears after it.
	tresp, err := s.cli.Txn(octx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return 0, s.wrap(octx, err)
	}
	if !tresp.Succeeded {
		return 0, errors.New("the prefix changed while it was checked (another import, or an allotd on it?): try again")
	}
	return tresp.Header.Revision, nil
}

// lost explains why a step's condition failed: the marker is no longer
// this Import's, or meta/revision appeared. It returns nil when the marker
// is gone and meta/revision holds marker's revision: the last step
// committed on an attempt whose answer was lost.
func (s *Store) lost(ctx context.Context, marker Unfinished) error {
	resp, err := s.txn(ctx, nil, clientv3.OpGet(s.revKey()), clientv3.OpGet(s.importKey()))
	if err != nil {
		return err
	}
	revKVs := resp.Responses[0].GetResponseRange().GetKvs()
	now, err := decodeMarker(resp.Responses[1].GetResponseRange().GetKvs())
	if err != nil {
		return err
	}
	rev, err := parseRevision(revKVs)
	switch {
	case err != nil:
		return err
	case now == nil && len(revKVs) == 1 && rev == marker.Revision:
		return nil
	case len(revKVs) == 1:
		return fmt.Errorf("the store was written during the import (revision %d): is an allotd running on the prefix? Stop it, delete the prefix and import again", rev)
	case now == nil:
		return errors.New("the import's marker was deleted during the import")
	}
	return fmt.Errorf("another import took over the prefix: %s", now)
}

// txn runs one transaction of ops under cmps (none: a linearizable read),
// retried while the cluster cannot serve within the request timeout, so
// ops must be idempotent under cmps.
func (s *Store) txn(ctx context.Context, cmps []clientv3.Cmp, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	octx, cancel := s.opContext(ctx)
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
