package etcd_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/store/storetest"
)

// countingStore counts the reads of every experiment (List) of the store it
// wraps, which stays a store.Follower.
type countingStore struct {
	*etcd.Store
	lists atomic.Int64
}

func (c *countingStore) List(ctx context.Context) ([]*store.Experiment, int64, error) {
	c.lists.Add(1)
	return c.Store.List(ctx)
}

// summary is what a list says of each experiment: its key, the revision
// of its last change and its spec.
func summary(t *testing.T, items []*store.Experiment) string {
	t.Helper()
	type item struct {
		Key      string
		Revision int64
		Spec     string
	}
	out := make([]item, 0, len(items))
	for _, e := range items {
		out = append(out, item{e.Key, e.Revision, string(e.Spec)})
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestListsFollowTheWatch: after each write, by this replica or another,
// the list the builder and the outcomes take (store.Lists, as of the
// revision the Watch delivered) is what List reads, sorted the same way,
// and comes from the store's watch of the experiments without a read.
func TestListsFollowTheWatch(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := t.Context()
	prefix := "/allot-follow/"
	self := &countingStore{Store: c.Open(t, etcd.WithPrefix(prefix))}
	other := c.Open(t, etcd.WithPrefix(prefix))
	lists := store.NewLists(self)
	revs := self.Watch(ctx)
	if got := receive(t, revs); got != 0 {
		t.Fatalf("first watched revision %d, want 0", got)
	}
	writes := []func(st store.Store) error{
		func(st store.Store) error {
			_, err := st.Create(ctx, &store.Experiment{Key: "b", Owner: "o", Spec: []byte(`{"v":1}`)}, "alice")
			return err
		},
		func(st store.Store) error {
			_, err := st.Create(ctx, &store.Experiment{Key: "a", Owner: "o", Spec: []byte(`{"v":2}`)}, "alice")
			return err
		},
		func(st store.Store) error {
			_, err := st.Update(ctx, &store.Experiment{Key: "b", Owner: "o", Spec: []byte(`{"v":3}`)}, 1, "bob")
			return err
		},
		func(st store.Store) error {
			_, err := st.Create(ctx, &store.Experiment{Key: "c", Owner: "o", Spec: []byte(`{"v":4}`)}, "alice")
			return err
		},
		func(st store.Store) error { return st.Delete(ctx, "a", 2, "bob") },
	}
	for i, write := range writes {
		writer := store.Store(self.Store)
		if i%2 == 1 {
			writer = other
		}
		if err := write(writer); err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
		want := int64(i + 1)
		for got := int64(0); got != want; {
			if got = receive(t, revs); got > want {
				t.Fatalf("watched revision %d, want %d", got, want)
			}
		}
		items, rev, err := lists.List(ctx, want)
		if err != nil {
			t.Fatalf("lists after write %d: %v", want, err)
		}
		read, readRev, err := self.Store.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rev != want || readRev != want {
			t.Fatalf("after write %d: lists at revision %d, List at %d", want, rev, readRev)
		}
		if got, exp := summary(t, items), summary(t, read); got != exp {
			t.Fatalf("after write %d: lists gave %s, List reads %s", want, got, exp)
		}
	}
	if n := self.lists.Load(); n != 0 {
		t.Fatalf("lists read every experiment %d times, want none: the watch delivered them", n)
	}
	if got, want := summary(t, mustList(t, lists, 5)), `[{"Key":"b","Revision":3,"Spec":"{\"v\":3}"},{"Key":"c","Revision":4,"Spec":"{\"v\":4}"}]`; got != want {
		t.Fatalf("final list %s, want %s", got, want)
	}
}

func mustList(t *testing.T, l *store.Lists, atLeast int64) []*store.Experiment {
	t.Helper()
	items, _, err := l.List(t.Context(), atLeast)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// TestFollowedDeclinesAValueItCannotDecode: an experiment's value that
// does not decode stops Followed from answering at once (no wait), and
// Lists reports the error List reads.
func TestFollowedDeclinesAValueItCannotDecode(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	prefix := "/allot-corrupt/"
	st := &countingStore{Store: c.Open(t, etcd.WithPrefix(prefix))}
	revs := st.Watch(ctx)
	receive(t, revs)
	if _, err := st.Client().Put(ctx, prefix+"experiments/bad", "not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, &store.Experiment{Key: "a", Owner: "o", Spec: []byte(`{}`)}, "alice"); err != nil {
		t.Fatal(err)
	}
	for got := int64(0); got != 1; got = receive(t, revs) {
	}
	_, _, err := store.NewLists(st).List(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "experiments/bad") {
		t.Fatalf("lists over a value that does not decode: %v, want List's error naming it", err)
	}
	start := time.Now()
	if _, _, ok := st.Followed(ctx, 1); ok {
		t.Fatal("Followed answered over a value that does not decode")
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("Followed waited %v over a value that does not decode", d)
	}
}

// TestFollowedOnlyWhatTheWatchDelivered: without a Watch, or for a
// revision the Watch has not delivered, Followed declines, and Lists
// reads.
func TestFollowedOnlyWhatTheWatchDelivered(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	st := &countingStore{Store: c.Open(t)}
	if _, err := st.Create(ctx, &store.Experiment{Key: "a", Owner: "o", Spec: []byte(`{}`)}, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := st.Followed(ctx, 0); ok {
		t.Fatal("Followed answered with no Watch running")
	}
	lists := store.NewLists(st)
	if items, rev, err := lists.List(ctx, 1); err != nil || rev != 1 || len(items) != 1 {
		t.Fatalf("lists without a watch: %d items at %d, %v", len(items), rev, err)
	}
	if n := st.lists.Load(); n != 1 {
		t.Fatalf("lists without a watch read %d times, want 1", n)
	}
	revs := st.Watch(ctx)
	for got := int64(0); got != 1; got = receive(t, revs) {
	}
	start := time.Now()
	if _, _, ok := st.Followed(ctx, 2); ok {
		t.Fatal("Followed answered for a revision the watch did not deliver")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Followed took %v to decline a revision the watch did not deliver", d)
	}
	deadline := time.Now().Add(storetest.WaitTimeout)
	for {
		items, rev, ok := st.Followed(ctx, 1)
		if ok {
			if rev != 1 || len(items) != 1 || items[0].Key != "a" {
				t.Fatalf("Followed gave %d items at %d", len(items), rev)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Followed never answered for the revision the watch delivered")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
