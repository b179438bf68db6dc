package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
)

func testInvalidInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	valid := mustCreate(t, s, exp("a", "o", `{"v":1}`), "alice")
	tests := []struct {
		name string
		call func() error
	}{
		{"Create with invalid spec", func() error {
			_, err := s.Create(ctx, exp("b", "o", `{"v":`), "alice")
			return err
		}},
		{"Create with empty spec", func() error {
			_, err := s.Create(ctx, exp("b", "o", ``), "alice")
			return err
		}},
		{"Create with trailing garbage", func() error {
			_, err := s.Create(ctx, exp("b", "o", `{} {}`), "alice")
			return err
		}},
		{"Create with empty key", func() error {
			_, err := s.Create(ctx, exp("", "o", `{}`), "alice")
			return err
		}},
		{"Create nil", func() error {
			_, err := s.Create(ctx, nil, "alice")
			return err
		}},
		{"Update with invalid spec", func() error {
			_, err := s.Update(ctx, exp("a", "o", `not json`), 0, "alice")
			return err
		}},
		{"Update with negative expect", func() error {
			_, err := s.Update(ctx, exp("a", "o", `{}`), -1, "alice")
			return err
		}},
		{"Delete with negative expect", func() error {
			return s.Delete(ctx, "a", -1, "alice")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErr(t, tt.name, tt.call(), store.ErrInvalid)
		})
	}
	if _, err := s.Get(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("rejected Create stored something: Get(b) error %v", err)
	}
	checkExperiment(t, "Get after rejected writes", mustGet(t, s, "a"), valid)
	if rev := mustRevision(t, s); rev != 1 {
		t.Errorf("Revision after rejected writes = %d, want 1", rev)
	}
}

// testLargestSpec: a Spec of experiment.MaxSpecBytes, the largest the admin API
// lets through, with the longest owner and actor, goes through every write
// (an update carries it about five times) and reads back unchanged.
func testLargestSpec(t *testing.T, s store.Store) {
	ctx := t.Context()
	spec := func(fill byte) json.RawMessage {
		b := append([]byte(`{"description":"`), bytes.Repeat([]byte{fill}, experiment.MaxSpecBytes-len(`{"description":""}`))...)
		return append(b, `"}`...)
	}
	owner := string(bytes.Repeat([]byte{'o'}, 128))
	actor := string(bytes.Repeat([]byte{'a'}, 128))
	e := &store.Experiment{Key: "big", Owner: owner, Spec: spec('x')}
	if len(e.Spec) != experiment.MaxSpecBytes {
		t.Fatalf("spec is %d bytes, want %d", len(e.Spec), experiment.MaxSpecBytes)
	}
	c, err := s.Create(ctx, e, actor)
	if err != nil {
		t.Fatalf("create the largest spec: %v", err)
	}
	e.Spec = spec('y')
	u, err := s.Update(ctx, e, c.Revision, actor)
	if err != nil {
		t.Fatalf("update the largest spec: %v", err)
	}
	got, err := s.Get(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Spec, spec('y')) || got.Revision != u.Revision {
		t.Fatalf("read back %d bytes at revision %d, want the %d written at %d", len(got.Spec), got.Revision, experiment.MaxSpecBytes, u.Revision)
	}
	if err := s.Delete(ctx, "big", u.Revision, actor); err != nil {
		t.Fatalf("delete the largest spec: %v", err)
	}
	h, err := s.History(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 {
		t.Fatalf("history has %d changes, want create, update, delete", len(h))
	}
}
