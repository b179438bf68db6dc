package outcomes

import (
	"context"
	"errors"
	"fmt"
	"github.com/allotmesh/allot/internal/harness"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"

	"github.com/allotmesh/allot/control-plane/experiment"
	outcomesetcd "github.com/allotmesh/allot/control-plane/outcomes/etcd"
	"github.com/allotmesh/allot/control-plane/rollout"
	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
)

// mesh is allotd replicas' Aggregators sharing a real etcd, with one clock.
type mesh struct {
	t     *testing.T
	c     *etcdtest.Cluster
	st    *etcd.Store // the experiments' writer
	clock *harness.Clock
}

// replica is one replica: its registry (live while published) and its
// Aggregator, whose proxies have all applied.
type replica struct {
	reg *rolloutetcd.Registry
	a   *Aggregator
}

func newMesh(t *testing.T, specs ...string) *mesh {
	t.Helper()
	c := etcdtest.Start(t, 1)
	m := &mesh{t: t, c: c, st: c.Open(t), clock: harness.NewClock(time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC))}
	for _, s := range specs {
		if _, err := m.st.Create(t.Context(), &store.Experiment{Key: specKey(s), Spec: []byte(s)}, "test"); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// replica starts replica id, live in the registry unless dead, sharing
// through sh(the etcd records) if wrap is set.
func (m *mesh) replica(id string, live bool, wrap ...func(Shared) Shared) *replica {
	m.t.Helper()
	r, err := m.replicaOn(m.c.Open(m.t), id, 2*time.Second, live, wrap...)
	if err != nil {
		m.t.Fatal(err)
	}
	return r
}

// replicaOn is replica, on store s (a client of its own or shared), its
// registry record's lease ttl long; it may run on any goroutine.
func (m *mesh) replicaOn(s *etcd.Store, id string, ttl time.Duration, live bool, wrap ...func(Shared) Shared) (*replica, error) {
	reg := rolloutetcd.New(s.Conn(), id, ttl)
	if live {
		if err := reg.Publish(m.t.Context(), rollout.Replica{ID: id}, nil); err != nil {
			return nil, err
		}
	}
	var sh Shared = outcomesetcd.New(s.Conn(), id)
	for _, w := range wrap {
		sh = w(sh)
	}
	a, err := New(m.t.Context(), s, experiment.FromStore, prometheus.NewRegistry(), WithClock(m.clock.Now), WithShared(sh))
	if err != nil {
		return nil, err
	}
	return &replica{reg: reg, a: a}, nil
}

func (r *replica) add(t *testing.T, node string, v int, n float64) {
	t.Helper()
	if err := r.a.maybeRefresh(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	r.a.mu.Lock()
	rev := r.a.exps["checkout"].rev // the revision the replica read: its proxies run it
	r.a.mu.Unlock()
	r.a.Add(context.Background(), node, "", []*metricsv1.Metric{counter(nameAt(rev, v, "2xx"), n), histogram(latencyAt(rev, v), uint64(n), 0, 0)})
}

// reweighted is checkout with new weights: a new assignment revision.
const reweighted = `{"key":"checkout","variations":["a","b"],"weights":[0.2,0.8],"observe":true,"assignmentRevision":2}`

// addPublished is add, then publish.
func (r *replica) addPublished(t *testing.T, node string, v int, n float64) {
	t.Helper()
	r.add(t, node, v, n)
	r.publish(t)
}

func (r *replica) publish(t *testing.T) {
	t.Helper()
	if err := r.a.Publish(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// requests is what r reports of checkout: total requests and the 5-minute
// window's, per variation, and the timed requests of variation 0.
func (r *replica) requests(t *testing.T) (total, window [2]int64, timed int64) {
	t.Helper()
	rep, err := r.a.Report(context.Background(), "checkout", 5)
	if err != nil {
		t.Fatal(err)
	}
	for v := range 2 {
		total[v], window[v] = rep.Total[v].Requests, rep.Window[v].Requests
	}
	return total, window, rep.Total[0].Timed
}

func (r *replica) want(t *testing.T, what string, a, b int64) {
	t.Helper()
	total, window, timed := r.requests(t)
	if total != [2]int64{a, b} || window != [2]int64{a, b} || timed != a {
		t.Errorf("%s: total %v, window %v, timed %d; want [%d %d] each and %d timed", what, total, window, timed, a, b, a)
	}
}

// totals is how many total records checkout has in etcd.
func (m *mesh) totals(t *testing.T) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	err := outcomesetcd.New(m.st.Conn(), "reader").Read(t.Context(), "checkout", 0, 0, func(_ map[string]bool, recs []store.OutcomeRecord) error {
		for _, r := range recs {
			if r.Minute == 0 {
				ids[r.Replica] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestReplicasShareOutcomes: two replicas on one etcd, each with its own
// proxies, answer with the sum of both once each published; a replica's
// own figures are never behind (unpublished ones count at once, published
// ones are not counted twice), and a proxy moving from one replica to
// the other is counted once.
func TestReplicasShareOutcomes(t *testing.T) {
	m := newMesh(t, checkout)
	r1, r2 := m.replica("r1", true), m.replica("r2", true)
	r1.add(t, "p1", 0, 10)
	r2.add(t, "p2", 1, 7)
	r1.want(t, "r1 before any publish", 10, 0)
	r1.publish(t)
	r2.want(t, "r2 after r1 published", 10, 7)
	r2.publish(t)
	r1.want(t, "r1 after both published", 10, 7)
	r1.publish(t) // nothing new: nothing counted twice
	r1.add(t, "p1", 0, 5)
	r1.want(t, "r1 with unpublished figures", 15, 7)
	r2.want(t, "r2 before r1's next publish", 10, 7)
	r1.publish(t)
	r2.want(t, "r2 after r1's next publish", 15, 7)
	// p1 moves to r2: its deltas go on there.
	r2.addPublished(t, "p1", 0, 3)
	r1.want(t, "after p1 moved", 18, 7)
	r2.want(t, "after p1 moved", 18, 7)

	// The window covers minutes, the total everything: 10 minutes on,
	// only what came since is in the window.
	m.clock.Add(10 * time.Minute)
	r1.addPublished(t, "p1", 1, 2)
	total, window, _ := r2.requests(t)
	if total != [2]int64{18, 9} || window != [2]int64{0, 2} {
		t.Errorf("10 minutes on: total %v window %v, want [18 9] and [0 2]", total, window)
	}
}

// TestRestartedReplicaAdoptsItsRecords: a replica restarted with the same
// id goes on from the records its previous process published.
func TestRestartedReplicaAdoptsItsRecords(t *testing.T) {
	m := newMesh(t, checkout)
	r1 := m.replica("r1", true)
	r1.addPublished(t, "p1", 0, 10)
	again := m.replica("r1", true)
	again.add(t, "p1", 0, 4)
	again.want(t, "restarted, unpublished", 14, 0)
	again.publish(t)
	again.want(t, "restarted, published", 14, 0)
	if got := m.totals(t); len(got) != 1 || !got["r1"] {
		t.Errorf("total records %v, want r1's", got)
	}
}

// TestDeadReplicaFolded: the totals of replicas that are no longer live
// are folded into one retired record by a live one, so that replica
// restarts under new ids do not grow the records; the figures stay.
func TestDeadReplicaFolded(t *testing.T) {
	m := newMesh(t, checkout)
	live := m.replica("live", true)
	live.addPublished(t, "p0", 1, 1)
	want := int64(0)
	for i := range 5 {
		d := m.replica("gen-"+string(rune('a'+i)), true)
		d.add(t, "p1", 0, 10)
		d.publish(t)
		want += 10
		if err := d.reg.Withdraw(t.Context()); err != nil { // it stops: no longer live
			t.Fatal(err)
		}
		if err := live.a.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := m.totals(t); len(got) != 2+min(i, 1) {
			t.Errorf("gen %d, before FoldAfter: %d total records %v, want %d", i, len(got), got, 2+min(i, 1))
		}
		m.clock.Add(FoldAfter)
		if err := live.a.Sweep(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := m.totals(t); len(got) != 2 || !got["live"] || !got[store.RetiredReplica] {
			t.Errorf("gen %d, after FoldAfter: total records %v, want live and retired", i, got)
		}
		m.clock.Add(-FoldAfter) // the window stays put
		live.want(t, "after a fold", want, 1)
	}
}

// TestFoldedWhileCounting: a replica whose record another folded (it was
// not listed as live for FoldAfter) finds its comparison failing, reads
// its records back and publishes only what it had not: nothing is
// counted twice, nothing lost.
func TestFoldedWhileCounting(t *testing.T) {
	m := newMesh(t, checkout)
	slow := m.replica("slow", false) // not in the registry (yet)
	other := m.replica("other", true)
	slow.addPublished(t, "p1", 0, 10)
	m.clock.Add(FoldAfter)
	if err := other.a.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := m.totals(t); got["slow"] || !got[store.RetiredReplica] {
		t.Fatalf("total records %v, want slow's folded", got)
	}
	slow.add(t, "p1", 0, 3)
	if err := slow.a.Publish(t.Context()); err != nil { // the comparison fails
		t.Fatal(err)
	}
	slow.publish(t) // reads back, publishes the 3
	other.want(t, "after the fold and two publishes", 13, 0)
	slow.want(t, "after the fold and two publishes", 13, 0)
}

// TestSharedRevisionChange: a new assignment revision starts every
// replica's figures over; records of the older one are ignored, and
// deleted by the first replica that sees them.
func TestSharedRevisionChange(t *testing.T) {
	m := newMesh(t, checkout)
	r1, r2 := m.replica("r1", true), m.replica("r2", true)
	r1.addPublished(t, "p1", 0, 10)
	r2.addPublished(t, "p2", 0, 10)
	r1.want(t, "before", 20, 0)
	updateSpec(t, m.st, reweighted)
	r1.add(t, "p1", 1, 4)
	r1.want(t, "new revision on r1", 0, 4) // r2's record is of the old revision: ignored, then deleted
	if got := m.totals(t); len(got) != 0 {
		t.Errorf("total records %v after the report, want none (r1's unpublished, r2's deleted)", got)
	}
	r1.publish(t)
	r2.want(t, "new revision on r2", 0, 4)
}

// TestSweepDeletesRecords: the records of a deleted experiment are
// deleted, and minute records are deleted once out of every window.
func TestSweepDeletesRecords(t *testing.T) {
	m := newMesh(t, checkout)
	r1 := m.replica("r1", true)
	r1.addPublished(t, "p1", 0, 10)
	m.clock.Add((MaxWindowMinutes + 1) * time.Minute)
	r1.addPublished(t, "p1", 0, 1)
	if err := r1.a.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	resp, err := m.st.Client().Get(t.Context(), etcd.DefaultPrefix+"outcomes/m/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Errorf("%d minute records after the sweep, want 1 (the current minute's)", len(resp.Kvs))
	}
	cur, err := m.st.Get(t.Context(), "checkout")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.st.Delete(t.Context(), "checkout", cur.Revision, "test"); err != nil {
		t.Fatal(err)
	}
	if err := r1.a.maybeRefresh(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if err := r1.a.Sweep(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := m.totals(t); len(got) != 0 {
		t.Errorf("total records %v of a deleted experiment", got)
	}
}

// lostReply commits for real, then reports an error once when fail is
// set: a commit whose outcome is unknown to the replica.
type lostReply struct {
	Shared
	fail bool
}

func (l *lostReply) Commit(ctx context.Context, recs []store.OutcomeRecord) (int64, bool, error) {
	rev, ok, err := l.Shared.Commit(ctx, recs)
	if l.fail {
		l.fail = false
		return 0, false, errors.New("connection lost")
	}
	return rev, ok, err
}

// TestUnknownCommitNotCountedTwice: a commit whose reply was lost is
// recognised in the records read back, not published again.
func TestUnknownCommitNotCountedTwice(t *testing.T) {
	m := newMesh(t, checkout)
	var lr *lostReply
	r1 := m.replica("r1", true, func(s Shared) Shared { lr = &lostReply{Shared: s}; return lr })
	r1.addPublished(t, "p1", 0, 10)
	r1.add(t, "p1", 0, 5)
	lr.fail = true
	if err := r1.a.Publish(t.Context()); err == nil {
		t.Fatal("publish: no error")
	}
	r1.publish(t)
	r2 := m.replica("r2", true)
	r2.want(t, "after a lost reply", 15, 0)
}

// TestBehindReplicaLeavesNewerRecords: a replica that has not read an
// experiment's update yet (its refresh is under way elsewhere, or backing
// off) takes the records of the new assignment revision for newer, not
// older: it deletes none of them, so no published figure is lost.
func TestBehindReplicaLeavesNewerRecords(t *testing.T) {
	m := newMesh(t, checkout)
	r1, behind := m.replica("r1", true), m.replica("behind", true)
	behind.addPublished(t, "p2", 0, 5)
	updateSpec(t, m.st, reweighted)
	r1.addPublished(t, "p1", 1, 4)
	// behind tidies with what it read of the experiment before the update.
	now := m.clock.Now()
	sh, err := behind.a.read(t.Context(), "checkout", now.Unix()/60, now.Unix()/60, now) // tidies
	if err != nil {
		t.Fatal(err)
	}
	if sh.tidied != nil {
		t.Fatal(sh.tidied)
	}
	if got := m.totals(t); !got["r1"] {
		t.Fatalf("total records %v: r1's of the new revision deleted", got)
	}
	r1.addPublished(t, "p1", 1, 1)
	m.replica("r3", true).want(t, "the new revision, read by another replica", 0, 5)
}

// guardedCheckout is checkout with a guardrail on the error rate,
// evaluated from 1,000 requests a variation.
const guardedCheckout = `{"key":"checkout","variations":["a","b"],"weights":[0.5,0.5],"observe":true,
	"guardrails":[{"metric":"errorRate","maxIncrease":0.01,"minRequests":1000}]}`

// TestReplicaIDChurn: 200 replica ids over time leave the outcomes
// readable and the guardian deciding. 200 replicas (allotd pods rolled
// one after another, each id a hostname and an address) each count 10
// requests of a and 10 of b (3 of them 5xx), publish, and stop: 201
// total records and 201 of this minute, where a read once stopped at 64
// and every report failed. While they are live, and once they are gone
// but not for FoldAfter, a report answers with every figure, exactly,
// and its guardrail is evaluated (broken: the guardian rolls back on
// that). Once they have been gone for FoldAfter, two replicas reporting
// at once fold them into the retired record — in batches, by
// compare-and-swap — leaving the live replica's record and the retired
// one, and the figures stay exact: none lost, none counted twice.
func TestReplicaIDChurn(t *testing.T) {
	const pods = 200
	m := newMesh(t, guardedCheckout)
	live, other := m.replica("live", true), m.replica("other", true)
	live.addPublished(t, "p0", 0, 1)
	live.a.mu.Lock()
	rev := live.a.exps["checkout"].rev // the revision every pod reads: their proxies run it
	live.a.mu.Unlock()
	s := m.c.Open(t) // the pods' client
	gone := make([]*replica, pods)
	errs := make([]error, pods)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 50) // pods starting at once
	for i := range pods {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			pod, err := m.replicaOn(s, fmt.Sprintf("allotd-7f9c-%03d/10.0.%d.%d:18000", i, i/250, i%250), time.Minute, true)
			if err != nil {
				errs[i] = err
				return
			}
			node := "p-" + strconv.Itoa(i)
			pod.a.Add(t.Context(), node, "", []*metricsv1.Metric{counter(nameAt(rev, 0, "2xx"), 10), histogram(latencyAt(rev, 0), 10, 0, 0),
				counter(nameAt(rev, 1, "2xx"), 7), counter(nameAt(rev, 1, "5xx"), 3), histogram(latencyAt(rev, 1), 10, 0, 0)})
			gone[i], errs[i] = pod, pod.a.Publish(t.Context())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	a, b := int64(1+10*pods), int64(10*pods)
	decides := func(what string, r *replica) {
		t.Helper()
		r.want(t, what, a, b)
		rep, err := r.a.Report(t.Context(), "checkout", 5)
		if err != nil {
			t.Fatal(err)
		}
		if g := rep.GetGuardrails(); len(g) != 1 || !g[0].GetEvaluated() || !g[0].GetBreached() {
			t.Errorf("%s: guardrails %v, want evaluated and broken (b's error rate 30%%)", what, g)
		}
	}
	decides("200 live replicas", live)
	if got := len(m.totals(t)); got != pods+1 {
		t.Errorf("%d total records with 200 live replicas, want %d", got, pods+1)
	}
	for i, pod := range gone {
		wg.Go(func() { errs[i] = pod.reg.Withdraw(t.Context()) }) // they stop
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	decides("200 replicas gone, not for FoldAfter", other)
	if got := len(m.totals(t)); got != pods+1 {
		t.Errorf("%d total records before FoldAfter, want %d (none folded)", got, pods+1)
	}

	m.clock.Add(FoldAfter)
	for _, r := range []*replica{live, other} {
		wg.Go(func() { // each folds, and answers with the records as its read found them
			rep, err := r.a.Report(t.Context(), "checkout", 5)
			if err != nil {
				t.Error(err)
				return
			}
			if got := [2]int64{rep.GetTotal()[0].GetRequests(), rep.GetTotal()[1].GetRequests()}; got != [2]int64{a, b} {
				t.Errorf("a report folding at once with another's: total %v, want [%d %d]", got, a, b)
			}
		})
	}
	wg.Wait()
	if err := other.a.Sweep(t.Context()); err != nil { // folds what the reports left, if a comparison failed
		t.Fatal(err)
	}
	if got := m.totals(t); len(got) != 2 || !got["live"] || !got[store.RetiredReplica] {
		t.Errorf("total records after FoldAfter: %d (%v), want live's and the retired one", len(got), got)
	}
	decides("200 replicas folded, on live", live)
	decides("200 replicas folded, on other", other)
}
