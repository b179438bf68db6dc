package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/allotmesh/allot/control-plane/store"
)

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
