// Package etcd implements store.Store on an etcd cluster through
// go.etcd.io/etcd/client/v3: the store allotd uses when it runs as several
// replicas.
//
// Layout under the store's prefix (DefaultPrefix unless WithPrefix):
//
//	meta/schema_version            "1"
//	meta/revision                  the store revision, decimal
//	meta/import                    only while an Import runs, or after one that did not finish (Unfinished as JSON)
//	experiments/<key>              Experiment as JSON
//	history/<revision>             Change as JSON (revision zero-padded to 20 digits)
//	key_history/<escaped key>/<revision>   the same Change (the per-key index)
//	mesh/…                         the replicas' registry (control-plane/rollout/etcd)
//	outcomes/…                     the replicas' outcome records (control-plane/outcomes/etcd)
//
// The store revision is Allot's own counter in meta/revision, not etcd's
// revision: etcd counts every write to the cluster (replica and proxy
// state, leases, other tenants), while the store.Store contract numbers
// experiment writes 1, 2, 3… so that the audit history has no gaps and every
// replica reading the cluster sees the same numbers.
//
// Every write is one etcd transaction: it compares the mod revisions of
// meta/revision and of the experiment with those it read, and puts the
// experiment, the next revision and the Change. A concurrent write makes
// the comparison fail, and the write is retried on fresh reads, so writes
// are serializable cluster-wide and a write commits with its audit entry or
// not at all. etcd commits to a quorum's disks before answering.
//
// A write waits out a leader election (etcd's require-leader mode makes
// each attempt fail at once; it retries with backoff); when the cluster
// has no quorum for the whole request timeout it fails with an error
// wrapping store.ErrUnavailable that names the endpoints. Calls under one
// store.WithWrite (the reads a write is decided on, and the write) share
// one request timeout, counted from WithWrite. Reads fall back to the
// reachable member's last committed state (a serializable read) so that
// the experiments stay readable.
//
// Watch follows meta/revision and, beside it, the experiments themselves
// (Followed): after a write, a replica's builder and outcomes aggregator
// (store.Lists) take the experiments of the revision Watch delivered from
// that second watch, rather than reading every experiment again.
//
// Import fills an empty prefix with another store's complete history, its
// revisions unchanged (allotd migrate copies a bbolt file this way); see
// Import for how a copy interrupted midway is kept from being served and
// is started again.
//
// The store opens the etcd session (control-plane/internal/etcdkv: the
// client, the prefix, the request timeout, the watches) and hands it to
// the registry and the outcome records through Conn; Close ends their
// watches too.
//
// It imports only control-plane/store and control-plane/internal/etcdkv.
package etcd

import (
	"bytes"
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
	"go.uber.org/zap"

	"github.com/allotmesh/allot/control-plane/internal/etcdkv"
	"github.com/allotmesh/allot/control-plane/store"
)

// SchemaVersion is the layout version this package reads and writes. Open
// refuses a prefix recorded with any other version.
const SchemaVersion = 1

// DefaultPrefix is the key prefix of the store in the etcd keyspace.
const DefaultPrefix = "/allot/"

// DefaultRequestTimeout bounds each call to the cluster, and the calls of
// one write together (store.WithWrite).
const DefaultRequestTimeout = 5 * time.Second

var _ store.Store = (*Store)(nil)

// Store is a store.Store backed by an etcd cluster. Create it with Open or
// New.
type Store struct {
	kv      *etcdkv.Conn // the client, the prefix, the request timeout, the watches
	cli     *clientv3.Client
	owned   bool // Close closes cli
	name    string
	prefix  string
	now     func() time.Time
	observe func(op string, d time.Duration, err error)

	w watchers // every Watch, fed by one etcd watch
	f followed // the experiments, as another etcd watch delivers them (Followed)

	unfinished *Unfinished       // the marker of an unfinished Import Open found (only with ForImport)
	importStep func(written int) // tests: called after each transaction of Import writing data
}

type config struct {
	prefix    string
	timeout   time.Duration
	now       func() time.Time
	observe   func(op string, d time.Duration, err error)
	forImport bool
}

// WithObserver has observe called after every call of the store.Store
// methods (op is the method's name, err its result), for latency metrics.
func WithObserver(observe func(op string, d time.Duration, err error)) Option {
	return func(c *config) { c.observe = observe }
}

// Option configures Open and New.
type Option func(*config)

