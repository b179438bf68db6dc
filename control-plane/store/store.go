// Package store defines the control plane's durable experiment store: the
// Experiment and Change domain types, the sentinel errors, and the Store
// interface that every storage technology implements.
//
// Implementations live in packages named for the technology they wrap
// (store/bolt, store/etcd) and must pass the shared conformance suite in
// store/storetest. This package imports only the standard library; it must not
// import any implementation, transport or Envoy package.
//
// The store keeps a single monotonic revision: every committed write (create,
// update or delete) increments it by exactly one, stamps the written
// experiment with it, and records one audit Change in the same transaction.
// Revisions make optimistic concurrency (compare-and-swap on Update and
// Delete, and on the whole store with WithBase) and change watching possible
// without locks held across requests.
package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Audit operations recorded in Change.Op.
const (
	// OpCreate records the creation of an experiment.
	OpCreate = "create"
	// OpUpdate records the replacement of an existing experiment.
	OpUpdate = "update"
	// OpDelete records the removal of an experiment.
	OpDelete = "delete"
)

// Sentinel errors. Implementations wrap them with context; callers test them
// with errors.Is. The admin API is the only place they become status codes.
var (
	// ErrNotFound reports that no experiment is stored under the key.
	ErrNotFound = errors.New("experiment not found")
	// ErrExists reports that Create found the key already taken.
	ErrExists = errors.New("experiment already exists")
	// ErrConflict reports that a compare-and-swap failed because the stored
	// revision differs from the expected one.
	ErrConflict = errors.New("revision conflict")
	// ErrInvalid reports an argument the store cannot accept (empty key, a
	// Spec that is not valid JSON, a negative expected revision).
	ErrInvalid = errors.New("invalid argument")
	// ErrClosed reports a call on a store that has been closed.
	ErrClosed = errors.New("store closed")
	// ErrUnavailable reports that the store cannot be reached or cannot
	// commit now (a replicated store without a quorum); the error names the
	// store. A write that fails with it may or may not have committed.
	ErrUnavailable = errors.New("store unavailable")
	// ErrStale reports that a write under WithBase found another write
	// committed since its base revision; nothing was written. It wraps
	// ErrConflict.
	ErrStale = fmt.Errorf("%w: the store changed since the revision the write is based on", ErrConflict)
)

type baseKey struct{}

// WithBase returns ctx for a write decided on the whole store as it was at
// revision rev (what List returned with rev): the write commits only if no
// other write committed since, in the same transaction that checks it, and
// fails with ErrStale otherwise. Every store honours it (storetest).
func WithBase(ctx context.Context, rev int64) context.Context {
	return context.WithValue(ctx, baseKey{}, rev)
}

// CheckBase is a store's check of WithBase: inside a write's transaction,
// with cur the store revision the transaction read, it returns ErrStale
// when ctx carries a base other than cur.
func CheckBase(ctx context.Context, cur int64) error {
	if base, ok := ctx.Value(baseKey{}).(int64); ok && base != cur {
		return fmt.Errorf("store at revision %d, write based on %d: %w", cur, base, ErrStale)
	}
	return nil
}

type writeKey struct{}

// WithWrite returns ctx for every call of one write to the store: the
// reads the write is decided on and the write itself. A store that bounds
// each call by a timeout (store/etcd's request timeout, allotd
// -store-timeout) bounds them all together, from WithWrite's call on, so
// that the write answers within that timeout however many calls it makes;
// a store without such a bound ignores it. Within a write's ctx it returns
// ctx unchanged: the outer write's start stands.
func WithWrite(ctx context.Context) context.Context {
	if _, ok := WriteStart(ctx); ok {
		return ctx
	}
	return context.WithValue(ctx, writeKey{}, time.Now())
}

// WriteStart is when the write ctx belongs to (WithWrite) started, and
// whether ctx belongs to one.
func WriteStart(ctx context.Context) (time.Time, bool) {
	start, ok := ctx.Value(writeKey{}).(time.Time)
	return start, ok
}

