package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/xds"
)

// failingRegistry is a hand-written Registry whose first fail publishes
// fail; it records when each publish came.
type failingRegistry struct {
	mu        sync.Mutex
	fail      int
	attempts  []time.Time
	published chan struct{} // receives after a successful publish
}

func (f *failingRegistry) Publish(context.Context, rollout.Replica, []rollout.Proxy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, time.Now())
	if len(f.attempts) <= f.fail {
		return errors.New("etcdserver: leader changed")
	}
	select {
	case f.published <- struct{}{}:
	default:
	}
	return nil
}

func (f *failingRegistry) View(context.Context) (rollout.View, error) { return rollout.View{}, nil }
func (f *failingRegistry) Replicas(context.Context) (map[string]rollout.Replica, error) {
	return nil, nil
}
func (f *failingRegistry) Settled(int64) (map[string]rollout.Replica, bool) { return nil, false }

func (f *failingRegistry) Roster(context.Context) (rollout.Roster, error) {
	return rollout.Roster{}, nil
}
func (f *failingRegistry) Watch(ctx context.Context) <-chan struct{} { return make(chan struct{}) }
func (f *failingRegistry) Withdraw(context.Context) error            { return nil }
func (f *failingRegistry) Lease() (int64, bool)                      { return 1, true }

// TestPublishRetriesWithBackoff: a failed publish is tried again without
// any change to publish, sooner than the periodic republish, and later
// after each failure in a row; every failure is counted.
func TestPublishRetriesWithBackoff(t *testing.T) {
	const fails = 4
	reg := &failingRegistry{fail: fails, published: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(t.Context())
	x := xds.New(ctx, func(string) (string, *corev3.TypedExtensionConfig, error) { return "v0", nil, nil })
	failed := NewPublishFailures()
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		Publish(ctx, reg, x, &Builder{}, rollout.Replica{ID: "r1"}, failed, slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()
	// The retries take 50+100+200+400 ms; the periodic republish alone
	// (republishEvery) would take fails seconds.
	select {
	case <-reg.published:
	case <-time.After(fails*republishEvery - 500*time.Millisecond):
		t.Fatalf("no successful publish %s after %d failures", time.Since(start), fails)
	}
	if got := testutil.ToFloat64(failed); got != fails {
		t.Errorf("allot_replica_publish_failures_total %v, want %d", got, fails)
	}
	reg.mu.Lock()
	attempts := reg.attempts
	reg.mu.Unlock()
	for i := 1; i <= fails; i++ {
		if gap, min := attempts[i].Sub(attempts[i-1]), publishRetry(i); gap < min {
			t.Errorf("retry %d came %s after the failure, want at least %s (backoff)", i, gap, min)
		}
	}
}