// WithPrefix sets the key prefix (DefaultPrefix by default); several stores
// can share a cluster under different prefixes. A prefix must end in "/".
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithRequestTimeout bounds each call to the cluster, and the calls of one
// write together (store.WithWrite), by d (DefaultRequestTimeout by
// default); d must be positive.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// WithClock sets the clock used to timestamp writes (time.Now by default).
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// ForImport lets Open and New open a prefix that an Import which did not
// finish left behind (Unfinished reports it), so that Import can start
// again; without it they refuse such a prefix with ErrUnfinishedImport, so
// that no allotd serves a partial copy.
func ForImport() Option { return func(c *config) { c.forImport = true } }

// Open connects to the cluster described by cfg, checks or records the
// store's schema version, and returns the store; Close closes the client.
func Open(ctx context.Context, cfg clientv3.Config, opts ...Option) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("open etcd store: no endpoints: %w", store.ErrInvalid)
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultRequestTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop() // errors reach the caller; the client's own logs would repeat them
	}
	if cfg.Context == nil {
		cfg.Context = context.WithoutCancel(ctx)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("open etcd store at %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	s, err := newStore(ctx, cli, true, opts)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return s, nil
}

// New returns the store on an existing client, which the caller keeps
// owning: Close leaves it open.
func New(ctx context.Context, cli *clientv3.Client, opts ...Option) (*Store, error) {
	return newStore(ctx, cli, false, opts)
}

func newStore(ctx context.Context, cli *clientv3.Client, owned bool, opts []Option) (*Store, error) {
	cfg := config{prefix: DefaultPrefix, timeout: DefaultRequestTimeout, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	if !strings.HasSuffix(cfg.prefix, "/") {
		return nil, fmt.Errorf("open etcd store: prefix %q does not end in /: %w", cfg.prefix, store.ErrInvalid)
	}
	kv := etcdkv.New(cli, cfg.prefix, cfg.timeout)
	s := &Store{kv: kv, cli: cli, owned: owned, prefix: cfg.prefix, now: cfg.now, observe: cfg.observe, name: kv.Name(), w: watchers{last: -1}}
	if err := s.initSchema(ctx, cfg.forImport); err != nil {
		kv.Close()
		return nil, fmt.Errorf("open %s prefix %q: %w", s.name, s.prefix, err)
	}
	return s, nil
}

// timed reports a call of op that started at start to the observer.
func (s *Store) timed(op string, start time.Time, err error) {
	if s.observe != nil {
		s.observe(op, time.Since(start), err)
	}
}

// Check reports whether the cluster can serve a linearizable read now,
// without the fallback reads use: nil means the store has a quorum.
func (s *Store) Check(ctx context.Context) error {
	if err := s.kv.Check(ctx); err != nil {
		return err
	}
	octx, cancel := s.kv.OpContext(ctx)
	defer cancel()
	_, err := s.cli.Get(octx, s.revKey())
	return s.kv.Wrap(octx, err)
}

// Name names the store in errors and logs: "etcd" and its endpoints.
func (s *Store) Name() string { return s.name }

// Client returns the store's etcd client, for the replica's other state in
// the same cluster.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Conn returns the store's etcd session, which the mesh registry
// (control-plane/rollout/etcd) and the outcome records
// (control-plane/outcomes/etcd) share; Close ends their watches too.
func (s *Store) Conn() *etcdkv.Conn { return s.kv }

func (s *Store) key(parts ...string) string { return s.kv.Key(parts...) }

func (s *Store) schemaKey() string        { return s.key("meta/schema_version") }
func (s *Store) revKey() string           { return s.key(etcdkv.RevisionKey) }
func (s *Store) importKey() string        { return s.key("meta/import") }
func (s *Store) expKey(key string) string { return s.key("experiments/", key) }
func (s *Store) histKey(rev int64) string { return s.key("history/", revString(rev)) }
func (s *Store) keyHistPrefix(key string) string {
	return s.key("key_history/", url.PathEscape(key), "/")
}

func revString(rev int64) string { return etcdkv.Pad(rev) }

// initSchema records the schema version of a new prefix or checks that of
// an existing one, and looks for the marker of an unfinished Import.
func (s *Store) initSchema(ctx context.Context, forImport bool) error {
	ctx, cancel := s.kv.OpContext(ctx)
	defer cancel()
	k, mk := s.schemaKey(), s.importKey()
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, strconv.Itoa(SchemaVersion)), clientv3.OpGet(mk)).
		Else(clientv3.OpGet(k), clientv3.OpGet(mk)).
		Commit()
	if err != nil {
		return s.kv.Wrap(ctx, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) != 1 {
			return errors.New("schema version vanished")
		}
		if v := string(kvs[0].Value); v != strconv.Itoa(SchemaVersion) {
			return fmt.Errorf("schema version %s, this build supports %d", v, SchemaVersion)
		}
	}
	u, err := decodeMarker(resp.Responses[1].GetResponseRange().GetKvs())
	switch {
	case err != nil:
		return err
	case u != nil && !forImport:
		return fmt.Errorf("%w: %s; import again (allotd migrate) or delete the prefix", ErrUnfinishedImport, u)
	}
	s.unfinished = u
	return nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) (*store.Experiment, error) {
	start := time.Now()
	e, err := s.get(ctx, key)
	s.timed("get", start, err)
	return e, err
}

