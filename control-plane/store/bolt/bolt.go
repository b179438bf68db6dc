// Package bolt implements store.Store on an embedded bbolt file, the control
// plane's default store.
//
// Layout of the file (schema version 1):
//
//	meta          schema_version → uint64, revision → uint64 (big endian)
//	experiments   key → Experiment as JSON
//	history       revision (uint64 big endian) → Change as JSON
//	key_history   key → bucket of revision → "" (index for per-key history)
//
// Every write runs in one bbolt read-write transaction that bumps the
// revision, writes the experiment and appends its Change, so a write and its
// audit entry commit together. bbolt fsyncs on commit (NoSync is never set),
// so a write is durable when the method returns.
//
// This package must not import anything from the control plane except store.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/allotmesh/allot/control-plane/store"
)

// SchemaVersion is the on-disk layout version this package reads and writes.
// Open refuses files recorded with any other version.
const SchemaVersion = 1

// DefaultLockTimeout is how long Open waits for the file lock by default.
const DefaultLockTimeout = time.Second

// ErrLocked reports that Open could not acquire the file lock within the
// lock timeout because another process (or another DB in this process) holds
// it.
var ErrLocked = errors.New("database is locked by another process")

var (
	bucketMeta        = []byte("meta")
	bucketExperiments = []byte("experiments")
	bucketHistory     = []byte("history")
	bucketKeyHistory  = []byte("key_history")

	keySchemaVersion = []byte("schema_version")
	keyRevision      = []byte("revision")
)

var _ store.Store = (*DB)(nil)

// DB is a store.Store backed by a bbolt file. Create it with Open.
type DB struct {
	db     *bbolt.DB
	path   string
	now    func() time.Time
	closed atomic.Bool // set once by Close; read without d.mu on the fast path

	mu       sync.Mutex                 // guards rev and watchers
	rev      int64                      // highest revision announced to watchers
	watchers map[chan int64]func() bool // watch channel → stop for its context.AfterFunc
}

type config struct {
	now         func() time.Time
	lockTimeout time.Duration
	readOnly    bool
}

// Option configures Open.
type Option func(*config)

// WithClock sets the clock used to timestamp writes. Times are stored in
// UTC. The default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now != nil {
			c.now = now
		}
	}
}

// WithLockTimeout sets how long Open waits for the file lock before failing
// with ErrLocked. The default is DefaultLockTimeout; d must be positive.
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.lockTimeout = d
		}
	}
}

// WithReadOnly opens an existing store file without ever writing to it,
// under a shared file lock: other read-only opens may share the file, a
// writer (a running allotd) may not. Open then fails on a missing file or
// one that is not an Allot store, and every write fails.
func WithReadOnly() Option {
	return func(c *config) { c.readOnly = true }
}

// Open opens (creating if needed, along with its parent directories, unless
// WithReadOnly) the bbolt file at path, checks or records its schema
// version, and returns the store. It fails with an error wrapping ErrLocked if the file lock is not
// acquired within the lock timeout.
func Open(path string, opts ...Option) (*DB, error) {
	cfg := config{now: time.Now, lockTimeout: DefaultLockTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if path == "" {
		return nil, fmt.Errorf("open bolt db: empty path: %w", store.ErrInvalid)
	}
	if !cfg.readOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("open bolt db %q: %w", path, err)
		}
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: cfg.lockTimeout, ReadOnly: cfg.readOnly})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open bolt db %q: %w (waited %s): %w", path, ErrLocked, cfg.lockTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open bolt db %q: %w", path, err)
	}
	rev, err := initSchema(db, cfg.readOnly)
	if err != nil {
		_ = db.Close() // the schema error is the one worth reporting
		return nil, fmt.Errorf("open bolt db %q: %w", path, err)
	}
	return &DB{
		db:       db,
		path:     path,
		now:      cfg.now,
		rev:      rev,
		watchers: make(map[chan int64]func() bool),
	}, nil
}

