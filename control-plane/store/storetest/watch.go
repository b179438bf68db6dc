package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/allotmesh/allot/control-plane/store"
)

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
