package etcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/rollout"
	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/store/storetest"
)

// openAt opens the store under prefix and closes it when the test ends.
func openAt(t *testing.T, c *etcdtest.Cluster, prefix string, opts ...etcd.Option) (*etcd.Store, error) {
	t.Helper()
	s, err := etcd.Open(t.Context(), clientv3.Config{Endpoints: c.Endpoints()}, append(opts, etcd.WithPrefix(prefix))...)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func mustOpenAt(t *testing.T, c *etcdtest.Cluster, prefix string, opts ...etcd.Option) *etcd.Store {
	t.Helper()
	s, err := openAt(t, c, prefix, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", prefix, err)
	}
	return s
}

// sameStore fails the test unless got answers Revision, List and History
// (global and of every key ever written) exactly as want does.
func sameStore(t *testing.T, got, want store.Store) {
	t.Helper()
	ctx := t.Context()
	gr, err1 := got.Revision(ctx)
	wr, err2 := want.Revision(ctx)
	if err := errors.Join(err1, err2); err != nil || gr != wr {
		t.Fatalf("Revision %d, want %d (%v)", gr, wr, err)
	}
	gl, glr, err1 := got.List(ctx)
	wl, wlr, err2 := want.List(ctx)
	if err := errors.Join(err1, err2); err != nil || glr != wlr || !reflect.DeepEqual(gl, wl) {
		t.Fatalf("List at %d = %+v\nwant at %d %+v (%v)", glr, gl, wlr, wl, err)
	}
	keys := map[string]bool{"": true}
	for _, c := range storetest.MustHistory(t, want, "") {
		keys[c.Key] = true
	}
	for k := range keys {
		if g, w := storetest.MustHistory(t, got, k), storetest.MustHistory(t, want, k); !reflect.DeepEqual(g, w) {
			t.Fatalf("History(%q) = %+v\nwant %+v", k, g, w)
		}
	}
}

var importKeys = []string{"gone", "a", "b.c", "team/exp ü%2F", "x_y-z"}

// TestImport: an imported history (more changes than one transaction
// takes, a deleted key, a key that needs escaping) answers like its
// source, the prefix opens normally, and the next write continues the
// revisions and the history.
func TestImport(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	src := mustOpenAt(t, c, "/src/")
	history := storetest.Fill(t, src, 130, importKeys...)
	dst := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	if u := dst.Unfinished(); u != nil {
		t.Fatalf("Unfinished() of an empty prefix = %v", u)
	}
	var steps int
	etcd.SetImportStep(dst, func(int) { steps++ })
	verified := false
	verify := func(context.Context) error {
		verified = true
		sameStore(t, dst, src)
		if _, err := openAt(t, c, "/dst/"); !errors.Is(err, etcd.ErrUnfinishedImport) {
			t.Errorf("Open while the copy is verified: %v, want etcd.ErrUnfinishedImport", err)
		}
		return nil
	}
	if err := dst.Import(ctx, "src", history, verify); err != nil {
		t.Fatalf("Import: %v", err)
	}
	if steps < 3 || !verified {
		t.Errorf("Import took %d transactions of data (want several: the test must cross the batch size), verified %v", steps, verified)
	}
	sameStore(t, dst, src)

	after := mustOpenAt(t, c, "/dst/")
	e, err := after.Create(ctx, &store.Experiment{Key: "new", Spec: json.RawMessage(`{}`)}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(history)) + 1; e.Revision != want {
		t.Fatalf("first write after the import got revision %d, want %d", e.Revision, want)
	}
	h := storetest.MustHistory(t, after, "")
	if last := h[len(h)-1]; len(h) != len(history)+1 || last.Key != "new" || last.Revision != e.Revision {
		t.Fatalf("history after the write ends with %+v (%d changes), want the write", last, len(h))
	}
	list, _, err := src.List(ctx)
	if err != nil || len(list) == 0 {
		t.Fatalf("the source lists %d experiments (%v), want some", len(list), err)
	}
	old := list[0]
	u, err := after.Update(ctx, &store.Experiment{Key: old.Key, Spec: json.RawMessage(`{"later":1}`)}, old.Revision, "bob")
	if err != nil || u.Revision != e.Revision+1 || u.CreateRevision != old.CreateRevision || !u.CreatedAt.Equal(old.CreatedAt) {
		t.Fatalf("compare-and-swap update of imported %+v: %+v, %v", old, u, err)
	}
	if h := storetest.MustHistory(t, after, old.Key); h[len(h)-1].Revision != u.Revision || h[len(h)-2].Revision != old.Revision {
		t.Fatalf("history of an imported key after an update ends with revisions %d, %d; want %d, %d",
			h[len(h)-2].Revision, h[len(h)-1].Revision, old.Revision, u.Revision)
	}
}

func TestImportEmptyHistory(t *testing.T) {
	c := etcdtest.Start(t, 1)
	dst := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	if err := dst.Import(t.Context(), "nothing", nil, nil); err != nil {
		t.Fatal(err)
	}
	s := mustOpenAt(t, c, "/dst/")
	if e, err := s.Create(t.Context(), &store.Experiment{Key: "a", Spec: json.RawMessage(`{}`)}, "alice"); err != nil || e.Revision != 1 {
		t.Fatalf("first write: %+v, %v; want revision 1", e, err)
	}
}

// TestImportRefusesNotEmpty: a prefix holding a store, live replicas, or
// data no unfinished import wrote is refused with what was found, and left
// as it was.
func TestImportRefusesNotEmpty(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	history := storetest.Fill(t, mustOpenAt(t, c, "/src/"), 5, "a", "b")
	tests := []struct {
		name    string
		prepare func(t *testing.T, s *etcd.Store)
		want    string
	}{
		{"a store", func(t *testing.T, s *etcd.Store) {
			if _, err := s.Create(ctx, &store.Experiment{Key: "z", Spec: json.RawMessage(`{}`)}, "alice"); err != nil {
				t.Fatal(err)
			}
		}, "revision 1 (experiments: 1, changes: 1)"},
		{"a live replica", func(t *testing.T, s *etcd.Store) {
			if err := rolloutetcd.New(s.Conn(), "replica-a", 0).Publish(ctx, rollout.Replica{}, nil); err != nil {
				t.Fatal(err)
			}
		}, "allotd replicas replica-a are running"},
		{"data without a marker", func(t *testing.T, s *etcd.Store) {
			if _, err := s.Client().Put(ctx, "/"+t.Name()+"/history/00000000000000000001", "{}"); err != nil {
				t.Fatal(err)
			}
		}, "without a revision or the marker of an unfinished import (experiments: 0, changes: 1, index: 0)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := "/" + t.Name() + "/"
			s := mustOpenAt(t, c, prefix, etcd.ForImport())
			tt.prepare(t, s)
			before, _ := s.Client().Get(ctx, prefix, clientv3.WithPrefix())
			err := s.Import(ctx, "src", history, nil)
			if !errors.Is(err, etcd.ErrNotEmpty) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Import: %v; want etcd.ErrNotEmpty saying %q", err, tt.want)
			}
			after, _ := s.Client().Get(ctx, prefix, clientv3.WithPrefix())
			if !reflect.DeepEqual(before.Kvs, after.Kvs) {
				t.Errorf("the refused Import changed the prefix")
			}
		})
	}
}

