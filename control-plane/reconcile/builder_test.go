package reconcile

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/translate"
)

// TestNextBoundaryWithoutClusters: the schedule timer's next boundary
// follows the revision Sync applied even when the refresh built no cluster
// (a replica without proxies): a write that adds an earlier start time
// moves it, without a cluster built in between.
func TestNextBoundaryWithoutClusters(t *testing.T) {
	ctx := context.Background()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBuilder(db, nil, translate.Mesh{}, func() time.Time { return now })
	write := func(key, start string) {
		t.Helper()
		spec := `{"key":"` + key + `","variations":["a","b"],"weights":[0.5,0.5],"startTime":"` + start + `"}`
		e, err := db.Create(ctx, &store.Experiment{Key: key, Spec: []byte(spec)}, "test")
		if err != nil {
			t.Fatal(err)
		}
		b.setApplied(e.Revision) // as Sync does after a refresh
	}
	write("late", "2030-01-01T00:00:00Z")
	if got, want := b.nextBoundary(), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Fatalf("next boundary %v, want %v", got, want)
	}
	write("early", "2027-01-01T00:00:00Z")
	if got, want := b.nextBoundary(), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("after a write adding an earlier start: next boundary %v, want %v", got, want)
	}
}
