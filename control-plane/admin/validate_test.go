package admin_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/translate"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// TestEvaluateHeaderPrefix: the preview's header names come from the
// configuration as the filter decodes it: the mesh's prefix, or the
// filter's default.
func TestEvaluateHeaderPrefix(t *testing.T) {
	for _, tc := range []struct {
		name string
		mesh translate.Mesh
		want string
	}{
		{"default", translate.Mesh{}, "x-experiment-k"},
		{"mesh prefix", translate.Mesh{Filter: &filterv1.FilterConfig{HeaderPrefix: "x-ab-"}}, "x-ab-k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			svc := admin.NewService(db, nil, admin.WithMesh(tc.mesh))
			p := &admin.Principal{Name: "root", Role: admin.RoleAdmin}
			e := &experimentv1.Experiment{Key: "k", Variations: []*structpb.Value{structpb.NewStringValue("a"), structpb.NewStringValue("b")}}
			if _, err := svc.Create(context.Background(), p, e); err != nil {
				t.Fatal(err)
			}
			out, err := svc.Evaluate(context.Background(), p, "", map[string]any{"id": "u1"}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Assignments) != 1 || out.Assignments[0].Header != tc.want {
				t.Fatalf("assignments %v, want one with header %s", out.Assignments, tc.want)
			}
		})
	}
}