// TestImportRejectsBadHistory: a history that contradicts itself is
// refused before anything is written.
func TestImportRejectsBadHistory(t *testing.T) {
	c := etcdtest.Start(t, 1)
	history := storetest.Fill(t, mustOpenAt(t, c, "/src/"), 5, "a", "b")
	dst := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	err := dst.Import(t.Context(), "src", append(history[:2:2], history[3:]...), nil)
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "revision 4 follows 2") {
		t.Fatalf("Import of a history with a gap: %v, want store.ErrInvalid naming the gap", err)
	}
	mustOpenAt(t, c, "/dst/") // no marker: nothing was written
}

// TestImportInterrupted: an Import that fails midway (etcd refuses a
// change as too large, after earlier transactions committed) leaves its
// marker; Open refuses the prefix and names it; an Import opened ForImport
// removes what the first one wrote and imports the whole history.
func TestImportInterrupted(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	first := storetest.Fill(t, mustOpenAt(t, c, "/first/"), 120, "p", "q", "r")
	huge, err := store.Marshal(&store.Experiment{Key: "huge", Spec: json.RawMessage(`"` + strings.Repeat("x", 1600<<10) + `"`),
		Revision: int64(len(first)) + 1, CreateRevision: int64(len(first)) + 1})
	if err != nil {
		t.Fatal(err)
	}
	first = append(first, store.Change{Revision: int64(len(first)) + 1, Key: "huge", Op: store.OpCreate, After: huge})
	dst := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	err = dst.Import(ctx, "first.db", first, nil)
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("Import with a change etcd refuses: %v, want store.ErrInvalid (too large)", err)
	}

	_, err = openAt(t, c, "/dst/")
	if !errors.Is(err, etcd.ErrUnfinishedImport) || !strings.Contains(err.Error(), "first.db") {
		t.Fatalf("Open of an unfinished import: %v, want etcd.ErrUnfinishedImport naming first.db", err)
	}
	again := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	if u := again.Unfinished(); u == nil || u.From != "first.db" || u.Revision != int64(len(first)) {
		t.Fatalf("Unfinished() = %v, want the import from first.db", u)
	}
	src := mustOpenAt(t, c, "/second/")
	if err := again.Import(ctx, "second.db", storetest.Fill(t, src, 20, "a", "b"), nil); err != nil {
		t.Fatalf("Import after an unfinished one: %v", err)
	}
	sameStore(t, mustOpenAt(t, c, "/dst/"), src)
}