// initSchema checks the meta bucket of an existing store or initializes a new
// one (unless readOnly), and returns the current revision.
func initSchema(db *bbolt.DB, readOnly bool) (int64, error) {
	var (
		rev     int64
		missing bool
	)
	err := db.View(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			missing = true
			return tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
				return fmt.Errorf("not an allot store: bucket %q without %q", name, bucketMeta)
			})
		}
		v, err := readUint(meta, keySchemaVersion)
		if err != nil {
			return fmt.Errorf("schema version: %w", err)
		}
		if v != SchemaVersion {
			return fmt.Errorf("schema version %d, this build supports %d", v, SchemaVersion)
		}
		for _, name := range [][]byte{bucketExperiments, bucketHistory, bucketKeyHistory} {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("corrupt store: bucket %q missing", name)
			}
		}
		r, err := readUint(meta, keyRevision)
		if err != nil {
			return fmt.Errorf("revision: %w", err)
		}
		rev = int64(r)
		return nil
	})
	if err != nil || !missing {
		return rev, err
	}
	if readOnly {
		return 0, fmt.Errorf("not an allot store: bucket %q missing", bucketMeta)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return fmt.Errorf("create bucket %q: %w", bucketMeta, err)
		}
		if err := meta.Put(keySchemaVersion, encodeUint(SchemaVersion)); err != nil {
			return fmt.Errorf("write schema version: %w", err)
		}
		if err := meta.Put(keyRevision, encodeUint(0)); err != nil {
			return fmt.Errorf("write revision: %w", err)
		}
		for _, name := range [][]byte{bucketExperiments, bucketHistory, bucketKeyHistory} {
			if _, err := tx.CreateBucket(name); err != nil {
				return fmt.Errorf("create bucket %q: %w", name, err)
			}
		}
		return nil
	})
	return 0, err
}

// Path returns the file the store was opened at.
func (d *DB) Path() string { return d.path }

// Get implements store.Store.
func (d *DB) Get(ctx context.Context, key string) (*store.Experiment, error) {
	var e *store.Experiment
	err := d.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		e, err = getExperiment(tx, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get experiment %q: %w", key, err)
	}
	return e, nil
}

