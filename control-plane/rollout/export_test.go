package rollout

import "context"

// MeshOf is a Mesh that reads reg alone, for the external tests of its
// reads of the registry (they use store/etcd, which imports rollout).
func MeshOf(reg Registry) *Mesh { return &Mesh{reg: reg} }

// Registry is m's registry.
func (m *Mesh) Registry() Registry { return m.reg }

// Settled is what Wait decides from the replicas' records alone (one read
// of them, allApplied, settled), for the external tests.
func (m *Mesh) Settled(ctx context.Context, waited map[NodeKey]Node, targets Targets, rev int64) (int, bool) {
	rs, err := m.reg.Replicas(ctx)
	if err != nil || !allApplied(rs, targets, rev) {
		return 0, false
	}
	return settled(rs, waited, targets, rev)
}

// ReadRollout is rollout, for the external tests.
func (m *Mesh) ReadRollout(ctx context.Context, waited map[NodeKey]Node, targets Targets, rev int64) (*Rollout, error) {
	return m.rollout(ctx, waited, targets, rev)
}

// AllApplied and MaySettle are allApplied and maySettle, for the external
// tests.
var (
	AllApplied = allApplied
	MaySettle  = maySettle
)
