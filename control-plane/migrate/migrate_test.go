package migrate_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/migrate"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/store/bolt/bolttest"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/store/storetest"
)

// TestCopyBoltToEtcd copies a real bbolt file (a deleted experiment, a key
// that needs escaping, more changes than one etcd transaction takes) into
// a real etcd member: the copy verifies, its revision, experiments and
// histories are the source's, a second copy into it is refused, and the
// next write continues the revisions.
func TestCopyBoltToEtcd(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "allot.db")
	w := bolttest.Open(t, path)
	history := storetest.Fill(t, w, 150, "deleted", "checkout.button-color", "team/exp ü%2F", "x_y-z")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	src := bolttest.Open(t, path, bolt.WithReadOnly())
	c := etcdtest.Start(t, 1)
	dst := c.Open(t, etcd.ForImport())

	sum, err := migrate.Copy(ctx, src, dst, path)
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	list, _, err := src.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := migrate.Summary{Experiments: len(list), Changes: len(history), Keys: 4, Revision: int64(len(history))}
	if sum != want {
		t.Errorf("Copy = %v, want %v", sum, want)
	}
	for _, key := range []string{"deleted", "team/exp ü%2F"} {
		got, err1 := dst.History(ctx, key)
		wantH, err2 := src.History(ctx, key)
		if err := errors.Join(err1, err2); err != nil || len(got) == 0 || !reflect.DeepEqual(got, wantH) {
			t.Errorf("History(%q) in etcd = %d changes (%v), want the %d of the bbolt file", key, len(got), err, len(wantH))
		}
	}
	if _, err := dst.Get(ctx, "deleted"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the deleted experiment: %v, want store.ErrNotFound", err)
	}

	if _, err := migrate.Copy(ctx, src, dst, path); !errors.Is(err, etcd.ErrNotEmpty) {
		t.Fatalf("second Copy: %v, want etcd.ErrNotEmpty", err)
	}

	after := c.Open(t)
	e, err := after.Create(ctx, &store.Experiment{Key: "after", Spec: json.RawMessage(`{}`)}, "alice")
	if err != nil || e.Revision != want.Revision+1 {
		t.Fatalf("first write after the copy: %+v, %v; want revision %d", e, err, want.Revision+1)
	}
	h, err := after.History(ctx, "")
	if err != nil || len(h) != len(history)+1 || h[len(h)-1].Key != "after" {
		t.Fatalf("history after the write: %d changes (%v), want %d ending with the write", len(h), err, len(history)+1)
	}
}

// TestVerifyFindsMismatches: Verify names every difference between two
// stores — revision, counts, fields of an experiment and of a change, an
// experiment only one store has — and counts those beyond MaxMismatches.
func TestVerifyFindsMismatches(t *testing.T) {
	ctx := t.Context()
	clock := func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC) }
	dir := t.TempDir()
	src := bolttest.Open(t, filepath.Join(dir, "src.db"), bolt.WithClock(clock))
	dst := bolttest.Open(t, filepath.Join(dir, "dst.db"), bolt.WithClock(clock))
	same := bolttest.Open(t, filepath.Join(dir, "same.db"), bolt.WithClock(clock))
	create := func(s store.Store, key, actor string) {
		t.Helper()
		if _, err := s.Create(ctx, &store.Experiment{Key: key, Spec: json.RawMessage(`{}`)}, actor); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []store.Store{src, dst, same} {
		create(s, "a", "alice")
	}
	create(src, "b", "bob")
	create(same, "b", "bob")
	create(dst, "b", "mallory")
	create(dst, "c", "carol")

	if sum, err := migrate.Verify(ctx, src, same); err != nil || sum.Changes != 2 || sum.Keys != 2 {
		t.Fatalf("Verify of equal stores = %v, %v", sum, err)
	}
	_, err := migrate.Verify(ctx, src, dst)
	if err == nil {
		t.Fatal("Verify found no mismatch")
	}
	for _, w := range []string{
		"14 mismatches",
		"revision: 2 in the source, 3 in the target",
		"experiments: 2 in the source, 3 in the target",
		`experiment "b": created_by is "bob" in the source, "mallory" in the target`,
		`experiment "c": in the target only`,
		`history[1] (revision 2): actor is "bob" in the source, "mallory" in the target`,
		`history[1] (revision 2): after.updated_by is "bob" in the source, "mallory" in the target`,
		`history of "c": changes: 0 in the source, 1 in the target`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Verify error does not say %q:\n%v", w, err)
		}
	}

	for i := range 30 {
		create(src, fmt.Sprint("k", i), "alice")
		create(same, fmt.Sprint("k", i), "bob")
	}
	_, err = migrate.Verify(ctx, src, same)
	if err == nil || strings.Count(err.Error(), "\n  ") != migrate.MaxMismatches+1 || !strings.Contains(err.Error(), "more") {
		t.Errorf("Verify with many mismatches lists %d lines, want %d and a count of the rest:\n%v",
			strings.Count(fmt.Sprint(err), "\n  "), migrate.MaxMismatches+1, err)
	}
}
