package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt/bolttest"
)

// countingStore counts List calls, and fails them while fail is set; a
// List blocks until release is closed, when set.
type countingStore struct {
	store.Store
	lists   atomic.Int32
	fail    atomic.Bool
	release chan struct{}
}

func (s *countingStore) List(ctx context.Context) ([]*store.Experiment, int64, error) {
	s.lists.Add(1)
	if s.release != nil {
		<-s.release
	}
	if s.fail.Load() {
		return nil, 0, store.ErrUnavailable
	}
	return s.Store.List(ctx)
}

// TestLists: five callers asking at once, while the first one's read is
// held, make one read between them; what was read serves a revision it
// covers without a read, and a newer revision is read; a failed read
// serves no one after it.
func TestLists(t *testing.T) {
	ctx := t.Context()
	db := bolttest.Open(t, filepath.Join(t.TempDir(), "allot.db"))
	create := func(key string) int64 {
		t.Helper()
		e, err := db.Create(ctx, &store.Experiment{Key: key, Owner: "o", Spec: json.RawMessage(`{}`)}, "test")
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision
	}
	rev := create("a")
	cs := &countingStore{Store: db, release: make(chan struct{})}
	l := store.NewLists(cs)

	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items, got, err := l.List(ctx, rev)
			if err != nil || got < rev || len(items) != 1 {
				t.Errorf("List(%d) = %d items at %d, %v", rev, len(items), got, err)
			}
		}()
	}
	for cs.lists.Load() == 0 { // the first caller's read is under way once counted
		runtime.Gosched()
	}
	close(cs.release)
	wg.Wait()
	if n := cs.lists.Load(); n != 1 {
		t.Errorf("5 callers at once made %d reads, want 1", n)
	}
	if _, _, err := l.List(ctx, rev); err != nil || cs.lists.Load() != 1 {
		t.Errorf("a revision already read was read again (%d reads, %v)", cs.lists.Load(), err)
	}

	rev = create("b")
	cs.fail.Store(true)
	if _, _, err := l.List(ctx, rev); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a failed read: %v", err)
	}
	cs.fail.Store(false)
	items, got, err := l.List(ctx, rev)
	if err != nil || got < rev || len(items) != 2 || cs.lists.Load() != 3 {
		t.Errorf("after the failure: %d items at %d (%v), %d reads; want 2 items at %d, 3 reads", len(items), got, err, cs.lists.Load(), rev)
	}
}