// Experiment is a stored experiment document.
//
// The store owns Revision, CreateRevision, the timestamps and the actor
// fields: they are ignored on input and set on every write.
type Experiment struct {
	// Key is unique, [a-z][a-z0-9._-]{0,62}. It is validated by the admin
	// API; the store only requires it to be non-empty.
	Key string `json:"key"`
	// Owner is the owner namespace, used for authorization and list filters.
	Owner string `json:"owner"`
	// Spec is the experiment definition as JSON. It is opaque to the store
	// but must be valid JSON; implementations may store it compacted.
	Spec json.RawMessage `json:"spec"`
	// Revision is the store revision of the last write to this key.
	Revision int64 `json:"revision"`
	// CreateRevision is the store revision that created the experiment.
	CreateRevision int64 `json:"create_revision"`
	// CreatedAt is when the experiment was created (UTC).
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the experiment was last written (UTC).
	UpdatedAt time.Time `json:"updated_at"`
	// CreatedBy names the actor that created the experiment.
	CreatedBy string `json:"created_by"`
	// UpdatedBy names the actor of the last write.
	UpdatedBy string `json:"updated_by"`
}

// Clone returns a deep copy of e (nil for nil), so that the copy shares no
// memory with e.
func (e *Experiment) Clone() *Experiment {
	if e == nil {
		return nil
	}
	c := *e
	c.Spec = cloneRaw(e.Spec)
	return &c
}

// Change is one entry of the audit history.
type Change struct {
	// Revision is the store revision the change was committed at.
	Revision int64 `json:"revision"`
	// Key is the experiment the change applies to.
	Key string `json:"key"`
	// Op is one of OpCreate, OpUpdate, OpDelete.
	Op string `json:"op"`
	// Actor names who made the change.
	Actor string `json:"actor"`
	// Time is when the change was committed (UTC).
	Time time.Time `json:"time"`
	// Before is the whole stored Experiment as JSON before the change (nil
	// for a create).
	Before json.RawMessage `json:"before,omitempty"`
	// After is the whole stored Experiment as JSON after the change (nil
	// for a delete).
	After json.RawMessage `json:"after,omitempty"`
}

// Clone returns a deep copy of c.
func (c Change) Clone() Change {
	c.Before = cloneRaw(c.Before)
	c.After = cloneRaw(c.After)
	return c
}

func cloneRaw(m json.RawMessage) json.RawMessage {
	if m == nil {
		return nil
	}
	return bytes.Clone(m)
}

// Store is the durable experiment store.
//
// All methods are safe for concurrent use. Every write is durable before the
// method returns and is committed together with its audit Change, or not at
// all. Returned values are copies: callers may modify them freely.
type Store interface {
	// Get returns the experiment stored under key; ErrNotFound if absent.
	Get(ctx context.Context, key string) (*Experiment, error)
	// List returns every experiment sorted by key and the store revision the
	// list is consistent with.
	List(ctx context.Context) ([]*Experiment, int64, error)
	// Create stores a new experiment; ErrExists if the key is taken.
	Create(ctx context.Context, e *Experiment, actor string) (*Experiment, error)
	// Update replaces an experiment if its current Revision equals expect
	// (compare-and-swap); ErrConflict otherwise, ErrNotFound if absent.
	// expect == 0 means unconditional. CreateRevision, CreatedAt and
	// CreatedBy are preserved.
	Update(ctx context.Context, e *Experiment, expect int64, actor string) (*Experiment, error)
	// Delete removes an experiment under the same revision rule as Update.
	Delete(ctx context.Context, key string, expect int64, actor string) error
	// History returns the audit changes for key (all keys if key == ""),
	// oldest first. A key that was never written has an empty history.
	History(ctx context.Context, key string) ([]Change, error)
	// Revision returns the current store revision (0 for an empty new store).
	Revision(ctx context.Context) (int64, error)
	// Watch returns a channel that receives the store revision after each
	// committed write, starting with the current revision. Delivery
	// coalesces: a slow reader sees only the latest revision, and received
	// values strictly increase. The channel is closed when ctx is done or
	// the store is closed.
	Watch(ctx context.Context) <-chan int64
	// Close releases the store and closes every Watch channel. Calling it
	// more than once is allowed; later calls return nil.
	Close() error
}

