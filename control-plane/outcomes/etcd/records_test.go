package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/outcomes/etcd"
	"github.com/allotmesh/allot/control-plane/rollout"
	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store"
	storeetcd "github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
)

// readPages reads key's records of minutes from to to with o.Read and
// returns them, the live replicas and the records of each page.
func readPages(t *testing.T, o *etcd.Records, key string, from, to int64) ([]store.OutcomeRecord, map[string]bool, []int) {
	t.Helper()
	var recs []store.OutcomeRecord
	var live map[string]bool
	var pages []int
	err := o.Read(t.Context(), key, from, to, func(l map[string]bool, page []store.OutcomeRecord) error {
		live = l
		recs = append(recs, page...)
		pages = append(pages, len(page))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs, live, pages
}

// openOutcomes starts a one-member cluster and returns a store on it and
// the outcome records of replica id there.
func openOutcomes(t *testing.T, id string) (*storeetcd.Store, *etcd.Records) {
	t.Helper()
	s := etcdtest.Start(t, 1).Open(t)
	return s, etcd.New(s.Conn(), id)
}

// outcomeRec is a record of experiment key; v "" is a deletion.
func outcomeRec(key, replica string, minute int64, v string, mod int64) store.OutcomeRecord {
	var b []byte
	if v != "" {
		b = []byte(v)
	}
	return store.OutcomeRecord{Key: key, Replica: replica, Minute: minute, Value: b, Mod: mod}
}

// commitAll writes recs in commits of at most MaxCommit records.
func commitAll(t *testing.T, o *etcd.Records, recs []store.OutcomeRecord) {
	t.Helper()
	for len(recs) > 0 {
		n := min(len(recs), etcd.MaxCommit)
		if _, ok, err := o.Commit(t.Context(), recs[:n]); err != nil || !ok {
			t.Fatalf("commit: %v %v", ok, err)
		}
		recs = recs[n:]
	}
}

// TestOutcomeRecords: records are written by compare-and-swap (a stale
// revision writes nothing), read back per experiment with the minutes
// asked for and the live replicas (Read) or the replica's own (Own), and
// bounded: a record over
// MaxRecordBytes and a commit of more than MaxCommit records are
// refused, a read of more than 61 minutes fails naming the experiment.
func TestOutcomeRecords(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	s := c.Open(t)
	reg := rolloutetcd.New(s.Conn(), "r1", 2*time.Second)
	if err := reg.Publish(ctx, rollout.Replica{ID: "r1"}, nil); err != nil {
		t.Fatal(err)
	}
	o := etcd.New(s.Conn(), "r1")
	rec := func(replica string, minute int64, v string, mod int64) store.OutcomeRecord {
		return outcomeRec("checkout", replica, minute, v, mod)
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
	recs, live, _ := readPages(t, o, "checkout", 95, 101)
	var got []string
	for _, r := range recs {
		got = append(got, r.Replica+"@"+strconv.FormatInt(r.Minute, 10)+"="+string(r.Value))
	}
	// The retired record first, the other totals by escaped replica id, then minutes 95..101.
	if want := "@0=old gone/x@0=t2 r1@0=t1b r1@100=m1"; strings.Join(got, " ") != want {
		t.Errorf("read %q, want %q", strings.Join(got, " "), want)
	}
	if len(live) != 1 || !live["r1"] {
		t.Errorf("live %v, want r1", live)
	}
	own, err := o.Own(ctx, "checkout", 95, 101)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, r := range own {
		got = append(got, r.Replica+"@"+strconv.FormatInt(r.Minute, 10)+"="+string(r.Value))
	}
	if want := "r1@0=t1b r1@100=m1"; strings.Join(got, " ") != want {
		t.Errorf("own records %q, want %q", strings.Join(got, " "), want)
	}

	if _, _, err := o.Commit(ctx, []store.OutcomeRecord{rec("r1", 0, strings.Repeat("x", etcd.MaxRecordBytes+1), 0)}); err == nil ||
		!strings.Contains(err.Error(), "outcomes/t/checkout/r1") {
		t.Errorf("a record over MaxRecordBytes: %v", err)
	}
	many := make([]store.OutcomeRecord, etcd.MaxCommit+1)
	for i := range many {
		many[i] = rec("r"+strconv.Itoa(i), 0, "x", 0)
	}
	if _, _, err := o.Commit(ctx, many); err == nil {
		t.Error("a commit over MaxCommit")
	}
	if err := o.Read(ctx, "checkout", 0, 61, func(map[string]bool, []store.OutcomeRecord) error { return nil }); err == nil ||
		!strings.Contains(err.Error(), `"checkout"`) {
		t.Errorf("a read of 62 minutes: %v", err)
	}
}

// TestOutcomeReadPages: any number of records is read — 200 totals and
// 150 records of one minute, where the read once stopped at 64 — in
// pages of at most MaxPage records (the retired record, first,
// aside), each record once, none of another experiment, all as the store
// held them when the read began: writes between pages are not seen. A
// page's error stops the read; a read that outlasts the compaction of its
// revision fails.
func TestOutcomeReadPages(t *testing.T) {
	ctx := t.Context()
	s, o := openOutcomes(t, "reader")
	want := map[string]bool{}
	var recs []store.OutcomeRecord
	add := func(key, replica string, minute int64) {
		recs = append(recs, outcomeRec(key, replica, minute, key+"/"+replica, 0))
		if key == "checkout" {
			want[fmt.Sprintf("%s@%d=%s/%s", replica, minute, key, replica)] = true
		}
	}
	add("checkout", store.RetiredReplica, 0)
	for i := range 200 {
		add("checkout", fmt.Sprintf("pod-%03d", i), 0)
		add("checkout-2", fmt.Sprintf("pod-%03d", i), 0) // a key checkout's prefix ranges must not reach
	}
	for i := range 150 {
		add("checkout", fmt.Sprintf("pod-%03d", i), 100)
	}
	for i := range 3 {
		add("checkout", fmt.Sprintf("pod-%03d", i), 101)
	}
	commitAll(t, o, recs)

	var got []string
	var pages []int
	var retiredFirst bool
	err := o.Read(ctx, "checkout", 95, 101, func(_ map[string]bool, page []store.OutcomeRecord) error {
		if len(pages) == 0 {
			retiredFirst = len(page) > 0 && page[0].Replica == store.RetiredReplica && page[0].Minute == 0
			// Written after the first page: a later page does not see it.
			commitAll(t, o, []store.OutcomeRecord{outcomeRec("checkout", "pod-new", 0, "new", 0)})
			if _, err := s.Client().Delete(ctx, storeetcd.DefaultPrefix+"outcomes/t/checkout/pod-199"); err != nil {
				return err
			}
		}
		pages = append(pages, len(page))
		for _, r := range page {
			got = append(got, fmt.Sprintf("%s@%d=%s", r.Replica, r.Minute, r.Value))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, g := range got {
		if seen[g]++; seen[g] == 2 || !want[g] {
			t.Errorf("record %s read twice, or not written", g)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d of %d records read", len(seen), len(want))
	}
	for i, n := range pages {
		limit := etcd.MaxPage
		if i == 0 {
			limit++ // the retired record
		}
		if n > limit {
			t.Errorf("page %d: %d records, at most %d", i, n, limit)
		}
	}
	if !retiredFirst {
		t.Error("the retired record is not the first of the first page")
	}
	if len(pages) < len(want)/etcd.MaxPage {
		t.Errorf("%d pages for %d records", len(pages), len(want))
	}

	// A page's error ends the read with it.
	stop := errors.New("stop")
	calls := 0
	if err := o.Read(ctx, "checkout", 95, 101, func(map[string]bool, []store.OutcomeRecord) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Errorf("a page's error: %v after %d pages", err, calls)
	}

	// A read whose revision is compacted between pages fails.
	err = o.Read(ctx, "checkout", 95, 101, func(map[string]bool, []store.OutcomeRecord) error {
		resp, err := s.Client().Put(context.WithoutCancel(ctx), "/unrelated", "x")
		if err != nil {
			return err
		}
		_, err = s.Client().Compact(ctx, resp.Header.Revision)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), `"checkout"`) {
		t.Errorf("a read outlasting its revision's compaction: %v", err)
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
	resp, err := s.Client().Get(ctx, storeetcd.DefaultPrefix+"outcomes/t/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), storeetcd.DefaultPrefix+"outcomes/t/"))
	}
	if strings.Join(keys, " ") != "c/r1" {
		t.Errorf("total records after the sweep: %d %.80v, want c/r1", len(keys), keys)
	}
}
