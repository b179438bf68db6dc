package store_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/store"
)

// doc encodes the stored document of key at rev, as a store writes it.
func doc(t *testing.T, key string, rev int64, spec string) json.RawMessage {
	t.Helper()
	b, err := store.Marshal(&store.Experiment{Key: key, Spec: json.RawMessage(spec), Revision: rev, CreateRevision: rev})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReplay(t *testing.T) {
	a1, b2, a3 := doc(t, "a", 1, `{"v":1}`), doc(t, "b", 2, `{}`), doc(t, "a", 3, `{"v":2}`)
	history := []store.Change{
		{Revision: 1, Key: "a", Op: store.OpCreate, After: a1},
		{Revision: 2, Key: "b", Op: store.OpCreate, After: b2},
		{Revision: 3, Key: "a", Op: store.OpUpdate, Before: a1, After: a3},
		{Revision: 4, Key: "b", Op: store.OpDelete, Before: b2},
		{Revision: 5, Key: "b", Op: store.OpCreate, After: doc(t, "b", 5, `{"again":true}`)},
	}
	got, err := store.Replay(history)
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	if len(got) != 2 || got[0].Key != "a" || got[0].Revision != 3 || string(got[0].Spec) != `{"v":2}` ||
		got[1].Key != "b" || got[1].Revision != 5 {
		t.Fatalf("Replay = %+v, want a at 3 and b at 5", got)
	}
	if got, err := store.Replay(nil); err != nil || len(got) != 0 {
		t.Fatalf("Replay(nil) = %v, %v; want no experiments", got, err)
	}
}

// TestReplayRejects: every way a history can contradict itself is
// reported with the revision it happens at, never repaired.
func TestReplayRejects(t *testing.T) {
	a1, a2 := doc(t, "a", 1, `{"v":1}`), doc(t, "a", 2, `{"v":2}`)
	create := store.Change{Revision: 1, Key: "a", Op: store.OpCreate, After: a1}
	tests := []struct {
		name   string
		second store.Change
		want   string
	}{
		{"gap", store.Change{Revision: 3, Key: "a", Op: store.OpUpdate, Before: a1, After: a2}, "revision 3 follows 1"},
		{"unknown op", store.Change{Revision: 2, Key: "a", Op: "rename", Before: a1}, "unknown op"},
		{"empty key", store.Change{Revision: 2, Op: store.OpCreate, After: a2}, "empty key"},
		{"create twice", store.Change{Revision: 2, Key: "a", Op: store.OpCreate, After: a2}, "create of a key that exists"},
		{"update of absent", store.Change{Revision: 2, Key: "b", Op: store.OpUpdate, After: doc(t, "b", 2, `{}`)}, "does not exist"},
		{"before differs", store.Change{Revision: 2, Key: "a", Op: store.OpUpdate, Before: a2, After: a2}, "before is not the stored experiment"},
		{"delete with after", store.Change{Revision: 2, Key: "a", Op: store.OpDelete, Before: a1, After: a2}, "delete with an after"},
		{"after of another key", store.Change{Revision: 2, Key: "a", Op: store.OpUpdate, Before: a1, After: doc(t, "b", 2, `{}`)}, `after is experiment "b"`},
		{"after of another revision", store.Change{Revision: 2, Key: "a", Op: store.OpUpdate, Before: a1, After: a1}, "after has revision 1"},
		{"after not JSON", store.Change{Revision: 2, Key: "a", Op: store.OpUpdate, Before: a1, After: json.RawMessage(`{`)}, "after:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := store.Replay([]store.Change{create, tt.second})
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("Replay: %v, want store.ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), "history[1]") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say history[1] and %q", err, tt.want)
			}
		})
	}
}
