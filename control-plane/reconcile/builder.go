package reconcile

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/control-plane/xds"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// A Builder gives rollout.Mesh the versions it waits for.
var _ rollout.Builder = (*Builder)(nil)

// NewBuilder builds from st the configuration mesh shapes, at the time
// now tells (nil: time.Now), reading the experiments through lists (nil:
// its own), which other followers of st may share.
func NewBuilder(st store.Store, lists *store.Lists, mesh translate.Mesh, now func() time.Time) *Builder {
	if now == nil {
		now = time.Now
	}
	if lists == nil {
		lists = store.NewLists(st)
	}
	return &Builder{store: st, lists: lists, mesh: mesh, now: now}
}

// Builder builds each cluster's ECDS resource from the store. It decodes
// the stored experiments once per store revision: a refresh builds every
// cluster, and the schedule timer reads them too. It tracks the store
// revision the served configuration is built from (Sync records it).
type Builder struct {
	store store.Store
	lists *store.Lists
	mesh  translate.Mesh
	now   func() time.Time // time.Now if nil

	mu      sync.Mutex
	rev     int64
	exps    []*experimentv1.Experiment    // read-only: translate clones what it keeps
	decoded map[string]experiment.Decoded // exps by key: a list after a write decodes only what it changed

	appliedMu  sync.Mutex
	appliedRev int64         // every served snapshot is built from this store revision or a later one
	appliedCh  chan struct{} // closed and replaced when appliedRev grows
}

// setApplied records that every cluster's snapshot is built from store
// revision rev or later.
func (b *Builder) setApplied(rev int64) {
	b.appliedMu.Lock()
	defer b.appliedMu.Unlock()
	if b.appliedCh == nil {
		b.appliedCh = make(chan struct{})
	}
	if rev > b.appliedRev {
		b.appliedRev = rev
		close(b.appliedCh)
		b.appliedCh = make(chan struct{})
	}
}

// AppliedRevision is the store revision every served snapshot is built
// from, at least.
func (b *Builder) AppliedRevision() int64 {
	b.appliedMu.Lock()
	defer b.appliedMu.Unlock()
	return b.appliedRev
}

// AwaitApplied waits until every served snapshot is built from store
// revision rev or later, for at most d, and reports whether it is.
func (b *Builder) AwaitApplied(ctx context.Context, rev int64, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ch := b.Applied()
		if b.AppliedRevision() >= rev {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// Applied returns a channel closed when the applied revision next grows.
func (b *Builder) Applied() <-chan struct{} {
	b.appliedMu.Lock()
	defer b.appliedMu.Unlock()
	if b.appliedCh == nil {
		b.appliedCh = make(chan struct{})
	}
	return b.appliedCh
}

// experiments returns the stored experiments as of the store's latest
// revision (asked of the store), or, if atLeast is positive, as of revision
// atLeast or later: the ones already read, if that recent, without a round
// trip to the store (which a waited write makes while the mesh's pushes
// keep it busy).
func (b *Builder) experiments(atLeast int64) ([]*experimentv1.Experiment, error) {
	ctx := context.Background()
	rev := atLeast
	if rev <= 0 {
		var err error
		if rev, err = b.store.Revision(ctx); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exps != nil && b.rev >= rev {
		return b.exps, nil
	}
	items, rev, err := b.lists.List(ctx, rev)
	if err != nil {
		return nil, err
	}
	out := make([]*experimentv1.Experiment, 0, len(items))
	dec := make(map[string]experiment.Decoded, len(items))
	for _, se := range items {
		d, ok := b.decoded[se.Key]
		if !ok || d.Revision != se.Revision {
			e, err := experiment.FromStore(se)
			if err != nil {
				return nil, fmt.Errorf("stored experiment %q: %w", se.Key, err)
			}
			d = experiment.Decoded{Revision: se.Revision, Experiment: e}
		}
		dec[se.Key] = d
		out = append(out, d.Experiment)
	}
	b.rev, b.exps, b.decoded = rev, out, dec
	return out, nil
}

// Versions returns the configuration version of each cluster now (as of
// store revision atLeast or later, if positive: see experiments), without
// building their resources; clusters whose configuration fails are left
// out (their proxies are reported against no target).
func (b *Builder) Versions(clusters []string, atLeast int64) (map[string]string, error) {
	exps, err := b.experiments(atLeast)
	if err != nil {
		return nil, err
	}
	return b.versions(exps, clusters), nil
}

// Known returns the configuration version of each cluster as of the
// experiments read last, without a read of the store, and the store
// revision they are as of; ok is false if none were read yet, or only
// those of an empty store (revision 0 would say nothing of the write after
// them: rollout.Mark.Before).
func (b *Builder) Known(clusters []string) (map[string]string, int64, bool) {
	b.mu.Lock()
	exps, rev := b.exps, b.rev
	b.mu.Unlock()
	if exps == nil || rev <= 0 {
		return nil, 0, false
	}
	return b.versions(exps, clusters), rev, true
}

// versions are the clusters' configuration versions from exps now; a
// cluster whose configuration fails is left out.
func (b *Builder) versions(exps []*experimentv1.Experiment, clusters []string) map[string]string {
	now := b.now()
	out := make(map[string]string, len(clusters))
	for _, c := range clusters {
		if cfg, err := translate.FilterConfig(exps, c, now, b.mesh); err == nil {
			out[c] = cfg.Version
		}
	}
	return out
}

// Build returns cluster's configuration in each artifact's resource: the
// same filter configuration, hence one version, for Wasm and native proxies;
// as of store revision atLeast or later if positive (see experiments), as
// of the store's latest otherwise (xds.ArtifactBuilder).
func (b *Builder) Build(cluster string, atLeast int64) (string, map[string]*corev3.TypedExtensionConfig, error) {
	exps, err := b.experiments(atLeast)
	if err != nil {
		return "", nil, err
	}
	cfg, err := translate.FilterConfig(exps, cluster, b.now(), b.mesh)
	if err != nil {
		return "", nil, err
	}
	st, err := translate.ConfigAny(cfg) // encoded once for both artifacts
	if err != nil {
		return "", nil, err
	}
	wasm, err := translate.WasmExtension(st, b.mesh)
	if err != nil {
		return "", nil, err
	}
	native, err := translate.NativeExtension(st, b.mesh)
	if err != nil {
		return "", nil, err
	}
	return cfg.Version, map[string]*corev3.TypedExtensionConfig{xds.ArtifactWasm: wasm, xds.ArtifactNative: native}, nil
}

// nextBoundary is the earliest start or end time after now (zero if none)
// of the experiments as of the revision Sync just applied, or later: those
// the refresh built from, without a read of the store, unless it built no
// cluster (a replica without proxies) and they are older.
func (b *Builder) nextBoundary() time.Time {
	exps, err := b.experiments(max(b.AppliedRevision(), 1))
	if err != nil {
		return b.now().Add(time.Second) // retry soon
	}
	now := b.now()
	var next time.Time
	for _, e := range exps {
		for _, ts := range []*timestamppb.Timestamp{e.GetStartTime(), e.GetEndTime()} {
			if ts == nil {
				continue
			}
			t := ts.AsTime()
			if t.After(now) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}
