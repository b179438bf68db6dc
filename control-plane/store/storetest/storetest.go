// Package storetest is the conformance suite every store.Store implementation
// must pass. Implementations call Run from their own tests with a function
// that opens a fresh, empty store.
//
// The suite checks only behaviour promised by the store.Store contract, so
// that an embedded store (bolt) and a distributed one (etcd) pass the same
// tests. It waits on observable results with deadlines and never sleeps.
// It imports only the standard library and store.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
)

// WaitTimeout bounds every wait on a Watch channel.
const WaitTimeout = 10 * time.Second

// Run runs the conformance suite. open must return a new, empty store for
// each call and arrange (with t.Cleanup) for it to be closed; the suite may
// close it earlier itself, so Close must tolerate a second call.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"EmptyStore", testEmptyStore},
		{"CreateGetList", testCreateGetList},
		{"CreateExists", testCreateExists},
		{"NotFound", testNotFound},
		{"UpdateCompareAndSwap", testUpdateCAS},
		{"UpdateUnconditional", testUpdateUnconditional},
		{"DeleteCompareAndSwap", testDeleteCAS},
		{"RecreateAfterDelete", testRecreateAfterDelete},
		{"RevisionMonotonic", testRevisionMonotonic},
		{"History", testHistory},
		{"HistoryReplaysToList", testHistoryReplays},
		{"WatchDeliversRevisions", testWatch},
		{"WatchCoalesces", testWatchCoalesces},
		{"WatchClosesOnCancel", testWatchCancel},
		{"WatchClosesOnClose", testWatchClose},
		{"ReturnsCopies", testCopies},
		{"ConcurrentCompareAndSwap", testConcurrentCAS},
		{"LargestSpec", testLargestSpec},
		{"WriteBase", testWriteBase},
		{"InvalidInput", testInvalidInput},
		{"CanceledContext", testCanceledContext},
		{"ClosedStore", testClosedStore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, open(t))
		})
	}
}

