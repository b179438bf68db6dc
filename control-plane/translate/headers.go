package translate

import (
	"fmt"
	"time"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/wire"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Headers are the mesh's header settings, defaults filled, that decide
// what the filter adds to a request: what the admin API's per-service
// header budget counts.
type Headers struct {
	prefix, dictionary, versionHeader, version string
	perExperiment                              bool
}

// MeshHeaders reads the header settings from the configuration mesh gives
// every proxy, with the filter's own decoder and defaults.
func MeshHeaders(mesh Mesh) (Headers, error) {
	cfg, err := FilterConfig(nil, "", time.Time{}, mesh)
	if err != nil {
		return Headers{}, err
	}
	js, err := ConfigJSON(cfg)
	if err != nil {
		return Headers{}, err
	}
	f, err := config.Decode(js)
	if err != nil {
		return Headers{}, fmt.Errorf("mesh settings: %w", err)
	}
	f.Defaults()
	return Headers{
		prefix: f.HeaderPrefix, dictionary: f.DictionaryHeader, versionHeader: f.VersionHeader, version: f.Version,
		perExperiment: f.AssignmentHeaders != config.AssignmentHeadersDictionary,
	}, nil
}

// Cost is the most bytes of request headers e's assignment adds: its
// longest variation's (wire.AssignmentHeaderBytes).
func (h Headers) Cost(e *experimentv1.Experiment) int {
	most := 0
	for _, v := range e.GetVariations() {
		value, err := experiment.HeaderValue(v)
		if err != nil {
			continue // not a valid header value: Validate refuses it
		}
		most = max(most, wire.AssignmentHeaderBytes(h.prefix, e.GetKey(), value, h.perExperiment))
	}
	return most
}

// Bytes is the most bytes of request headers the filter adds to one
// request when the assignments' Costs sum to assigned: those, the
// dictionary header and the version header (wire.HeaderBytes).
func (h Headers) Bytes(assigned int) int {
	return wire.HeaderBytes(assigned, h.dictionary, h.versionHeader, h.version)
}
