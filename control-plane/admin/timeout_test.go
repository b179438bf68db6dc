package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// TestWriteWithinStoreTimeout: with etcd's quorum just lost, every write
// path of the admin API (the owner's and allotd's own) answers
// store.ErrUnavailable within the store's request timeout, although each
// reads the store before it writes: the reads and the commit of one write
// share one deadline.
func TestWriteWithinStoreTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	const margin = 500 * time.Millisecond
	c := etcdtest.Start(t, 3)
	svc := admin.NewService(c.Open(t, etcd.WithRequestTimeout(timeout)), nil)
	root := &admin.Principal{Name: "root", Role: admin.RoleAdmin}
	ctx := context.Background()
	doc := func(key, status string) *experimentv1.Experiment {
		t.Helper()
		e := &experimentv1.Experiment{}
		if err := protojson.Unmarshal([]byte(`{"key":"`+key+`","variations":["a","b"],"status":"`+status+`"}`), e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, x := range []struct{ key, status string }{{"upd", "running"}, {"del", "running"}, {"pause", "running"}, {"ack", "paused"}, {"state", "running"}} {
		if _, err := svc.Create(ctx, root, doc(x.key, x.status)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.WriteState(ctx, "ack", 0, "allotd", func(e *experimentv1.Experiment) {
		e.Rollback = &experimentv1.Rollback{Guardrail: 0, Variation: 1}
	}); err != nil {
		t.Fatal(err)
	}
	upd, err := svc.Get(ctx, root, "upd")
	if err != nil {
		t.Fatal(err)
	}
	upd.Description = "changed"

	writes := []struct {
		name  string
		write func() error
	}{
		{"create", func() error { _, err := svc.Create(ctx, root, doc("new", "running")); return err }},
		{"update", func() error { _, err := svc.Update(ctx, root, upd); return err }},
		{"delete", func() error { return svc.Delete(ctx, root, "del", 0) }},
		{"pause", func() error { _, err := svc.Pause(ctx, root, "pause", 0); return err }},
		{"start acknowledging a rollback", func() error { _, err := svc.StartAcknowledgingRollback(ctx, root, "ack", 0); return err }},
		{"allotd's state", func() error {
			_, err := svc.WriteState(ctx, "state", 0, "allotd", func(e *experimentv1.Experiment) { e.Status = experiment.StatusPaused })
			return err
		}},
	}
	// Member 0 stays down; member 1 returns between writes, so that each
	// write starts right after the quorum is lost again (when the first
	// read waits longest).
	c.Stop(0)
	for i, w := range writes {
		if i > 0 {
			c.Restart(1)
		}
		c.Stop(1)
		start := time.Now()
		err := w.write()
		took := time.Since(start)
		t.Logf("%s without quorum answered after %v", w.name, took.Round(time.Millisecond))
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s without quorum: %v, want store.ErrUnavailable", w.name, err)
		}
		if took > timeout+margin {
			t.Errorf("%s without quorum answered after %v, want within the store timeout %v (+%v)", w.name, took, timeout, margin)
		}
	}
}