// Fill writes n changes to s, cycling over keys — creates, updates,
// deletes and re-creates, by several actors, with specs that encoding
// could alter (<, &, >) — and one more delete if needed so that the first
// key ends deleted, and returns s's whole history: a source for tests of
// copies and imports.
func Fill(t *testing.T, s store.Store, n int, keys ...string) []store.Change {
	t.Helper()
	ctx := t.Context()
	for i := 0; i < n; i++ {
		k := keys[i%len(keys)]
		e := &store.Experiment{Key: k, Owner: "team-" + k, Spec: json.RawMessage(fmt.Sprintf(`{"i":%d,"html":"<&>"}`, i))}
		var err error
		switch _, gerr := s.Get(ctx, k); {
		case errors.Is(gerr, store.ErrNotFound):
			_, err = s.Create(ctx, e, fmt.Sprintf("actor-%d", i%3))
		case i%7 == 0 || (i == n-1 && k == keys[0]):
			err = s.Delete(ctx, k, 0, "remover")
		default:
			_, err = s.Update(ctx, e, 0, "editor")
		}
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if _, err := s.Get(ctx, keys[0]); err == nil {
		if err := s.Delete(ctx, keys[0], 0, "remover"); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.History(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// exp builds an input experiment.
func exp(key, owner, spec string) *store.Experiment {
	return &store.Experiment{Key: key, Owner: owner, Spec: json.RawMessage(spec)}
}

func mustCreate(t *testing.T, s store.Store, e *store.Experiment, actor string) *store.Experiment {
	t.Helper()
	got, err := s.Create(t.Context(), e, actor)
	if err != nil {
		t.Fatalf("Create(%q): %v", e.Key, err)
	}
	return got
}

func mustGet(t *testing.T, s store.Store, key string) *store.Experiment {
	t.Helper()
	got, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return got
}

func mustRevision(t *testing.T, s store.Store) int64 {
	t.Helper()
	rev, err := s.Revision(t.Context())
	if err != nil {
		t.Fatalf("Revision: %v", err)
	}
	return rev
}

// MustHistory is s.History(key) ("" for every key), failing the test on
// an error.
func MustHistory(t *testing.T, s store.Store, key string) []store.Change {
	t.Helper()
	h, err := s.History(t.Context(), key)
	if err != nil {
		t.Fatalf("History(%q): %v", key, err)
	}
	return h
}

func wantErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want errors.Is(err, %v)", op, err, want)
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// diffExperiment describes how got differs from want ("" if equal). Spec is
// compared as a JSON value and times with Equal.
func diffExperiment(got, want *store.Experiment) string {
	switch {
	case got == nil || want == nil:
		if got != want {
			return fmt.Sprintf("got %+v, want %+v", got, want)
		}
		return ""
	case got.Key != want.Key:
		return fmt.Sprintf("Key %q, want %q", got.Key, want.Key)
	case got.Owner != want.Owner:
		return fmt.Sprintf("Owner %q, want %q", got.Owner, want.Owner)
	case !jsonEqual(got.Spec, want.Spec):
		return fmt.Sprintf("Spec %s, want %s", got.Spec, want.Spec)
	case got.Revision != want.Revision:
		return fmt.Sprintf("Revision %d, want %d", got.Revision, want.Revision)
	case got.CreateRevision != want.CreateRevision:
		return fmt.Sprintf("CreateRevision %d, want %d", got.CreateRevision, want.CreateRevision)
	case !got.CreatedAt.Equal(want.CreatedAt):
		return fmt.Sprintf("CreatedAt %v, want %v", got.CreatedAt, want.CreatedAt)
	case !got.UpdatedAt.Equal(want.UpdatedAt):
		return fmt.Sprintf("UpdatedAt %v, want %v", got.UpdatedAt, want.UpdatedAt)
	case got.CreatedBy != want.CreatedBy:
		return fmt.Sprintf("CreatedBy %q, want %q", got.CreatedBy, want.CreatedBy)
	case got.UpdatedBy != want.UpdatedBy:
		return fmt.Sprintf("UpdatedBy %q, want %q", got.UpdatedBy, want.UpdatedBy)
	}
	return ""
}

func checkExperiment(t *testing.T, what string, got, want *store.Experiment) {
	t.Helper()
	if d := diffExperiment(got, want); d != "" {
		t.Fatalf("%s: %s", what, d)
	}
}

// decodeDoc decodes a Change.Before/After document.
func decodeDoc(t *testing.T, raw json.RawMessage) *store.Experiment {
	t.Helper()
	if raw == nil {
		return nil
	}
	var e store.Experiment
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("decode change document %s: %v", raw, err)
	}
	return &e
}

// receive returns the next value from ch, failing the test after
// WaitTimeout. ok is false if ch was closed.
func receive(t *testing.T, ch <-chan int64) (rev int64, ok bool) {
	t.Helper()
	timer := time.NewTimer(WaitTimeout)
	defer timer.Stop()
	select {
	case rev, ok = <-ch:
		return rev, ok
	case <-timer.C:
		t.Fatalf("no value from Watch within %s", WaitTimeout)
		return 0, false
	}
}

// awaitRevision reads ch until it yields want, checking that values strictly
// increase and never pass want.
func awaitRevision(t *testing.T, ch <-chan int64, last, want int64) int64 {
	t.Helper()
	for last < want {
		rev, ok := receive(t, ch)
		if !ok {
			t.Fatalf("Watch closed while waiting for revision %d (last %d)", want, last)
		}
		if rev <= last || rev > want {
			t.Fatalf("Watch sent %d after %d while waiting for %d; want strictly increasing values up to %d", rev, last, want, want)
		}
		last = rev
	}
	return last
}

// awaitClosed drains ch until it is closed, failing after WaitTimeout.
func awaitClosed(t *testing.T, ch <-chan int64) {
	t.Helper()
	for {
		if _, ok := receive(t, ch); !ok {
			return
		}
	}
}

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

func testRevisionMonotonic(t *testing.T, s store.Store) {
	ctx := t.Context()
	want := int64(0)
	step := func(name string, wrote bool, err error) {
		t.Helper()
		if wrote {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want++
		} else if err == nil {
			t.Fatalf("%s succeeded, want an error", name)
		}
		if rev := mustRevision(t, s); rev != want {
			t.Fatalf("after %s: Revision = %d, want %d", name, rev, want)
		}
	}
	for i := range 3 {
		e, err := s.Create(ctx, exp(fmt.Sprintf("k%d", i), "o", `{}`), "a")
		step("Create", true, err)
		if err == nil && e.Revision != want {
			t.Fatalf("Create returned Revision %d, want %d", e.Revision, want)
		}
	}
	_, err := s.Create(ctx, exp("k0", "o", `{}`), "a")
	step("duplicate Create", false, err)
	e, err := s.Update(ctx, exp("k1", "o", `{"x":1}`), 2, "a")
	step("Update", true, err)
	if e.Revision != want {
		t.Fatalf("Update returned Revision %d, want %d", e.Revision, want)
	}
	_, err = s.Update(ctx, exp("k1", "o", `{"x":2}`), 2, "a")
	step("conflicting Update", false, err)
	_, err = s.Update(ctx, exp("nope", "o", `{}`), 0, "a")
	step("Update of missing key", false, err)
	step("Delete", true, s.Delete(ctx, "k0", 0, "a"))
	step("Delete of missing key", false, s.Delete(ctx, "k0", 0, "a"))
	step("conflicting Delete", false, s.Delete(ctx, "k2", 1, "a"))
	e, err = s.Create(ctx, exp("k0", "o", `{}`), "a")
	step("re-Create", true, err)
	if e.Revision != want {
		t.Fatalf("re-Create returned Revision %d, want %d", e.Revision, want)
	}

	// Each write's revision is exactly one more than the previous change's.
	h := MustHistory(t, s, "")
	if int64(len(h)) != want {
		t.Fatalf("History has %d changes, want %d", len(h), want)
	}
	for i, c := range h {
		if c.Revision != int64(i+1) {
			t.Fatalf("History[%d].Revision = %d, want %d", i, c.Revision, i+1)
		}
	}
}

func testHistory(t *testing.T, s store.Store) {
	ctx := t.Context()
	a1 := mustCreate(t, s, exp("a", "team-a", `{"v":1}`), "alice")      // rev 1
	b1 := mustCreate(t, s, exp("b", "team-b", `{"w":1}`), "bob")        // rev 2
	a2, err := s.Update(ctx, exp("a", "team-a", `{"v":2}`), 1, "carol") // rev 3
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := s.Delete(ctx, "a", a2.Revision, "dave"); err != nil { // rev 4
		t.Fatalf("Delete: %v", err)
	}

	type entry struct {
		rev           int64
		key, op, who  string
		before, after *store.Experiment
	}
	check := func(name string, got []store.Change, want []entry) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d changes, want %d: %+v", name, len(got), len(want), got)
		}
		for i, w := range want {
			c := got[i]
			if c.Revision != w.rev || c.Key != w.key || c.Op != w.op || c.Actor != w.who {
				t.Fatalf("%s[%d] = {rev %d key %q op %q actor %q}, want {rev %d key %q op %q actor %q}",
					name, i, c.Revision, c.Key, c.Op, c.Actor, w.rev, w.key, w.op, w.who)
			}
			if c.Time.IsZero() {
				t.Errorf("%s[%d].Time is zero", name, i)
			}
			if (c.Before == nil) != (w.before == nil) || (c.After == nil) != (w.after == nil) {
				t.Fatalf("%s[%d]: Before %s After %s; want Before present=%v, After present=%v",
					name, i, c.Before, c.After, w.before != nil, w.after != nil)
			}
			checkExperiment(t, fmt.Sprintf("%s[%d].Before", name, i), decodeDoc(t, c.Before), w.before)
			checkExperiment(t, fmt.Sprintf("%s[%d].After", name, i), decodeDoc(t, c.After), w.after)
		}
	}
	check("History(a)", MustHistory(t, s, "a"), []entry{
		{1, "a", store.OpCreate, "alice", nil, a1},
		{3, "a", store.OpUpdate, "carol", a1, a2},
		{4, "a", store.OpDelete, "dave", a2, nil},
	})
	check("History(b)", MustHistory(t, s, "b"), []entry{
		{2, "b", store.OpCreate, "bob", nil, b1},
	})
	check("History()", MustHistory(t, s, ""), []entry{
		{1, "a", store.OpCreate, "alice", nil, a1},
		{2, "b", store.OpCreate, "bob", nil, b1},
		{3, "a", store.OpUpdate, "carol", a1, a2},
		{4, "a", store.OpDelete, "dave", a2, nil},
	})
	if h := MustHistory(t, s, "never"); len(h) != 0 {
		t.Errorf("History(never) has %d changes, want 0", len(h))
	}
	h := MustHistory(t, s, "")
	for i := 1; i < len(h); i++ {
		if h[i].Time.Before(h[i-1].Time) {
			t.Errorf("History()[%d].Time %v before [%d].Time %v", i, h[i].Time, i-1, h[i-1].Time)
		}
	}
}

// testHistoryReplays checks what a copy of a store relies on: the global
// history, replayed, is exactly what List returns, and each key's history
// (a deleted key's, one whose key needs escaping) is the global history's
// changes of that key.
func testHistoryReplays(t *testing.T, s store.Store) {
	ctx := t.Context()
	odd := "team/exp ü%2F"
	a := mustCreate(t, s, exp("a", "o", `{"v":1}`), "alice")
	mustCreate(t, s, exp(odd, "o", `{"odd":true}`), "bob")
	gone := mustCreate(t, s, exp("gone", "o", `{}`), "bob")
	if _, err := s.Update(ctx, exp("a", "o", `{"v":2}`), a.Revision, "carol"); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if err := s.Delete(ctx, "gone", gone.Revision, "dave"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	mustCreate(t, s, exp("gone", "o", `{"back":1}`), "erin")
	if err := s.Delete(ctx, "gone", 0, "dave"); err != nil {
		t.Fatalf("Delete: %v", err)
	}

	all := MustHistory(t, s, "")
	if rev := mustRevision(t, s); int64(len(all)) != rev {
		t.Fatalf("History() has %d changes at revision %d, want one per revision", len(all), rev)
	}
	replayed, err := store.Replay(all)
	if err != nil {
		t.Fatalf("Replay(History()): %v", err)
	}
	list, _, err := s.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(replayed) != len(list) {
		t.Fatalf("Replay(History()) has %d experiments, List %d", len(replayed), len(list))
	}
	for i := range list {
		checkExperiment(t, fmt.Sprintf("Replay(History())[%d]", i), replayed[i], list[i])
	}
	for _, key := range []string{"a", odd, "gone"} {
		var want []store.Change
		for _, c := range all {
			if c.Key == key {
				want = append(want, c)
			}
		}
		if got := MustHistory(t, s, key); !reflect.DeepEqual(got, want) {
			t.Errorf("History(%q) = %+v, want the global history's changes of the key %+v", key, got, want)
		}
	}
}

func testWatch(t *testing.T, s store.Store) {
	mustCreate(t, s, exp("a", "o", `{}`), "alice")
	mustCreate(t, s, exp("b", "o", `{}`), "alice")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := s.Watch(ctx)
	rev, ok := receive(t, ch)
	if !ok || rev != 2 {
		t.Fatalf("first Watch value = %d (open %v), want the current revision 2", rev, ok)
	}
	last := rev
	for i := range 3 {
		if _, err := s.Update(t.Context(), exp("a", "o", fmt.Sprintf(`{"v":%d}`, i)), 0, "bob"); err != nil {
			t.Fatalf("Update: %v", err)
		}
		last = awaitRevision(t, ch, last, mustRevision(t, s))
	}
	if err := s.Delete(t.Context(), "b", 0, "bob"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	awaitRevision(t, ch, last, 6)

	// A second watcher starts at the current revision too.
	ch2 := s.Watch(ctx)
	if rev, ok := receive(t, ch2); !ok || rev != 6 {
		t.Fatalf("second watcher's first value = %d (open %v), want 6", rev, ok)
	}
}

func testWatchCoalesces(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := s.Watch(ctx)
	const writes = 20
	for i := range writes {
		mustCreate(t, s, exp(fmt.Sprintf("k%02d", i), "o", `{}`), "alice")
	}
	// A reader that did not keep up must still reach the latest revision,
	// without ever seeing a value go backwards.
	seen := 0
	last := int64(-1)
	for last < writes {
		rev, ok := receive(t, ch)
		if !ok {
			t.Fatalf("Watch closed before revision %d", writes)
		}
		if rev <= last || rev > writes {
			t.Fatalf("Watch sent %d after %d, want strictly increasing values up to %d", rev, last, writes)
		}
		last = rev
		seen++
	}
	t.Logf("slow reader received %d values for %d writes", seen, writes)
}

func testWatchCancel(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	ch := s.Watch(ctx)
	if _, ok := receive(t, ch); !ok {
		t.Fatal("Watch closed before ctx was canceled")
	}
	cancel()
	awaitClosed(t, ch)

	// Writes after cancellation must not block or panic.
	mustCreate(t, s, exp("a", "o", `{}`), "alice")

	// A Watch with an already-done ctx is closed too.
	awaitClosed(t, s.Watch(ctx))
}

func testWatchClose(t *testing.T, s store.Store) {
	ch := s.Watch(t.Context())
	if _, ok := receive(t, ch); !ok {
		t.Fatal("Watch closed before the store was closed")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	awaitClosed(t, ch)
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
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

func testCanceledContext(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Create(ctx, exp("a", "o", `{}`), "alice")
	wantErr(t, "Create with canceled ctx", err, context.Canceled)
	if _, err := s.Get(t.Context(), "a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Create with canceled ctx stored the experiment: Get error %v", err)
	}
	if rev := mustRevision(t, s); rev != 0 {
		t.Errorf("Revision after canceled Create = %d, want 0", rev)
	}
}

func testClosedStore(t *testing.T, s store.Store) {
	mustCreate(t, s, exp("a", "o", `{}`), "alice")
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := t.Context()
	_, err := s.Get(ctx, "a")
	wantErr(t, "Get after Close", err, store.ErrClosed)
	_, err = s.Create(ctx, exp("b", "o", `{}`), "alice")
	wantErr(t, "Create after Close", err, store.ErrClosed)
	awaitClosed(t, s.Watch(ctx))
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

// testWriteBase: a write under store.WithBase commits only while the store
// is at its base revision; after any other write it fails with ErrStale (a
// conflict) and writes nothing.
func testWriteBase(t *testing.T, s store.Store) {
	ctx := t.Context()
	spec := json.RawMessage(`{"v":1}`)
	a, err := s.Create(ctx, &store.Experiment{Key: "a", Spec: spec}, "t")
	if err != nil {
		t.Fatal(err)
	}
	based := store.WithBase(ctx, a.Revision)
	b, err := s.Create(based, &store.Experiment{Key: "b", Spec: spec}, "t")
	if err != nil {
		t.Fatalf("create at the base revision: %v", err)
	}
	stale := store.WithBase(ctx, a.Revision) // b was written since
	writes := map[string]func() error{
		"create": func() error { _, err := s.Create(stale, &store.Experiment{Key: "c", Spec: spec}, "t"); return err },
		"update": func() error {
			_, err := s.Update(stale, &store.Experiment{Key: "a", Spec: spec}, a.Revision, "t")
			return err
		},
		"delete": func() error { return s.Delete(stale, "a", 0, "t") },
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, store.ErrStale) || !errors.Is(err, store.ErrConflict) {
			t.Errorf("%s based on a past revision: %v, want ErrStale (a conflict)", name, err)
		}
	}
	if rev, err := s.Revision(ctx); err != nil || rev != b.Revision {
		t.Errorf("revision after the stale writes = %d, %v; want %d (nothing written)", rev, err, b.Revision)
	}
	if _, err := s.Update(store.WithBase(ctx, b.Revision), &store.Experiment{Key: "a", Spec: spec}, a.Revision, "t"); err != nil {
		t.Errorf("update at the current revision: %v", err)
	}
}