func (s *Store) get(ctx context.Context, key string) (*store.Experiment, error) {
	resp, err := s.kv.Read(ctx, etcdkv.Get{Key: s.expKey(key)})
	if err != nil {
		return nil, fmt.Errorf("get experiment %q: %w", key, err)
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return nil, fmt.Errorf("get experiment %q: %w", key, store.ErrNotFound)
	}
	e, err := store.DecodeExperiment(kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("get experiment %q: decode: %w", key, err)
	}
	return e, nil
}

// List implements store.Store.
func (s *Store) List(ctx context.Context) ([]*store.Experiment, int64, error) {
	start := time.Now()
	l, r, err := s.list(ctx)
	s.timed("list", start, err)
	return l, r, err
}

func (s *Store) list(ctx context.Context) ([]*store.Experiment, int64, error) {
	resp, err := s.kv.Read(ctx, etcdkv.Get{Key: s.revKey()}, etcdkv.Get{Key: s.key("experiments/"), Prefix: true})
	if err != nil {
		return nil, 0, fmt.Errorf("list experiments: %w", err)
	}
	rev, err := parseRevision(resp.Responses[0].GetResponseRange().GetKvs())
	if err != nil {
		return nil, 0, fmt.Errorf("list experiments: %w", err)
	}
	kvs := resp.Responses[1].GetResponseRange().GetKvs()
	list := make([]*store.Experiment, 0, len(kvs))
	for _, kv := range kvs {
		e, err := store.DecodeExperiment(kv.Value)
		if err != nil {
			return nil, 0, fmt.Errorf("list experiments: decode %q: %w", kv.Key, err)
		}
		list = append(list, e)
	}
	return list, rev, nil
}

// Revision implements store.Store.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	start := time.Now()
	r, err := s.revision(ctx)
	s.timed("revision", start, err)
	return r, err
}

func (s *Store) revision(ctx context.Context) (int64, error) {
	resp, err := s.kv.Read(ctx, etcdkv.Get{Key: s.revKey()})
	if err != nil {
		return 0, fmt.Errorf("read revision: %w", err)
	}
	rev, err := parseRevision(resp.Responses[0].GetResponseRange().GetKvs())
	if err != nil {
		return 0, fmt.Errorf("read revision: %w", err)
	}
	return rev, nil
}

// History implements store.Store.
func (s *Store) History(ctx context.Context, key string) ([]store.Change, error) {
	start := time.Now()
	h, err := s.history(ctx, key)
	s.timed("history", start, err)
	return h, err
}

