package reconcile

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/translate"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// TestNextBoundaryWithoutClusters: the schedule timer's next boundary
// follows the revision Sync applied even when the refresh built no cluster
// (a replica without proxies): a write that adds an earlier start time
// moves it, without a cluster built in between.
func TestNextBoundaryWithoutClusters(t *testing.T) {
	ctx := context.Background()
	db := openBolt(t)
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

// revisionCounter counts the reads of the store's revision.
type revisionCounter struct {
	store.Store
	reads int
}

func (c *revisionCounter) Revision(ctx context.Context) (int64, error) {
	c.reads++
	return c.Store.Revision(ctx)
}

// TestBuildFromWatchedRevision: a build from the revision a watch delivered
// (Sync's RefreshFrom) reads the experiments without reading the store's
// revision first, a build without one reads it; Known gives the versions of
// the experiments read last and their revision, without a read, and
// nothing before any read.
func TestBuildFromWatchedRevision(t *testing.T) {
	ctx := context.Background()
	db := openBolt(t)
	st := &revisionCounter{Store: db}
	b := NewBuilder(st, nil, translate.Mesh{WasmPath: "/allot.wasm"}, nil)
	if _, _, ok := b.Known([]string{"web"}); ok {
		t.Fatal("Known before any read: ok")
	}
	write := func(key string) int64 {
		t.Helper()
		spec := `{"key":"` + key + `","variations":["a","b"],"weights":[0.5,0.5]}`
		e, err := db.Create(ctx, &store.Experiment{Key: key, Spec: []byte(spec)}, "test")
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision
	}
	rev := write("one")
	v1, _, err := b.Build("web", rev)
	if err != nil {
		t.Fatal(err)
	}
	if st.reads != 0 {
		t.Fatalf("a build from revision %d read the store's revision %d times", rev, st.reads)
	}
	known, at, ok := b.Known([]string{"web"})
	if !ok || at != rev || known["web"] != v1 {
		t.Fatalf("Known: %v at %d (%v), want web=%s at %d", known, at, ok, v1, rev)
	}
	write("two")
	if known, at, _ := b.Known([]string{"web"}); at != rev || known["web"] != v1 {
		t.Fatalf("Known after a write it did not read: %v at %d, want web=%s at %d", known, at, v1, rev)
	}
	v2, _, err := b.Build("web", 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.reads != 1 || v2 == v1 {
		t.Fatalf("a build of the latest: %d reads of the revision, version %s (was %s), want 1 read and a new version", st.reads, v2, v1)
	}
}

// TestExperimentsDecodeOnlyChanged: a list read after a write decodes the
// experiments it changed and keeps the others as decoded before: an
// unchanged experiment is the same value, an updated one its new
// definition, a deleted one gone.
func TestExperimentsDecodeOnlyChanged(t *testing.T) {
	ctx := context.Background()
	db := openBolt(t)
	b := NewBuilder(db, nil, translate.Mesh{WasmPath: "/allot.wasm"}, nil)
	spec := func(key, v string) []byte {
		return []byte(`{"key":"` + key + `","variations":["a","` + v + `"],"weights":[0.5,0.5]}`)
	}
	var last int64
	for _, k := range []string{"keep", "change", "drop"} {
		e, err := db.Create(ctx, &store.Experiment{Key: k, Spec: spec(k, "b")}, "test")
		if err != nil {
			t.Fatal(err)
		}
		last = e.Revision
	}
	byKey := func(rev int64) map[string]*experimentv1.Experiment {
		t.Helper()
		exps, err := b.experiments(rev)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*experimentv1.Experiment{}
		for _, e := range exps {
			out[e.GetKey()] = e
		}
		return out
	}
	before := byKey(last)
	cur, err := db.Get(ctx, "change")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Update(ctx, &store.Experiment{Key: "change", Spec: spec("change", "c")}, cur.Revision, "test"); err != nil {
		t.Fatal(err)
	}
	cur, err = db.Get(ctx, "drop")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(ctx, "drop", cur.Revision, "test"); err != nil {
		t.Fatal(err)
	}
	after := byKey(last + 2)
	if len(after) != 2 || after["keep"] != before["keep"] || after["change"] == before["change"] ||
		after["change"].GetVariations()[1].GetStringValue() != "c" {
		t.Fatalf("after an update and a delete: %v, want keep as decoded before and change's new definition", after)
	}
}

// openBolt opens a bbolt store in the test's directory, closed with it.
func openBolt(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
