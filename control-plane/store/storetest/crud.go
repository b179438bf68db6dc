package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/store"
)

func testEmptyStore(t *testing.T, s store.Store) {
	if rev := mustRevision(t, s); rev != 0 {
		t.Errorf("Revision of a new store = %d, want 0", rev)
	}
	list, rev, err := s.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 0 || rev != 0 {
		t.Errorf("List of a new store = %d experiments at revision %d, want 0 at 0", len(list), rev)
	}
	if h := MustHistory(t, s, ""); len(h) != 0 {
		t.Errorf("History of a new store has %d changes, want 0", len(h))
	}
}

func testCreateGetList(t *testing.T, s store.Store) {
	in := map[string]*store.Experiment{
		"beta":  exp("beta", "team-b", `{"variants": ["a", "b"], "weights": [0.5, 0.5]}`),
		"alpha": exp("alpha", "team-a", `{"note": "<ü & 日本>"}`),
		"gamma": exp("gamma", "team-a", `[1, 2, 3]`),
	}
	created := map[string]*store.Experiment{}
	for i, key := range []string{"beta", "alpha", "gamma"} {
		e := in[key]
		got := mustCreate(t, s, e, "alice")
		rev := int64(i + 1)
		if got.Revision != rev || got.CreateRevision != rev {
			t.Fatalf("Create(%q): Revision %d CreateRevision %d, want both %d", key, got.Revision, got.CreateRevision, rev)
		}
		if got.CreatedAt.IsZero() || !got.UpdatedAt.Equal(got.CreatedAt) {
			t.Fatalf("Create(%q): CreatedAt %v UpdatedAt %v, want equal and non-zero", key, got.CreatedAt, got.UpdatedAt)
		}
		if got.CreatedAt.Location() != time.UTC {
			t.Errorf("Create(%q): CreatedAt in %v, want UTC", key, got.CreatedAt.Location())
		}
		want := &store.Experiment{
			Key: e.Key, Owner: e.Owner, Spec: e.Spec,
			Revision: rev, CreateRevision: rev,
			CreatedAt: got.CreatedAt, UpdatedAt: got.CreatedAt,
			CreatedBy: "alice", UpdatedBy: "alice",
		}
		checkExperiment(t, "Create("+key+")", got, want)
		if e.Revision != 0 || e.CreatedBy != "" {
			t.Fatalf("Create(%q) modified its input: %+v", key, e)
		}
		created[key] = got
	}
	for key, want := range created {
		checkExperiment(t, "Get("+key+")", mustGet(t, s, key), want)
	}
	list, rev, err := s.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if rev != 3 {
		t.Errorf("List revision = %d, want 3", rev)
	}
	var keys []string
	for _, e := range list {
		keys = append(keys, e.Key)
		checkExperiment(t, "List entry "+e.Key, e, created[e.Key])
	}
	if want := []string{"alpha", "beta", "gamma"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("List keys = %q, want %q", keys, want)
	}
}

func testCreateExists(t *testing.T, s store.Store) {
	first := mustCreate(t, s, exp("a", "team-a", `{"v":1}`), "alice")
	_, err := s.Create(t.Context(), exp("a", "team-b", `{"v":2}`), "bob")
	wantErr(t, "second Create", err, store.ErrExists)
	checkExperiment(t, "Get after failed Create", mustGet(t, s, "a"), first)
	if rev := mustRevision(t, s); rev != 1 {
		t.Errorf("Revision after failed Create = %d, want 1", rev)
	}
	if h := MustHistory(t, s, ""); len(h) != 1 {
		t.Errorf("History after failed Create has %d changes, want 1", len(h))
	}
}

func testNotFound(t *testing.T, s store.Store) {
	mustCreate(t, s, exp("present", "o", `{}`), "alice")
	ctx := t.Context()
	_, err := s.Get(ctx, "missing")
	wantErr(t, "Get(missing)", err, store.ErrNotFound)
	for _, expect := range []int64{0, 1, 7} {
		_, err = s.Update(ctx, exp("missing", "o", `{}`), expect, "alice")
		wantErr(t, fmt.Sprintf("Update(missing, expect %d)", expect), err, store.ErrNotFound)
		err = s.Delete(ctx, "missing", expect, "alice")
		wantErr(t, fmt.Sprintf("Delete(missing, expect %d)", expect), err, store.ErrNotFound)
	}
	if rev := mustRevision(t, s); rev != 1 {
		t.Errorf("Revision after failed writes = %d, want 1", rev)
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("failed Update created the key: Get error %v", err)
	}
}