// CompactSpec checks the caller-supplied fields of e that every store
// requires (a non-empty Key, a Spec that is exactly one JSON value) and
// returns the Spec compacted, in fresh memory. The errors wrap ErrInvalid.
func CompactSpec(e *Experiment) (json.RawMessage, error) {
	switch {
	case e.Key == "":
		return nil, fmt.Errorf("empty key: %w", ErrInvalid)
	case !json.Valid(e.Spec):
		return nil, fmt.Errorf("spec is not valid JSON: %w", ErrInvalid)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, e.Spec); err != nil {
		return nil, fmt.Errorf("spec: %w: %w", ErrInvalid, err)
	}
	return buf.Bytes(), nil
}

// CheckExpect checks an expected revision of Update or Delete.
func CheckExpect(expect int64) error {
	if expect < 0 {
		return fmt.Errorf("expected revision %d is negative: %w", expect, ErrInvalid)
	}
	return nil
}

// DecodeExperiment decodes an Experiment as Marshal encoded it.
// json.Unmarshal copies into fresh memory, so the result never aliases v
// (a bbolt transaction's pages, an etcd response).
func DecodeExperiment(v []byte) (*Experiment, error) {
	var e Experiment
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// Marshal encodes v as compact JSON without HTML escaping, so that Spec
// bytes round-trip unchanged: the encoding stores write.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Replay returns the experiments a store's complete history leaves behind,
// sorted by key as List returns them: for each key, the After of its last
// change unless that change is a delete. It is how a store's state can be
// rebuilt, or checked, from its audit history alone.
//
// Replay checks that history is what a Store records, and reports the first
// change that is not, wrapping ErrInvalid: revisions 1, 2, 3… without a
// gap; a create of an absent key, an update or delete of a present one
// whose Before is the stored document byte for byte; and every After a
// document of the change's key stamped with the change's revision.
func Replay(history []Change) ([]*Experiment, error) {
	docs := map[string]json.RawMessage{}
	for i, c := range history {
		if err := replayOne(docs, int64(i+1), c); err != nil {
			return nil, fmt.Errorf("history[%d] (revision %d, key %q, op %q): %w: %w", i, c.Revision, c.Key, c.Op, err, ErrInvalid)
		}
	}
	out := make([]*Experiment, 0, len(docs))
	for key, doc := range docs {
		e, err := DecodeExperiment(doc)
		if err != nil { // replayOne decoded it already
			return nil, fmt.Errorf("experiment %q: %w", key, err)
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Experiment) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// replayOne applies change c, expected at revision want, to docs (key →
// stored document).
func replayOne(docs map[string]json.RawMessage, want int64, c Change) error {
	if c.Revision != want {
		return fmt.Errorf("revision %d follows %d", c.Revision, want-1)
	}
	if c.Key == "" {
		return errors.New("empty key")
	}
	stored, present := docs[c.Key]
	switch {
	case c.Op != OpCreate && c.Op != OpUpdate && c.Op != OpDelete:
		return errors.New("unknown op")
	case c.Op == OpCreate && present:
		return errors.New("create of a key that exists")
	case c.Op != OpCreate && !present:
		return errors.New("change of a key that does not exist")
	case !bytes.Equal(c.Before, stored):
		return errors.New("before is not the stored experiment")
	case c.Op == OpDelete:
		if c.After != nil {
			return errors.New("delete with an after")
		}
		delete(docs, c.Key)
		return nil
	}
	after, err := DecodeExperiment(c.After)
	switch {
	case err != nil:
		return fmt.Errorf("after: %w", err)
	case after.Key != c.Key:
		return fmt.Errorf("after is experiment %q", after.Key)
	case after.Revision != c.Revision:
		return fmt.Errorf("after has revision %d", after.Revision)
	}
	docs[c.Key] = c.After
	return nil
}