func (s *Store) history(ctx context.Context, key string) ([]store.Change, error) {
	prefix := s.key("history/")
	what := "history"
	if key != "" {
		prefix, what = s.keyHistPrefix(key), fmt.Sprintf("history of %q", key)
	}
	resp, err := s.kv.Read(ctx, etcdkv.Get{Key: prefix, Prefix: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	changes := make([]store.Change, 0, len(kvs))
	for _, kv := range kvs {
		var c store.Change
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			return nil, fmt.Errorf("%s: decode change %q: %w", what, kv.Key, err)
		}
		changes = append(changes, c)
	}
	return changes, nil
}

// Create implements store.Store.
func (s *Store) Create(ctx context.Context, e *store.Experiment, actor string) (*store.Experiment, error) {
	start := time.Now()
	out, err := s.create(ctx, e, actor)
	s.timed("create", start, err)
	return out, err
}

func (s *Store) create(ctx context.Context, e *store.Experiment, actor string) (*store.Experiment, error) {
	if e == nil {
		return nil, fmt.Errorf("create experiment: nil experiment: %w", store.ErrInvalid)
	}
	spec, err := store.CompactSpec(e)
	if err != nil {
		return nil, fmt.Errorf("create experiment %q: %w", e.Key, err)
	}
	var out *store.Experiment
	err = s.write(ctx, e.Key, actor, func(old *store.Experiment, _ []byte, rev int64, now time.Time) (*store.Change, error) {
		if old != nil {
			return nil, store.ErrExists
		}
		out = &store.Experiment{
			Key: e.Key, Owner: e.Owner, Spec: spec,
			Revision: rev, CreateRevision: rev, CreatedAt: now, UpdatedAt: now, CreatedBy: actor, UpdatedBy: actor,
		}
		return &store.Change{Key: e.Key, Op: store.OpCreate}, nil
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("create experiment %q: %w", e.Key, err)
	}
	return out.Clone(), nil
}

// Update implements store.Store.
func (s *Store) Update(ctx context.Context, e *store.Experiment, expect int64, actor string) (*store.Experiment, error) {
	start := time.Now()
	out, err := s.update(ctx, e, expect, actor)
	s.timed("update", start, err)
	return out, err
}

func (s *Store) update(ctx context.Context, e *store.Experiment, expect int64, actor string) (*store.Experiment, error) {
	if e == nil {
		return nil, fmt.Errorf("update experiment: nil experiment: %w", store.ErrInvalid)
	}
	spec, err := store.CompactSpec(e)
	if err == nil {
		err = store.CheckExpect(expect)
	}
	if err != nil {
		return nil, fmt.Errorf("update experiment %q: %w", e.Key, err)
	}
	var out *store.Experiment
	err = s.write(ctx, e.Key, actor, func(old *store.Experiment, before []byte, rev int64, now time.Time) (*store.Change, error) {
		if err := compare(old, expect); err != nil {
			return nil, err
		}
		out = &store.Experiment{
			Key: e.Key, Owner: e.Owner, Spec: spec,
			Revision: rev, CreateRevision: old.CreateRevision, CreatedAt: old.CreatedAt, UpdatedAt: now,
			CreatedBy: old.CreatedBy, UpdatedBy: actor,
		}
		return &store.Change{Key: e.Key, Op: store.OpUpdate, Before: before}, nil
	}, &out)
	if err != nil {
		return nil, fmt.Errorf("update experiment %q: %w", e.Key, err)
	}
	return out.Clone(), nil
}

// Delete implements store.Store.
func (s *Store) Delete(ctx context.Context, key string, expect int64, actor string) error {
	start := time.Now()
	err := s.delete(ctx, key, expect, actor)
	s.timed("delete", start, err)
	return err
}

func (s *Store) delete(ctx context.Context, key string, expect int64, actor string) error {
	err := store.CheckExpect(expect)
	if err == nil && key == "" {
		err = fmt.Errorf("empty key: %w", store.ErrInvalid)
	}
	if err == nil {
		var none *store.Experiment
		err = s.write(ctx, key, actor, func(old *store.Experiment, before []byte, _ int64, _ time.Time) (*store.Change, error) {
			if err := compare(old, expect); err != nil {
				return nil, err
			}
			return &store.Change{Key: key, Op: store.OpDelete, Before: before}, nil
		}, &none)
	}
	if err != nil {
		return fmt.Errorf("delete experiment %q: %w", key, err)
	}
	return nil
}

// compare enforces the compare-and-swap rule of Update and Delete.
func compare(old *store.Experiment, expect int64) error {
	if old == nil {
		return store.ErrNotFound
	}
	if expect != 0 && old.Revision != expect {
		return fmt.Errorf("%w: stored revision %d, expected %d", store.ErrConflict, old.Revision, expect)
	}
	return nil
}

// write commits one write: it reads the store revision and the experiment
// under key, lets fn decide the write against them (fn sets *out to the
// experiment to store, or leaves it nil to delete), and commits the
// experiment, the next revision and the Change in one transaction on the
// condition that neither key changed since the read; otherwise it reads
// again and retries, until the write commits, fn refuses, or ctx or the
// request timeout ends.
//
// A cluster that cannot serve for a moment (a leader election after a
// member died) is retried with backoff within the request timeout. When a
// commit's outcome is unknown (the leader changed while it was in flight),
// the retry first reads the history entry the commit would have written:
// the same bytes, timestamp and actor included, mean it committed.
func (s *Store) write(ctx context.Context, key, actor string,
	fn func(old *store.Experiment, before []byte, rev int64, now time.Time) (*store.Change, error),
	out **store.Experiment) error {
	if err := s.kv.Check(ctx); err != nil {
		return err
	}
	octx, cancel := s.kv.OpContext(ctx)
	defer cancel()
	rk, ek := s.revKey(), s.expKey(key)
	var (
		unknown     string // history key of a commit whose outcome is unknown
		unknownData string
		unknownOut  *store.Experiment
	)
	retry := s.retrier(octx)
	for {
		reads := []clientv3.Op{clientv3.OpGet(rk), clientv3.OpGet(ek)}
		if unknown != "" {
			reads = append(reads, clientv3.OpGet(unknown))
		}
		cur, err := s.cli.Txn(octx).Then(reads...).Commit()
		if err != nil {
			if err := retry(err); err != nil {
				return err
			}
			continue
		}
		if unknown != "" {
			if kvs := cur.Responses[2].GetResponseRange().GetKvs(); len(kvs) == 1 && string(kvs[0].Value) == unknownData {
				*out = unknownOut
				return nil
			}
			unknown = ""
		}
		revKVs := cur.Responses[0].GetResponseRange().GetKvs()
		rev, err := parseRevision(revKVs)
		if err != nil {
			return err
		}
		if err := store.CheckBase(ctx, rev); err != nil {
			return err // the commit's comparison of meta/revision makes the check atomic
		}
		var revMod, expMod int64
		if len(revKVs) == 1 {
			revMod = revKVs[0].ModRevision
		}
		var (
			old    *store.Experiment
			before []byte
		)
		if kvs := cur.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 1 {
			expMod = kvs[0].ModRevision
			if old, err = store.DecodeExperiment(kvs[0].Value); err != nil {
				return fmt.Errorf("decode stored experiment: %w", err)
			}
			before = bytes.Clone(kvs[0].Value)
		}
		next := rev + 1
		now := s.now().UTC().Round(0)
		*out = nil
		c, err := fn(old, before, next, now)
		if err != nil {
			return err
		}
		c.Revision, c.Time, c.Actor = next, now, actor
		ops := []clientv3.Op{clientv3.OpPut(rk, strconv.FormatInt(next, 10))}
		if *out != nil {
			data, err := store.Marshal(*out)
			if err != nil {
				return fmt.Errorf("encode experiment: %w", err)
			}
			c.After = data
			ops = append(ops, clientv3.OpPut(ek, string(data)))
		} else {
			ops = append(ops, clientv3.OpDelete(ek))
		}
		change, err := store.Marshal(c)
		if err != nil {
			return fmt.Errorf("encode change: %w", err)
		}
		ops = append(ops,
			clientv3.OpPut(s.histKey(next), string(change)),
			clientv3.OpPut(s.keyHistPrefix(key)+revString(next), string(change)))
		resp, err := s.cli.Txn(octx).
			If(clientv3.Compare(clientv3.ModRevision(rk), "=", revMod), clientv3.Compare(clientv3.ModRevision(ek), "=", expMod)).
			Then(ops...).
			Commit()
		if err != nil {
			unknown, unknownData, unknownOut = s.histKey(next), string(change), *out
			if err := retry(err); err != nil {
				return err
			}
			continue
		}
		if resp.Succeeded {
			return nil
		}
	}
}

// retrier returns the retry rule of one call to the cluster bounded by
// octx (from opContext): retry(err) returns nil when the call should be
// made again, after a backoff — err says the cluster cannot serve for a
// moment (a leader election) and octx has time left —, and otherwise err
// classified by wrap.
func (s *Store) retrier(octx context.Context) func(err error) error {
	backoff := 20 * time.Millisecond
	return func(err error) error {
		werr := s.kv.Wrap(octx, err)
		if !errors.Is(werr, store.ErrUnavailable) || octx.Err() != nil {
			return werr
		}
		select {
		case <-octx.Done():
			return s.kv.Wrap(octx, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
		return nil
	}
}

// Close implements store.Store: it ends every watch (closing its channel)
// and closes the client if Open created it.
func (s *Store) Close() error {
	if !s.kv.Close() {
		return nil
	}
	if !s.owned {
		return nil
	}
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("close %s: %w", s.name, err)
	}
	return nil
}

func parseRevision(kvs []*mvccpb.KeyValue) (int64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	rev, err := strconv.ParseInt(string(kvs[0].Value), 10, 64)
	if err != nil || rev < 0 {
		return 0, fmt.Errorf("corrupt store: meta/revision %q", kvs[0].Value)
	}
	return rev, nil
}
