package admin_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt/bolttest"
	"github.com/allotmesh/allot/control-plane/translate"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// interleavingStore is a real store whose reads run a hook once, after the
// read and before it returns: a write another caller commits between the
// service's authorization read and its write.
type interleavingStore struct {
	store.Store
	mu   sync.Mutex
	hook func()
}

func (s *interleavingStore) after() {
	s.mu.Lock()
	h := s.hook
	s.hook = nil
	s.mu.Unlock()
	if h != nil {
		h()
	}
}

func (s *interleavingStore) Get(ctx context.Context, key string) (*store.Experiment, error) {
	e, err := s.Store.Get(ctx, key)
	s.after()
	return e, err
}

func (s *interleavingStore) List(ctx context.Context) ([]*store.Experiment, int64, error) {
	l, rev, err := s.Store.List(ctx)
	s.after()
	return l, rev, err
}

// TestOwnershipCheckedOnTheWrittenRevision: an admin moves an experiment
// from team-b to team-a between the service's read of it and its write;
// team-b's delete, update or transition, authorized on the read, must then
// fail with a conflict and change nothing, not succeed under the old owner.
func TestOwnershipCheckedOnTheWrittenRevision(t *testing.T) {
	root := &admin.Principal{Name: "root", Role: admin.RoleAdmin}
	bob := &admin.Principal{Name: "bob", Role: admin.RoleOwner, Namespaces: []string{"team-b"}}
	tests := []struct {
		name  string
		write func(s *admin.Service, read *experimentv1.Experiment) error
	}{
		{"delete at revision 0", func(s *admin.Service, _ *experimentv1.Experiment) error {
			return s.Delete(context.Background(), bob, "exp", 0)
		}},
		{"update with the revision the transfer wrote (predictable)", func(s *admin.Service, read *experimentv1.Experiment) error {
			e := exp("exp", "team-b", read.Revision+1)
			e.Description = "bob's change"
			_, err := s.Update(context.Background(), bob, e)
			return err
		}},
		{"update with the revision read", func(s *admin.Service, read *experimentv1.Experiment) error {
			e := exp("exp", "team-b", read.Revision)
			e.Description = "bob's change"
			_, err := s.Update(context.Background(), bob, e)
			return err
		}},
		{"pause at revision 0", func(s *admin.Service, _ *experimentv1.Experiment) error {
			_, err := s.Pause(context.Background(), bob, "exp", 0)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
			st := &interleavingStore{Store: db}
			svc := admin.NewService(st, nil, admin.WithMesh(translate.Mesh{WasmPath: "/allot.wasm"}))
			ctx := context.Background()
			read, err := svc.Create(ctx, root, exp("exp", "team-b", 0))
			if err != nil {
				t.Fatal(err)
			}
			st.mu.Lock()
			st.hook = func() {
				moved := exp("exp", "team-a", read.Revision)
				if _, err := svc.Update(ctx, root, moved); err != nil {
					t.Errorf("admin's transfer to team-a: %v", err)
				}
			}
			st.mu.Unlock()

			err = tt.write(svc, read)
			if code := codeOf(err); code != admin.CodeConflict {
				t.Errorf("team-b's write after the transfer: %v (code %q), want %q", err, code, admin.CodeConflict)
			}
			got, gerr := svc.Get(ctx, root, "exp")
			if gerr != nil {
				t.Fatalf("the experiment is gone after team-b's write raced the transfer: %v", gerr)
			}
			if got.Owner != "team-a" || got.Description != "" || experiment.Status(got) != experiment.StatusRunning || got.Revision != read.Revision+1 {
				t.Errorf("after team-b's write: owner %q, description %q, status %s, revision %d; want the transfer's team-a, \"\", running, %d",
					got.Owner, got.Description, experiment.Status(got), got.Revision, read.Revision+1)
			}
		})
	}
}

// codeOf is the admin error code err maps to ("" for nil).
func codeOf(err error) admin.Code {
	if err == nil {
		return ""
	}
	return admin.ErrorOf(err).Code
}