func testUpdateCAS(t *testing.T, s store.Store) {
	ctx := t.Context()
	created := mustCreate(t, s, exp("a", "team-a", `{"v":1}`), "alice")
	mustCreate(t, s, exp("other", "team-a", `{}`), "alice") // revision 2

	got, err := s.Update(ctx, exp("a", "team-b", `{"v":2}`), created.Revision, "bob")
	if err != nil {
		t.Fatalf("Update with current revision: %v", err)
	}
	want := &store.Experiment{
		Key: "a", Owner: "team-b", Spec: json.RawMessage(`{"v":2}`),
		Revision: 3, CreateRevision: created.CreateRevision,
		CreatedAt: created.CreatedAt, UpdatedAt: got.UpdatedAt,
		CreatedBy: "alice", UpdatedBy: "bob",
	}
	checkExperiment(t, "Update result", got, want)
	if got.UpdatedAt.Before(created.CreatedAt) {
		t.Errorf("UpdatedAt %v before CreatedAt %v", got.UpdatedAt, created.CreatedAt)
	}
	checkExperiment(t, "Get after Update", mustGet(t, s, "a"), want)

	for _, stale := range []int64{created.Revision, 2, 99} {
		_, err = s.Update(ctx, exp("a", "team-c", `{"v":3}`), stale, "carol")
		wantErr(t, fmt.Sprintf("Update with stale revision %d", stale), err, store.ErrConflict)
	}
	checkExperiment(t, "Get after conflicting Update", mustGet(t, s, "a"), want)
	if rev := mustRevision(t, s); rev != 3 {
		t.Errorf("Revision after conflicts = %d, want 3", rev)
	}
	if h := MustHistory(t, s, "a"); len(h) != 2 {
		t.Errorf("History(a) after conflicts has %d changes, want 2", len(h))
	}
}

func testUpdateUnconditional(t *testing.T, s store.Store) {
	ctx := t.Context()
	created := mustCreate(t, s, exp("a", "o", `{"v":1}`), "alice")
	for i := 2; i <= 4; i++ {
		got, err := s.Update(ctx, exp("a", "o", fmt.Sprintf(`{"v":%d}`, i)), 0, "bob")
		if err != nil {
			t.Fatalf("unconditional Update %d: %v", i, err)
		}
		if got.Revision != int64(i) || got.CreateRevision != created.CreateRevision {
			t.Fatalf("unconditional Update %d: Revision %d CreateRevision %d, want %d and %d",
				i, got.Revision, got.CreateRevision, i, created.CreateRevision)
		}
	}
	if got := mustGet(t, s, "a"); !jsonEqual(got.Spec, []byte(`{"v":4}`)) {
		t.Errorf("Spec after unconditional updates = %s, want {\"v\":4}", got.Spec)
	}
}

func testDeleteCAS(t *testing.T, s store.Store) {
	ctx := t.Context()
	created := mustCreate(t, s, exp("a", "o", `{}`), "alice")
	updated, err := s.Update(ctx, exp("a", "o", `{"v":2}`), 0, "alice")
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	err = s.Delete(ctx, "a", created.Revision, "bob")
	wantErr(t, "Delete with stale revision", err, store.ErrConflict)
	checkExperiment(t, "Get after conflicting Delete", mustGet(t, s, "a"), updated)
	if rev := mustRevision(t, s); rev != 2 {
		t.Errorf("Revision after conflicting Delete = %d, want 2", rev)
	}

	if err := s.Delete(ctx, "a", updated.Revision, "bob"); err != nil {
		t.Fatalf("Delete with current revision: %v", err)
	}
	_, err = s.Get(ctx, "a")
	wantErr(t, "Get after Delete", err, store.ErrNotFound)
	list, rev, err := s.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 0 || rev != 3 {
		t.Errorf("List after Delete = %d experiments at revision %d, want 0 at 3", len(list), rev)
	}
	err = s.Delete(ctx, "a", 0, "bob")
	wantErr(t, "second Delete", err, store.ErrNotFound)

	// Unconditional delete.
	mustCreate(t, s, exp("b", "o", `{}`), "alice")
	if err := s.Delete(ctx, "b", 0, "bob"); err != nil {
		t.Fatalf("unconditional Delete: %v", err)
	}
	if rev := mustRevision(t, s); rev != 5 {
		t.Errorf("Revision after unconditional Delete = %d, want 5", rev)
	}
}

func testRecreateAfterDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := mustCreate(t, s, exp("a", "o", `{"v":1}`), "alice")
	if err := s.Delete(ctx, "a", first.Revision, "alice"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	second := mustCreate(t, s, exp("a", "o", `{"v":2}`), "bob")
	if second.CreateRevision != 3 || second.Revision != 3 || second.CreatedBy != "bob" {
		t.Errorf("recreated experiment: Revision %d CreateRevision %d CreatedBy %q, want 3, 3, bob",
			second.Revision, second.CreateRevision, second.CreatedBy)
	}
	h := MustHistory(t, s, "a")
	var ops []string
	for _, c := range h {
		ops = append(ops, c.Op)
	}
	if want := []string{store.OpCreate, store.OpDelete, store.OpCreate}; !reflect.DeepEqual(ops, want) {
		t.Errorf("History(a) ops = %q, want %q", ops, want)
	}
}

func testCopies(t *testing.T, s store.Store) {
	ctx := t.Context()
	in := exp("a", "o", `{"v":1}`)
	created := mustCreate(t, s, in, "alice")
	want := created.Clone()

	// Mutating the input or any returned value must not reach the store.
	in.Spec[2] = 'X'
	in.Owner = "mallory"
	created.Spec[2] = 'X'
	created.Owner = "mallory"
	created.Revision = 42
	got := mustGet(t, s, "a")
	checkExperiment(t, "Get after mutating Create's input and result", got, want)

	got.Spec[2] = 'X'
	got.Owner = "mallory"
	list, _, err := s.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	checkExperiment(t, "List after mutating Get's result", list[0], want)
	list[0].Spec[2] = 'X'
	list[0].Key = "zzz"
	checkExperiment(t, "Get after mutating List's result", mustGet(t, s, "a"), want)

	h := MustHistory(t, s, "a")
	orig := bytes.Clone(h[0].After)
	h[0].After[0] = 'X'
	h[0].Actor = "mallory"
	h2 := MustHistory(t, s, "a")
	if !bytes.Equal(h2[0].After, orig) || h2[0].Actor != "alice" {
		t.Errorf("History changed after mutating a returned Change: %+v", h2[0])
	}

	in2 := exp("a", "o", `{"v":2}`)
	updated, err := s.Update(ctx, in2, 0, "bob")
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	want = updated.Clone()
	in2.Spec[2] = 'X'
	updated.Spec[2] = 'X'
	checkExperiment(t, "Get after mutating Update's input and result", mustGet(t, s, "a"), want)
}

func testConcurrentCAS(t *testing.T, s store.Store) {
	const (
		workers  = 8
		attempts = 50
	)
	ctx := t.Context()
	mustCreate(t, s, exp("hot", "o", `{"n":0}`), "init")

	var (
		mu        sync.Mutex
		successes int
		conflicts int
		wg        sync.WaitGroup
		errs      = make(chan error, workers)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range attempts {
				cur, err := s.Get(ctx, "hot")
				if err != nil {
					errs <- fmt.Errorf("worker %d: Get: %w", w, err)
					return
				}
				spec := fmt.Sprintf(`{"worker":%d,"attempt":%d}`, w, i)
				_, err = s.Update(ctx, exp("hot", "o", spec), cur.Revision, fmt.Sprintf("w%d", w))
				mu.Lock()
				switch {
				case err == nil:
					successes++
				case errors.Is(err, store.ErrConflict):
					conflicts++
				default:
					mu.Unlock()
					errs <- fmt.Errorf("worker %d: Update: %w (want nil or ErrConflict)", w, err)
					return
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	t.Logf("%d successful updates, %d conflicts", successes, conflicts)
	if successes+conflicts != workers*attempts {
		t.Errorf("successes %d + conflicts %d != %d attempts", successes, conflicts, workers*attempts)
	}
	if successes == 0 {
		t.Fatal("no update succeeded")
	}
	want := int64(1 + successes)
	if rev := mustRevision(t, s); rev != want {
		t.Errorf("Revision = %d, want 1 create + %d updates = %d", rev, successes, want)
	}
	if got := mustGet(t, s, "hot"); got.Revision != want || got.CreateRevision != 1 {
		t.Errorf("final experiment Revision %d CreateRevision %d, want %d and 1", got.Revision, got.CreateRevision, want)
	}
	h := MustHistory(t, s, "hot")
	if int64(len(h)) != want {
		t.Fatalf("History(hot) has %d changes, want %d", len(h), want)
	}
	// Every successful update was based on the previous one: each change's
	// Before is the previous change's After.
	for i := 1; i < len(h); i++ {
		before, prev := decodeDoc(t, h[i].Before), decodeDoc(t, h[i-1].After)
		if before.Revision != prev.Revision || !jsonEqual(before.Spec, prev.Spec) {
			t.Fatalf("History(hot)[%d].Before is revision %d, want the previous After (revision %d)", i, before.Revision, prev.Revision)
		}
	}
}
