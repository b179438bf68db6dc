package etcd

import (
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/store"
)

// stored is experiment key's value at etcd revision mod, as a read or a
// watch delivers it.
func stored(t *testing.T, key string, rev, mod int64) *mvccpb.KeyValue {
	t.Helper()
	b, err := store.Marshal(&store.Experiment{Key: key, Spec: []byte(`{}`), Revision: rev, CreateRevision: rev})
	if err != nil {
		t.Fatal(err)
	}
	return &mvccpb.KeyValue{Key: []byte("experiments/" + key), Value: b, ModRevision: mod}
}

func keys(items []*store.Experiment) string {
	var s string
	for _, e := range items {
		s += e.Key + ";"
	}
	return s
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestFollowedAnswersOnlyAsOfWhatItApplied drives the experiments a watch
// follows with made-up reads and watch responses: they answer for an etcd
// revision only once applied through it, wake their waiters when they
// get there, never answer for a revision an older read took them back
// from, and release their waiters when a value does not decode.
func TestFollowedAnswersOnlyAsOfWhatItApplied(t *testing.T) {
	var f followed
	if _, ch, ok := f.asOf(0); ok || ch == nil {
		t.Fatal("answered before the first read")
	}
	if err := f.reset([]*mvccpb.KeyValue{stored(t, "b", 1, 10)}, 10); err != nil {
		t.Fatal(err)
	}
	if items, _, ok := f.asOf(10); !ok || keys(items) != "b;" {
		t.Fatalf("as of the read: %q, %v", keys(items), ok)
	}
	_, wait, ok := f.asOf(12)
	if ok {
		t.Fatal("answered for a revision not applied")
	}
	put := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: 12},
		Events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: stored(t, "a", 2, 12)}}}
	if err := f.apply(put); err != nil {
		t.Fatal(err)
	}
	if !closed(wait) {
		t.Fatal("a waiter was not woken by the write it waited for")
	}
	if items, _, ok := f.asOf(12); !ok || keys(items) != "a;b;" {
		t.Fatalf("after the watched write: %q, %v; want a and b, sorted", keys(items), ok)
	}
	del := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: 14},
		Events: []*clientv3.Event{{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte("experiments/b"), ModRevision: 14}}}}
	if err := f.apply(del); err != nil {
		t.Fatal(err)
	}
	progress := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: 20}}
	if err := f.apply(progress); err != nil {
		t.Fatal(err)
	}
	if items, _, ok := f.asOf(20); !ok || keys(items) != "a;" {
		t.Fatalf("after a delete and a progress notification: %q, %v", keys(items), ok)
	}
	// The watch broke; the read that starts it again came from a member
	// behind it.
	if err := f.reset([]*mvccpb.KeyValue{stored(t, "b", 1, 10)}, 11); err != nil {
		t.Fatal(err)
	}
	if items, _, ok := f.asOf(20); ok {
		t.Fatalf("answered %q for revision 20 from a read at 11", keys(items))
	}
	_, wait, _ = f.asOf(20)
	bad := clientv3.WatchResponse{Header: &etcdserverpb.ResponseHeader{Revision: 21},
		Events: []*clientv3.Event{{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte("experiments/c"), Value: []byte("not json"), ModRevision: 21}}}}
	if err := f.apply(bad); err == nil {
		t.Fatal("a value that does not decode was applied")
	}
	if !closed(wait) {
		t.Fatal("a waiter was not released when a value did not decode")
	}
	if _, ch, ok := f.asOf(0); ok || ch != nil {
		t.Fatal("after a value that does not decode: want no answer and nothing to wait for")
	}
}
