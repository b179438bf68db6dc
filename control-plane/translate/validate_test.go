package translate_test

import (
	"errors"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/translate"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// TestValidate: every problem is listed at once with its path relative to
// the experiment; the control plane's fields are checked here, the
// definition by the filter's decoder and engine (with the mesh's saved
// groups).
func TestValidate(t *testing.T) {
	groups := translate.Mesh{Filter: &filterv1.FilterConfig{SavedGroups: map[string]*structpb.ListValue{
		"beta": {Values: []*structpb.Value{structpb.NewStringValue("u1")}},
	}}}
	tests := []struct {
		name string
		json string
		mesh translate.Mesh
		want []string
	}{
		{"valid with every control-plane field", `{"key": "k", "variations": ["a", "b"], "status": "paused", "owner": "team-a",
			"services": ["checkout"], "description": "d", "startTime": "2030-01-01T00:00:00Z", "endTime": "2030-02-01T00:00:00Z"}`, translate.Mesh{}, nil},
		{"every problem at once", `{"key": "Bad Key", "variations": ["a"], "weights": [0.3], "status": "live",
			"services": ["checkout", ""], "startTime": "2030-01-01T12:00:00Z", "endTime": "2030-01-01T11:00:00Z"}`, translate.Mesh{}, []string{
			`key: "Bad Key" must match ^[a-z][a-z0-9._-]{0,62}$`,
			"variations: got 1 variations, want at least 2",
			"weights: sum 0.3, want 1",
			`status: unknown status "live", want draft, running, paused or stopped`,
			"services[1]: empty service name",
			"endTime: must be after startTime",
		}},
		{"missing key", `{"variations": ["a", "b"]}`, translate.Mesh{}, []string{"key: is required"}},
		{"end equals start", `{"key": "k", "variations": ["a", "b"], "startTime": "2030-01-01T00:00:00Z", "endTime": "2030-01-01T00:00:00Z"}`,
			translate.Mesh{}, []string{"endTime: must be after startTime"}},
		{"saved group unknown without the mesh", `{"key": "k", "variations": ["a", "b"], "condition": {"id": {"$inGroup": "beta"}}}`,
			translate.Mesh{}, []string{`condition.id.$inGroup: unknown saved group "beta"`}},
		{"saved group from the mesh", `{"key": "k", "variations": ["a", "b"], "condition": {"id": {"$inGroup": "beta"}}}`, groups, nil},
		{"sticky bucketing", `{"key": "k", "variations": ["a", "b"], "bucketVersion": 2, "minBucketVersion": 2, "disableStickyBucketing": true}`,
			translate.Mesh{}, nil},
		{"bucket versions negative", `{"key": "k", "variations": ["a", "b"], "bucketVersion": -1, "minBucketVersion": -2}`, translate.Mesh{}, []string{
			"bucketVersion: -1 is negative",
			"minBucketVersion: -2 is negative",
		}},
		{"minBucketVersion above bucketVersion", `{"key": "k", "variations": ["a", "b"], "bucketVersion": 1, "minBucketVersion": 2}`, translate.Mesh{}, []string{
			"minBucketVersion: 2 is above bucketVersion 1: every unit's new sticky bucket would be blocked",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &experimentv1.Experiment{}
			if err := protojson.Unmarshal([]byte(tc.json), e); err != nil {
				t.Fatal(err)
			}
			err := translate.Validate(e, tc.mesh)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ae *translate.ValidationError
			if !errors.As(err, &ae) {
				t.Fatalf("Validate: %v, want a *translate.ValidationError", err)
			}
			for _, w := range tc.want {
				if !slices.Contains(ae.Details, w) {
					t.Errorf("details %q lack %q", ae.Details, w)
				}
			}
			if len(ae.Details) != len(tc.want) {
				t.Errorf("details %q, want %q", ae.Details, tc.want)
			}
		})
	}
}
