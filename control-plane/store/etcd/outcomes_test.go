package etcd_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
)

// openOutcomes starts a one-member cluster and returns a store on it and
// the outcome records of replica id there.
func openOutcomes(t *testing.T, id string) (*etcd.Store, *etcd.Outcomes) {
	t.Helper()
	s := etcdtest.Start(t, 1).Open(t)
	return s, s.Registry(id, 0).Outcomes()
}

// outcomeRec is a record of experiment key; v "" is a deletion.
func outcomeRec(key, replica string, minute int64, v string, mod int64) store.OutcomeRecord {
	var b []byte
	if v != "" {
		b = []byte(v)
	}
	return store.OutcomeRecord{Key: key, Replica: replica, Minute: minute, Value: b, Mod: mod}
}

// commitAll writes recs in commits of at most MaxOutcomeCommit records.
func commitAll(t *testing.T, o *etcd.Outcomes, recs []store.OutcomeRecord) {
	t.Helper()
	for len(recs) > 0 {
		n := min(len(recs), etcd.MaxOutcomeCommit)
		if _, ok, err := o.Commit(t.Context(), recs[:n]); err != nil || !ok {
			t.Fatalf("commit: %v %v", ok, err)
		}
		recs = recs[n:]
	}
}

// TestOutcomeRecords: records are written by compare-and-swap (a stale
// revision writes nothing), read back per experiment with the minutes
// asked for and the live replicas, and bounded: a record over
// MaxOutcomeBytes and a commit of more than MaxOutcomeCommit records are
// refused, a read of more than MaxOutcomeReplicas records of one range or
// of more than 61 minutes fails naming the experiment.
func TestOutcomeRecords(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	s := c.Open(t)
	reg := s.Registry("r1", 2*time.Second)
	if err := reg.Publish(ctx, rollout.Replica{ID: "r1"}, nil); err != nil {
		t.Fatal(err)
	}
	o := reg.Outcomes()
	rec := func(replica string, minute int64, v string, mod int64) store.OutcomeRecord {
		var b []byte
		if v != "" {
			b = []byte(v)
		}
		return store.OutcomeRecord{Key: "checkout", Replica: replica, Minute: minute, Value: b, Mod: mod}
	}
	rev, ok, err := o.Commit(ctx, []store.OutcomeRecord{rec("r1", 0, "t1", 0), rec("r1", 100, "m1", 0), rec(store.RetiredReplica, 0, "old", 0),
		rec("gone/x", 0, "t2", 0), rec("r1", 90, "m0", 0)})
	if err != nil || !ok {
		t.Fatalf("commit: %v %v", ok, err)
	}
	// A stale comparison writes nothing.
	if _, ok, err := o.Commit(ctx, []store.OutcomeRecord{rec("r1", 0, "t1'", 0), rec("r1", 101, "m2", 0)}); err != nil || ok {
		t.Fatalf("stale commit: %v %v", ok, err)
	}
	if _, ok, err := o.Commit(ctx, []store.OutcomeRecord{rec("r1", 0, "t1b", rev)}); err != nil || !ok {
		t.Fatalf("commit on the revision: %v %v", ok, err)
	}
	recs, live, err := o.Read(ctx, "checkout", 95, 101)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Replica+"@"+strconv.FormatInt(r.Minute, 10)+"="+string(r.Value))
	}
	// Totals by escaped replica id ("%retired" sorts before letters), then minutes 95..101.
	if want := "@0=old gone/x@0=t2 r1@0=t1b r1@100=m1"; strings.Join(got, " ") != want {
		t.Errorf("read %q, want %q", strings.Join(got, " "), want)
	}
	if len(live) != 1 || !live["r1"] {
		t.Errorf("live %v, want r1", live)
	}

	if _, _, err := o.Commit(ctx, []store.OutcomeRecord{rec("r1", 0, strings.Repeat("x", etcd.MaxOutcomeBytes+1), 0)}); err == nil ||
		!strings.Contains(err.Error(), "outcomes/t/checkout/r1") {
		t.Errorf("a record over MaxOutcomeBytes: %v", err)
	}
	many := make([]store.OutcomeRecord, etcd.MaxOutcomeCommit+1)
	for i := range many {
		many[i] = rec("r"+strconv.Itoa(i), 0, "x", 0)
	}
	if _, _, err := o.Commit(ctx, many); err == nil {
		t.Error("a commit over MaxOutcomeCommit")
	}
	if _, _, err := o.Read(ctx, "checkout", 0, 61); err == nil {
		t.Error("a read of 62 minutes")
	}
	for i := 0; i < etcd.MaxOutcomeReplicas; i += etcd.MaxOutcomeCommit {
		batch := many[:0]
		for j := i; j < min(i+etcd.MaxOutcomeCommit, etcd.MaxOutcomeReplicas); j++ {
			batch = append(batch, rec("x"+strconv.Itoa(j), 0, "x", 0))
		}
		if _, _, err := o.Commit(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := o.Read(ctx, "checkout", 100, 100); err == nil || !strings.Contains(err.Error(), `"checkout"`) {
		t.Errorf("a read of more than MaxOutcomeReplicas totals: %v", err)
	}
}

// TestOutcomeSweepPages: Sweep deletes the records of the experiments not
// kept when their total records are more than one of its reads takes
// (1,100 of one experiment, before the others'), and keeps the others'.
func TestOutcomeSweepPages(t *testing.T) {
	ctx := t.Context()
	s, o := openOutcomes(t, "r1")
	var recs []store.OutcomeRecord
	for i := range 1100 {
		recs = append(recs, outcomeRec("a", fmt.Sprintf("pod-%04d", i), 0, "x", 0))
	}
	recs = append(recs, outcomeRec("b", "r1", 0, "x", 0), outcomeRec("c", "r1", 0, "x", 0))
	commitAll(t, o, recs)
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Sweep(ctx, map[string]bool{"c": true}, rev, 0); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client().Get(ctx, etcd.DefaultPrefix+"outcomes/t/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), etcd.DefaultPrefix+"outcomes/t/"))
	}
	if strings.Join(keys, " ") != "c/r1" {
		t.Errorf("total records after the sweep: %d %.80v, want c/r1", len(keys), keys)
	}
}
