package experiment

import (
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/store"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// FromStore rebuilds the resource from a stored document: the admin API,
// the reconciler and the outcome aggregation all decode with it.
func FromStore(se *store.Experiment) (*experimentv1.Experiment, error) {
	e := &experimentv1.Experiment{}
	if err := protojson.Unmarshal(se.Spec, e); err != nil {
		return nil, err
	}
	e.Revision = se.Revision
	e.CreateTime = timestamppb.New(se.CreatedAt)
	e.UpdateTime = timestamppb.New(se.UpdatedAt)
	e.CreatedBy, e.UpdatedBy = se.CreatedBy, se.UpdatedBy
	return e, nil
}

// Decoded is a stored experiment as FromStore decoded it, with the store
// revision of its document: the same key at the same revision is the same
// document, so a cache of them by key (the builder's, the outcome
// aggregator's) decodes only what a write changed.
type Decoded struct {
	Revision   int64
	Experiment *experimentv1.Experiment
}
