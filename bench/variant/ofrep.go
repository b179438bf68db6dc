package variant

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/allotmesh/allot/bench/load"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// The OFREP rows (#45): what a bulk evaluation over OFREP costs each
// artifact against a header request of the same configuration and units.
// Variants e (Wasm) and f (native) run G's and Q's configuration with the
// OFREP endpoint on, and send POST OFREPBulkPath with a unit's context
// instead of a header request (report.ofrepRows).

const (
	// OFREPBulkPath is OFREP's bulk evaluation: every flag for a context.
	OFREPBulkPath = "/ofrep/v1/evaluate/flags"
	// ofrepPrefix is the route the Wasm bootstrap buffers the body on.
	ofrepPrefix = "/ofrep/"
	// bufferFilter is Envoy's buffer filter, which the Wasm bootstrap
	// turns on for ofrepPrefix alone, as envoy-configs/sidecar.yaml does.
	bufferFilter = "envoy.filters.http.buffer"
	// ofrepMaxBody is the buffer's bound, the filter's largest body.
	ofrepMaxBody = 65536
)

// ofrepContext is the rest of a bulk evaluation's body after the unit id:
// the attributes RequestHeaders carry, as context fields named for the
// FilterConfig's attributes.
const ofrepContext = `","country":"US","platform":"ios","version":"2.3.1"}}`

// AppendOFREPBody appends the bulk evaluation body for unit id, with the
// attributes a header request carries.
func AppendOFREPBody(dst []byte, id string) []byte {
	return append(append(append(dst, `{"context":{"targetingKey":"`...), id...), ofrepContext...)
}

// ofrepRequest is the load generator's bulk evaluation for v: unit ids as
// ids(v.Cold, v.Units(), seq) gives them, with a header request's
// attributes, appended without allocating.
func ofrepRequest(v Variant, seq uint64) load.RequestFunc {
	id := ids(v.Cold, v.Units(), seq)
	return load.Post(OFREPBulkPath, nil, "application/json", func(dst []byte, i uint64) []byte {
		dst = append(dst, `{"context":{"targetingKey":"`...)
		dst = id(dst, i)
		return append(dst, ofrepContext...)
	})
}

// withOFREP turns the endpoint on.
func withOFREP(cfg *filterv1.FilterConfig) { cfg.Ofrep = &filterv1.Ofrep{Enabled: true} }

// wasmOFREP is variant e's filters: Envoy's buffer filter, off but on the
// OFREP route (bootstrap), then Allot's Wasm module with G's configuration
// and OFREP on. Envoy gives a proxy-wasm filter a body only once its
// headers went on, so without the buffer the filter could not answer in
// the headers' pass; and its route must be one to a cluster, as the
// sidecar's is: a direct_response route answers as the headers reach the
// router, before the body reaches the filter (ofrepRoute).
func wasmOFREP(p *Paths) ([]any, error) {
	f, err := WasmAllot(MainWasm, 50, ofrepShape)(p)
	if err != nil {
		return nil, err
	}
	buffer := map[string]any{"name": bufferFilter, "disabled": true, "typed_config": map[string]any{
		"@type":             "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer",
		"max_request_bytes": ofrepMaxBody,
	}}
	return append([]any{buffer}, f...), nil
}

// ofrepRoute is the route that turns the buffer filter on for OFREP's
// paths and sends them to ofrepNone, when filters has the buffer filter;
// nil otherwise.
func ofrepRoute(filters []any) map[string]any {
	for _, f := range filters {
		if m, ok := f.(map[string]any); ok && m["name"] == bufferFilter {
			return map[string]any{
				"match": map[string]any{"prefix": ofrepPrefix},
				"route": map[string]any{"cluster": ofrepNone},
				"typed_per_filter_config": map[string]any{bufferFilter: map[string]any{
					"@type":  "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.BufferPerRoute",
					"buffer": map[string]any{"max_request_bytes": ofrepMaxBody},
				}},
			}
		}
	}
	return nil
}

// ofrepNone is the OFREP route's cluster, as in envoy-configs' bootstraps:
// a Unix socket under /dev/null, which nothing can listen on, so the
// upstream request the router starts never connects and the filter's
// reply resets it.
const ofrepNone = "allot_ofrep_none"

func ofrepNoneCluster() map[string]any {
	return map[string]any{
		"name": ofrepNone, "type": "STATIC", "connect_timeout": "1s",
		"load_assignment": map[string]any{"cluster_name": ofrepNone, "endpoints": []any{map[string]any{
			"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": map[string]any{
				"pipe": map[string]any{"path": "/dev/null/allot-ofrep"}}}}},
		}}},
	}
}

// ofrepFlags returns, for a unit id under the n-experiment configuration
// with a header request's attributes, the engine's assignment of every
// experiment: key → variation as its header carries it, "" when the unit
// is not in the experiment. The pre-flight checks a bulk answer by it.
func ofrepFlags(n int) (func(id string) (map[string]string, error), error) {
	_, set, err := config.Parse(FilterConfigJSON(n))
	if err != nil {
		return nil, fmt.Errorf("parse the filter config of %d experiments: %w", n, err)
	}
	return func(id string) (map[string]string, error) {
		attrs := engine.Attributes{"id": id, "country": "US", "platform": "ios", "version": "2.3.1"}
		flags := map[string]string{}
		for i, a := range set.Assign(nil, attrs) {
			v := ""
			if a.InExperiment {
				v = a.Value
			}
			flags[set.Keys()[i]] = v
		}
		return flags, nil
	}, nil
}

// CheckBulk checks OFREP variant v's bulk answer for unit id: JSON with one
// flag per experiment of the configuration, each with the variation the
// engine assigns the unit (Flags), reason DEFAULT where it is not in the
// experiment.
func (v Variant) CheckBulk(id string, body []byte) error {
	if v.Flags == nil {
		return fmt.Errorf("variant %s: no expected flags", v.ID)
	}
	want, err := v.Flags(id)
	if err != nil {
		return err
	}
	var answer struct {
		Flags []struct {
			Key, Variant, Reason, ErrorCode string
		}
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return fmt.Errorf("answer not JSON: %w: %.200s", err, body)
	}
	if len(answer.Flags) != len(want) {
		return fmt.Errorf("%d flags, want %d", len(answer.Flags), len(want))
	}
	var errs []error
	for _, f := range answer.Flags {
		w, ok := want[f.Key]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("flag %q: not in the configuration", f.Key))
		case f.ErrorCode != "":
			errs = append(errs, fmt.Errorf("flag %q: error %s", f.Key, f.ErrorCode))
		case w == "" && f.Reason != "DEFAULT":
			errs = append(errs, fmt.Errorf("flag %q: reason %s, want DEFAULT (not in the experiment)", f.Key, f.Reason))
		case w != "" && (f.Variant != w || f.Reason == "DEFAULT"):
			errs = append(errs, fmt.Errorf("flag %q: variant %q reason %s, want %q", f.Key, f.Variant, f.Reason, w))
		}
	}
	return errors.Join(errs...)
}