// List implements store.Store.
func (d *DB) List(ctx context.Context) ([]*store.Experiment, int64, error) {
	var (
		list []*store.Experiment
		rev  int64
	)
	err := d.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		if rev, err = revision(tx); err != nil {
			return err
		}
		return tx.Bucket(bucketExperiments).ForEach(func(k, v []byte) error {
			e, err := store.DecodeExperiment(v)
			if err != nil {
				return fmt.Errorf("decode experiment %q: %w", k, err)
			}
			list = append(list, e)
			return nil
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list experiments: %w", err)
	}
	return list, rev, nil
}

// Create implements store.Store.
func (d *DB) Create(ctx context.Context, e *store.Experiment, actor string) (*store.Experiment, error) {
	if e == nil {
		return nil, fmt.Errorf("create experiment: nil experiment: %w", store.ErrInvalid)
	}
	spec, err := checkExperiment(e)
	if err != nil {
		return nil, fmt.Errorf("create experiment %q: %w", e.Key, err)
	}
	var out *store.Experiment
	err = d.update(ctx, actor, func(tx *bbolt.Tx, rev int64, now time.Time) (*store.Change, error) {
		b := tx.Bucket(bucketExperiments)
		if b.Get([]byte(e.Key)) != nil {
			return nil, store.ErrExists
		}
		out = &store.Experiment{
			Key:            e.Key,
			Owner:          e.Owner,
			Spec:           spec,
			Revision:       rev,
			CreateRevision: rev,
			CreatedAt:      now,
			UpdatedAt:      now,
			CreatedBy:      actor,
			UpdatedBy:      actor,
		}
		after, err := putExperiment(b, out)
		if err != nil {
			return nil, err
		}
		return &store.Change{Key: e.Key, Op: store.OpCreate, After: after}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("create experiment %q: %w", e.Key, err)
	}
	return out.Clone(), nil
}

// Update implements store.Store.
func (d *DB) Update(ctx context.Context, e *store.Experiment, expect int64, actor string) (*store.Experiment, error) {
	if e == nil {
		return nil, fmt.Errorf("update experiment: nil experiment: %w", store.ErrInvalid)
	}
	spec, err := checkExperiment(e)
	if err == nil {
		err = store.CheckExpect(expect)
	}
	if err != nil {
		return nil, fmt.Errorf("update experiment %q: %w", e.Key, err)
	}
	var out *store.Experiment
	err = d.update(ctx, actor, func(tx *bbolt.Tx, rev int64, now time.Time) (*store.Change, error) {
		b := tx.Bucket(bucketExperiments)
		old, before, err := current(b, e.Key, expect)
		if err != nil {
			return nil, err
		}
		out = &store.Experiment{
			Key:            e.Key,
			Owner:          e.Owner,
			Spec:           spec,
			Revision:       rev,
			CreateRevision: old.CreateRevision,
			CreatedAt:      old.CreatedAt,
			UpdatedAt:      now,
			CreatedBy:      old.CreatedBy,
			UpdatedBy:      actor,
		}
		after, err := putExperiment(b, out)
		if err != nil {
			return nil, err
		}
		return &store.Change{Key: e.Key, Op: store.OpUpdate, Before: before, After: after}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("update experiment %q: %w", e.Key, err)
	}
	return out.Clone(), nil
}

// Delete implements store.Store.
func (d *DB) Delete(ctx context.Context, key string, expect int64, actor string) error {
	err := store.CheckExpect(expect)
	if err == nil && key == "" {
		err = fmt.Errorf("empty key: %w", store.ErrInvalid)
	}
	if err == nil {
		err = d.update(ctx, actor, func(tx *bbolt.Tx, _ int64, _ time.Time) (*store.Change, error) {
			b := tx.Bucket(bucketExperiments)
			_, before, err := current(b, key, expect)
			if err != nil {
				return nil, err
			}
			if err := b.Delete([]byte(key)); err != nil {
				return nil, err
			}
			return &store.Change{Key: key, Op: store.OpDelete, Before: before}, nil
		})
	}
	if err != nil {
		return fmt.Errorf("delete experiment %q: %w", key, err)
	}
	return nil
}

// History implements store.Store.
func (d *DB) History(ctx context.Context, key string) ([]store.Change, error) {
	changes := []store.Change{}
	err := d.view(ctx, func(tx *bbolt.Tx) error {
		hist := tx.Bucket(bucketHistory)
		add := func(rev, v []byte) error {
			var c store.Change
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("decode change %d: %w", decodeUint(rev), err)
			}
			changes = append(changes, c)
			return nil
		}
		if key == "" {
			return hist.ForEach(add)
		}
		idx := tx.Bucket(bucketKeyHistory).Bucket([]byte(key))
		if idx == nil {
			return nil
		}
		return idx.ForEach(func(rev, _ []byte) error {
			v := hist.Get(rev)
			if v == nil {
				return fmt.Errorf("corrupt store: change %d indexed but missing", decodeUint(rev))
			}
			return add(rev, v)
		})
	})
	if err != nil {
		if key == "" {
			return nil, fmt.Errorf("history: %w", err)
		}
		return nil, fmt.Errorf("history of %q: %w", key, err)
	}
	return changes, nil
}

// Revision implements store.Store.
func (d *DB) Revision(ctx context.Context) (int64, error) {
	var rev int64
	err := d.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		rev, err = revision(tx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read revision: %w", err)
	}
	return rev, nil
}

// Watch implements store.Store. The first value is the revision of the last
// write committed through this DB (or found at Open); after each later write
// the channel's single buffered slot is replaced with the newest revision.
func (d *DB) Watch(ctx context.Context) <-chan int64 {
	ch := make(chan int64, 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() || ctx.Err() != nil {
		close(ch)
		return ch
	}
	ch <- d.rev
	d.watchers[ch] = context.AfterFunc(ctx, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if _, ok := d.watchers[ch]; ok {
			delete(d.watchers, ch)
			close(ch)
		}
	})
	return ch
}

// notify announces a committed revision to every watcher. Commits of
// concurrent writers may report out of order; older revisions are dropped so
// that watchers see strictly increasing values.
func (d *DB) notify(rev int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() || rev <= d.rev {
		return
	}
	d.rev = rev
	for ch := range d.watchers {
		// Only notify sends, and only under d.mu, so after draining the
		// slot the send cannot block.
		select {
		case <-ch:
		default:
		}
		ch <- rev
	}
}

// Close implements store.Store. It closes every Watch channel and then the
// bbolt file, waiting for transactions in flight.
func (d *DB) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.mu.Lock()
	for ch, stop := range d.watchers {
		stop()
		close(ch)
	}
	clear(d.watchers)
	d.mu.Unlock()
	if err := d.db.Close(); err != nil {
		return fmt.Errorf("close bolt db %q: %w", d.path, err)
	}
	return nil
}

// view runs fn in a read-only transaction.
func (d *DB) view(ctx context.Context, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.closed.Load() {
		return store.ErrClosed
	}
	return closedErr(d.db.View(fn))
}

// update runs one write in a read-write transaction: it computes the next
// revision and the commit time, lets fn apply the write and describe it, then
// records the Change (stamped with revision, actor and time) in the
// history and the per-key index and persists the revision. Either all of it
// commits, durably, or none of it does.
func (d *DB) update(ctx context.Context, actor string, fn func(tx *bbolt.Tx, rev int64, now time.Time) (*store.Change, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.closed.Load() {
		return store.ErrClosed
	}
	var rev int64
	err := d.db.Update(func(tx *bbolt.Tx) error {
		cur, err := revision(tx)
		if err != nil {
			return err
		}
		if err := store.CheckBase(ctx, cur); err != nil {
			return err
		}
		rev = cur + 1
		now := d.now().UTC().Round(0)
		c, err := fn(tx, rev, now)
		if err != nil {
			return err
		}
		c.Revision, c.Time, c.Actor = rev, now, actor
		data, err := store.Marshal(c)
		if err != nil {
			return fmt.Errorf("encode change: %w", err)
		}
		revKey := encodeUint(uint64(rev))
		if err := tx.Bucket(bucketHistory).Put(revKey, data); err != nil {
			return fmt.Errorf("write change: %w", err)
		}
		idx, err := tx.Bucket(bucketKeyHistory).CreateBucketIfNotExists([]byte(c.Key))
		if err != nil {
			return fmt.Errorf("index change: %w", err)
		}
		if err := idx.Put(revKey, []byte{}); err != nil {
			return fmt.Errorf("index change: %w", err)
		}
		if err := tx.Bucket(bucketMeta).Put(keyRevision, revKey); err != nil {
			return fmt.Errorf("write revision: %w", err)
		}
		return nil
	})
	if err != nil {
		return closedErr(err)
	}
	d.notify(rev)
	return nil
}

func closedErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return fmt.Errorf("%w: %w", store.ErrClosed, err)
	}
	return err
}

