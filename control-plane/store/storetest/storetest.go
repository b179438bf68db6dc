// Package storetest is the conformance suite every store.Store implementation
// must pass. Implementations call Run from their own tests with a function
// that opens a fresh, empty store.
//
// The suite checks only behaviour promised by the store.Store contract, so
// that an embedded store (bolt) and a distributed one (etcd) pass the same
// tests. It waits on observable results with deadlines and never sleeps.
// It imports only the standard library, store and experiment (for the
// largest document the store must hold).
package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

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