// TestImportFencedAgainstWriter: a write by an allotd already running on
// the prefix, in the middle of an Import, makes the Import fail rather
// than mix with the copy, and the marker keeps new allotds off the prefix.
func TestImportFencedAgainstWriter(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	history := storetest.Fill(t, mustOpenAt(t, c, "/src/"), 130, importKeys...)
	running := mustOpenAt(t, c, "/dst/")
	dst := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	etcd.SetImportStep(dst, func(done int) {
		if done == 100 {
			if _, err := running.Create(ctx, &store.Experiment{Key: "meanwhile", Spec: json.RawMessage(`{}`)}, "alice"); err != nil {
				t.Errorf("write during the import: %v", err)
			}
		}
	})
	err := dst.Import(ctx, "src", history, nil)
	if err == nil || !strings.Contains(err.Error(), "written during the import") {
		t.Fatalf("Import with a write in the middle: %v, want it to say the store was written during the import", err)
	}
	if _, err := openAt(t, c, "/dst/"); !errors.Is(err, etcd.ErrUnfinishedImport) {
		t.Fatalf("Open after a fenced import: %v, want etcd.ErrUnfinishedImport", err)
	}
}

// TestImportUnverified: a copy whose verification fails (or is
// interrupted) is complete, revision included, but keeps its marker: Open
// refuses it, and the next Import replaces it, meta/revision included.
func TestImportUnverified(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	src := mustOpenAt(t, c, "/src/")
	history := storetest.Fill(t, src, 30, "a", "b", "c")
	dst := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	wrong := errors.New("3 mismatches")
	err := dst.Import(ctx, "src.db", append(history, storetest.Fill(t, src, 5, "d")[len(history):]...), func(context.Context) error { return wrong })
	if !errors.Is(err, wrong) || !strings.Contains(err.Error(), "verify: 3 mismatches") {
		t.Fatalf("Import whose verification fails: %v, want the verification's error", err)
	}
	if _, err := openAt(t, c, "/dst/"); !errors.Is(err, etcd.ErrUnfinishedImport) {
		t.Fatalf("Open of an unverified copy: %v, want etcd.ErrUnfinishedImport", err)
	}
	again := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	if err := again.Import(ctx, "src.db", history, nil); err != nil {
		t.Fatalf("Import over an unverified copy: %v", err)
	}
	// The source has 5 changes more than history now: compare with history.
	s := mustOpenAt(t, c, "/dst/")
	if rev, err := s.Revision(ctx); err != nil || rev != int64(len(history)) {
		t.Fatalf("revision after the second Import %d (%v), want %d", rev, err, len(history))
	}
	if h := storetest.MustHistory(t, s, ""); !reflect.DeepEqual(h, history) {
		t.Fatalf("history after the second Import has %d changes, want the %d imported", len(h), len(history))
	}
	if h := storetest.MustHistory(t, s, "d"); len(h) != 0 {
		t.Fatalf("the first Import's key d still has %d changes", len(h))
	}
}

// TestImportUnansweredSteps: when the transaction writing meta/revision or
// the one removing the marker commits but its answer is lost, the retry's
// condition fails; Import recognises its own commit from the state and
// goes on. The test commits those two writes itself, just before Import's.
func TestImportUnansweredSteps(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	src := mustOpenAt(t, c, "/src/")
	history := storetest.Fill(t, src, 30, "a", "b", "c")
	list, _, err := src.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dst := mustOpenAt(t, c, "/dst/", etcd.ForImport())
	cli := dst.Client()
	etcd.SetImportStep(dst, func(written int) {
		if written == 2*len(history)+len(list) { // the data is written: the revision is next
			if _, err := cli.Put(ctx, "/dst/meta/revision", fmt.Sprint(len(history))); err != nil {
				t.Error(err)
			}
		}
	})
	err = dst.Import(ctx, "src", history, func(context.Context) error {
		_, err := cli.Delete(ctx, "/dst/meta/import")
		return err
	})
	if err != nil {
		t.Fatalf("Import whose last two steps were committed unanswered: %v", err)
	}
	sameStore(t, mustOpenAt(t, c, "/dst/"), src)
}