// checkExperiment validates the caller-supplied fields of e and returns its
// Spec compacted (and thereby copied).
func checkExperiment(e *store.Experiment) (json.RawMessage, error) {
	if len(e.Key) > bbolt.MaxKeySize {
		return nil, fmt.Errorf("key longer than %d bytes: %w", bbolt.MaxKeySize, store.ErrInvalid)
	}
	return store.CompactSpec(e)
}

// current returns the stored experiment under key and its encoding (copied
// out of the transaction's memory), enforcing the compare-and-swap rule.
func current(b *bbolt.Bucket, key string, expect int64) (*store.Experiment, json.RawMessage, error) {
	v := b.Get([]byte(key))
	if v == nil {
		return nil, nil, store.ErrNotFound
	}
	e, err := store.DecodeExperiment(v)
	if err != nil {
		return nil, nil, fmt.Errorf("decode stored experiment: %w", err)
	}
	if expect != 0 && e.Revision != expect {
		return nil, nil, fmt.Errorf("%w: stored revision %d, expected %d", store.ErrConflict, e.Revision, expect)
	}
	return e, bytes.Clone(v), nil
}

func getExperiment(tx *bbolt.Tx, key string) (*store.Experiment, error) {
	v := tx.Bucket(bucketExperiments).Get([]byte(key))
	if v == nil {
		return nil, store.ErrNotFound
	}
	e, err := store.DecodeExperiment(v)
	if err != nil {
		return nil, fmt.Errorf("decode stored experiment: %w", err)
	}
	return e, nil
}

func putExperiment(b *bbolt.Bucket, e *store.Experiment) (json.RawMessage, error) {
	data, err := store.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode experiment: %w", err)
	}
	if err := b.Put([]byte(e.Key), data); err != nil {
		return nil, fmt.Errorf("write experiment: %w", err)
	}
	return data, nil
}

func revision(tx *bbolt.Tx) (int64, error) {
	r, err := readUint(tx.Bucket(bucketMeta), keyRevision)
	if err != nil {
		return 0, fmt.Errorf("read revision: %w", err)
	}
	return int64(r), nil
}

func readUint(b *bbolt.Bucket, key []byte) (uint64, error) {
	v := b.Get(key)
	if len(v) != 8 {
		return 0, fmt.Errorf("meta %q: %d bytes, want 8", key, len(v))
	}
	return decodeUint(v), nil
}

func encodeUint(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

func decodeUint(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
