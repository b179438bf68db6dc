package etcd_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/store/storetest"
)

// prefixes numbers the stores sharing one cluster: each conformance case
// opens an empty store under a prefix of its own.
var prefixes atomic.Int64

func opener(c *etcdtest.Cluster, opts ...etcd.Option) func(t *testing.T) store.Store {
	return func(t *testing.T) store.Store {
		t.Helper()
		prefix := fmt.Sprintf("/allot-test/%d/", prefixes.Add(1))
		return c.Open(t, append(opts, etcd.WithPrefix(prefix))...)
	}
}

func TestConformanceSingleMember(t *testing.T) {
	storetest.Run(t, opener(etcdtest.Start(t, 1)))
}

func TestConformanceThreeMembers(t *testing.T) {
	storetest.Run(t, opener(etcdtest.Start(t, 3)))
}

// TestTwoStoresShareOneRevision checks what replicas rely on: two stores
// (two allotd replicas) on one cluster number writes in one sequence, and
// each one's Watch sees the other's writes.
func TestTwoStoresShareOneRevision(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := t.Context()
	open := func(endpoint string) *etcd.Store {
		s, err := etcd.Open(ctx, clientv3.Config{Endpoints: []string{endpoint}})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(c.Endpoints()[0]), open(c.Endpoints()[2])
	watch := b.Watch(ctx)
	if got := receive(t, watch); got != 0 {
		t.Fatalf("first watched revision %d, want 0", got)
	}
	for i := range 5 {
		w := store.Store(a)
		if i%2 == 1 {
			w = b
		}
		e, err := w.Create(ctx, &store.Experiment{Key: fmt.Sprintf("k%d", i), Spec: []byte(`{}`)}, "alice")
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if e.Revision != int64(i+1) {
			t.Fatalf("write %d got revision %d, want %d", i, e.Revision, i+1)
		}
	}
	for got := int64(0); got != 5; {
		got = receive(t, watch)
	}
	ha, err := a.History(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.History(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(ha) != 5 || len(hb) != 5 {
		t.Fatalf("histories have %d and %d changes, want 5 each", len(ha), len(hb))
	}
}

// TestNoQuorum takes two of three members away: writes fail fast with
// store.ErrUnavailable naming the store and commit nothing, reads still
// return the last committed state, and once a member returns, writes
// succeed and the watch resumes.
func TestNoQuorum(t *testing.T) {
	c := etcdtest.Start(t, 3)
	ctx := t.Context()
	s, err := etcd.Open(ctx, clientv3.Config{Endpoints: c.Endpoints()[:1]}, etcd.WithRequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Create(ctx, &store.Experiment{Key: "before", Spec: []byte(`{"v":1}`)}, "alice"); err != nil {
		t.Fatal(err)
	}
	watch := s.Watch(ctx)
	receive(t, watch)

	c.Stop(1)
	if _, err := s.Create(ctx, &store.Experiment{Key: "one-down", Spec: []byte(`{}`)}, "alice"); err != nil {
		t.Fatalf("write with one member of three down: %v", err)
	}
	c.Stop(2)
	start := time.Now()
	_, err = s.Create(ctx, &store.Experiment{Key: "no-quorum", Spec: []byte(`{}`)}, "alice")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("write without quorum: %v, want store.ErrUnavailable", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("write without quorum failed after %s, want within the request timeout", took)
	}
	if got := err.Error(); !containsAll(got, "etcd", c.Endpoints()[0]) {
		t.Errorf("error %q does not name the store", got)
	}
	got, err := s.Get(ctx, "before")
	if err != nil {
		t.Fatalf("read without quorum: %v", err)
	}
	if string(got.Spec) != `{"v":1}` {
		t.Errorf("read without quorum: spec %s", got.Spec)
	}
	list, rev, err := s.List(ctx)
	if err != nil || len(list) != 2 || rev != 2 {
		t.Fatalf("list without quorum: %d experiments at revision %d, err %v; want 2 at 2", len(list), rev, err)
	}

	c.Restart(1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err = s.Create(ctx, &store.Experiment{Key: "recovered", Spec: []byte(`{}`)}, "alice")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write succeeded within 30 s of the quorum's return: %v", err)
		}
	}
	if _, err := s.Get(ctx, "no-quorum"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused write was stored: %v", err)
	}
	for r := int64(0); r != 3; {
		r = receive(t, watch)
	}
}

func receive(t *testing.T, ch <-chan int64) int64 {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatal("watch closed")
		}
		return v
	case <-time.After(storetest.WaitTimeout):
		t.Fatal("no revision within the deadline")
	}
	return 0
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestTooLargeIsInvalid: a write larger than etcd takes, whether the
// server refuses it (--max-request-bytes, 1.5 MiB by default) or the
// client does before sending (its 2 MiB message limit), is invalid input
// naming the cause, not an unknown (internal) error, and writes nothing.
func TestTooLargeIsInvalid(t *testing.T) {
	s := etcdtest.Start(t, 1).Open(t)
	for _, n := range []int{400 << 10, 3 << 20} { // update: ~5 copies past the server's limit; create: past the client's
		spec := []byte(`"` + strings.Repeat("x", n) + `"`)
		c, err := s.Create(t.Context(), &store.Experiment{Key: fmt.Sprintf("big-%d", n), Spec: spec}, "t")
		if err == nil {
			_, err = s.Update(t.Context(), &store.Experiment{Key: c.Key, Spec: spec}, c.Revision, "t")
		}
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "too large") {
			t.Errorf("%d-byte spec: %v, want store.ErrInvalid (too large)", n, err)
		}
	}
}

// TestWatchesShareOneEtcdWatch: every Watch of a store (a replica's builder
// and its outcomes aggregator) is fed by one etcd watch of meta/revision,
// with one of the experiments beside it (Followed), which etcd counts once
// however many follow the store, and each receives every write.
func TestWatchesShareOneEtcdWatch(t *testing.T) {
	c := etcdtest.Start(t, 1)
	watchers := func() int {
		t.Helper()
		resp, err := http.Get(c.Endpoints()[0] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "etcd_debugging_mvcc_watcher_total "); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				return int(n)
			}
		}
		t.Fatal("etcd's /metrics has no etcd_debugging_mvcc_watcher_total")
		return 0
	}
	s := c.Open(t)
	before := watchers()
	var chs []<-chan int64
	for range 3 {
		ch := s.Watch(t.Context())
		if rev := <-ch; rev != 0 {
			t.Fatalf("first value %d, want 0", rev)
		}
		chs = append(chs, ch)
	}
	if _, err := s.Create(t.Context(), &store.Experiment{Key: "a", Owner: "o", Spec: []byte(`{}`)}, "test"); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chs {
		select {
		case rev := <-ch:
			if rev != 1 {
				t.Fatalf("watch %d: %d, want 1", i, rev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch %d: no value for the write", i)
		}
	}
	// One of meta/revision, one of the experiments (Followed), which
	// starts on its own: the count is read until it reaches 2.
	deadline := time.Now().Add(10 * time.Second)
	n := watchers() - before
	for ; n < 2 && time.Now().Before(deadline); n = watchers() - before {
		time.Sleep(10 * time.Millisecond)
	}
	if n != 2 {
		t.Fatalf("3 watches of the store opened %d etcd watches, want 2", n)
	}
}
