//go:build cgo

package nativemod

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

// fakeModule is a module whose workers talk to fake hosts, one per worker,
// created as Envoy's workers would be.
type fakeModule struct {
	*module
	mu    sync.Mutex
	hosts map[*worker]*fakehost.Host
	// observed are the outcome stat ids requests left (the fake streams
	// are not hooks.c's); guarded by mu.
	observed [][]uint64
}

func newFakeModule(workers int) *fakeModule {
	f := &fakeModule{module: newModule(), hosts: map[*worker]*fakehost.Host{}}
	f.newHost = func(w *worker) plugin.Host {
		b := fakehost.NewBatcher() // the native host batches its adds
		f.mu.Lock()
		f.hosts[w] = b.Host
		f.mu.Unlock()
		return proxywasm.NewHost(b)
	}
	f.replyUnsupported = func() string { return "" } // a configuration that answers requests runs here
	f.observeStream = func(_ dynmod.Stream, _ dynmod.Config, ids []uint64) bool {
		f.mu.Lock()
		f.observed = append(f.observed, slices.Clone(ids))
		f.mu.Unlock()
		return true
	}
	f.ProgramInit(uint32(workers))
	return f
}

func (f *fakeModule) host(i int) *fakehost.Host {
	w := f.worker(uint32(i))
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hosts[w]
}

// request runs one stream of configuration h on worker i, as Envoy would
// (filter-new and filter-destroy are C: the stream's module value is h).
// It returns the headers the upstream sees.
func (f *fakeModule) request(i int, h uintptr, headers [][2]string) [][2]string {
	fh := f.host(i)
	filter := dynmod.Filter(uint64(i)<<32 | 1)
	w := f.worker(uint32(i))
	w.mu.Lock() // the fake's map is the worker's: set it as Envoy would, on its thread
	fh.Headers[abi.RequestHeaders] = append([][2]string(nil), headers...)
	w.mu.Unlock()
	f.RequestHeaders(filter, 0, h, true)
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][2]string(nil), fh.Headers[abi.RequestHeaders]...)
}

func experimentsConfig(version string, n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"version":%q,"experiments":[`, version)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"key":"exp-%d","variations":["a","b","c"],"weights":[0.2,0.3,0.5]}`, i)
	}
	b.WriteString("]}")
	return b.String()
}

// expected is the engine's own dictionary header for id.
func expected(t *testing.T, cfg, id string) string {
	t.Helper()
	_, set, err := config.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, a := range set.Assign(nil, engine.Attributes{"id": id}) {
		if a.InExperiment {
			parts = append(parts, fmt.Sprintf("%s=%q", a.Key, a.Value))
		}
	}
	return strings.Join(parts, ", ")
}

func header(headers [][2]string, name string) (string, int) {
	v, n := "", 0
	for _, kv := range headers {
		if strings.EqualFold(kv[0], name) {
			v, n = kv[1], n+1
		}
	}
	return v, n
}

// TestWorkersShareOneConfiguration drives four workers from four goroutines
// (run with -race) while the main thread replaces the configuration under
// them, as ECDS updates do: every request gets exactly the engine's
// assignment under the configuration its stream was created with, a
// forged header never survives, and every request is counted once.
func TestWorkersShareOneConfiguration(t *testing.T) {
	const workers, perWorker, updates = 4, 600, 20
	m := newFakeModule(workers)
	configs := make([]string, updates+1)
	want := make([]map[string]string, updates+1) // dictionary by unit, per config
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("unit-%d-é", i)
	}
	handles := make([]uintptr, updates+1)
	for v := range configs {
		configs[v] = experimentsConfig(fmt.Sprintf("v%d", v), 3+v%4)
		want[v] = map[string]string{}
		for _, id := range ids {
			want[v][id] = expected(t, configs[v], id)
		}
	}
	handles[0] = m.ConfigNew(0, FilterName, []byte(configs[0]))
	var current atomic.Int64 // index into handles of the newest configuration

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	var served atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for r := range perWorker {
				v := int(current.Load())
				id := ids[(r*7+w)%len(ids)]
				out := m.request(w, handles[v], [][2]string{{"x-user-id", id}, {"x-experiments", "forged"}, {"X-Experiment-Exp-0", "forged"}})
				served.Add(1)
				dict, n := header(out, "x-experiments")
				ver, _ := header(out, "x-experiments-version")
				if n != 1 || dict != want[v][id] || ver != fmt.Sprintf("v%d", v) {
					errs <- fmt.Errorf("worker %d, v%d, %s: x-experiments %q (%d copies), version %q; want %q", w, v, id, dict, n, ver, want[v][id])
					return
				}
				if got, _ := header(out, "x-experiment-exp-0"); got == "forged" {
					errs <- fmt.Errorf("worker %d: forged header passed", w)
					return
				}
			}
		})
	}
	// The main thread: a new configuration every so often, the previous
	// destroyed once no new stream uses it (streams in flight keep it).
	for v := 1; v <= updates; v++ {
		runtime.Gosched()
		h := m.ConfigNew(0, FilterName, []byte(configs[v]))
		if h == 0 {
			t.Fatalf("v%d refused", v)
		}
		handles[v] = h
		current.Store(int64(v))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Destroy all but the newest (each worker's root of each flushes its
	// last counts as it goes), then one tick flushes the newest's.
	for v := range updates {
		m.ConfigDestroy(handles[v])
	}
	m.flush()
	var evaluated, failOpen int64
	for w := range workers {
		h := m.host(w)
		evaluated += h.Counter(wire.MetricEvaluated)
		failOpen += h.Counter(wire.MetricFailOpen)
	}
	if evaluated != served.Load() || failOpen != 0 {
		t.Errorf("counted %d evaluated and %d failed open, want %d and 0", evaluated, failOpen, served.Load())
	}
	newest := (*m.configs.Load())[handles[updates]].id
	for w := range workers {
		for id := range m.worker(uint32(w)).roots {
			if id != newest {
				t.Errorf("worker %d keeps the root of destroyed configuration %d", w, id)
			}
		}
	}
}

// TestConfigurationRefused: a configuration the plugin's parser rejects,
// or one for another filter name, gets no handle (Envoy keeps the
// previous one) and installs nothing.
func TestConfigurationRefused(t *testing.T) {
	m := newFakeModule(1)
	for name, tc := range map[string]struct{ filter, config string }{
		"bad weights":  {FilterName, `{"experiments":[{"key":"k","variations":["a","b"],"weights":[0.9,0.9]}]}`},
		"not json":     {FilterName, `{`},
		"other filter": {"not-allot", `{}`},
	} {
		t.Run(name, func(t *testing.T) {
			if h := m.ConfigNew(0, tc.filter, []byte(tc.config)); h != 0 {
				t.Errorf("handle %d, want 0 (refused)", h)
			}
		})
	}
	if n := len(*m.configs.Load()); n != 0 {
		t.Errorf("%d configurations kept, want 0", n)
	}
}

// TestUnknownHandlePassesThrough: a stream whose configuration is gone is
// left alone (no panic, no header).
func TestUnknownHandlePassesThrough(t *testing.T) {
	m := newFakeModule(1)
	out := m.request(0, 42, [][2]string{{"x-user-id", "u"}})
	if _, n := header(out, "x-experiments"); n != 0 {
		t.Errorf("assignment added for an unknown configuration: %v", out)
	}
}

// TestHostFaultFailsOpenOnWorker: a host call that panics on one worker
// fails that request open — forged headers removed, counted — and the
// worker serves the next request normally.
func TestHostFaultFailsOpenOnWorker(t *testing.T) {
	m := newFakeModule(2)
	cfg := experimentsConfig("v1", 2)
	h := m.ConfigNew(0, FilterName, []byte(cfg))
	m.request(1, h, [][2]string{{"x-user-id", "warm"}})
	m.host(1).Inject(fakehost.Fault{Call: "batch_add_header", Nth: 1, Panic: true})
	out := m.request(1, h, [][2]string{{"x-user-id", "u1"}, {"x-experiments", "forged"}})
	if _, n := header(out, "x-experiments"); n != 0 {
		t.Errorf("failed request kept an assignment header: %v", out)
	}
	out = m.request(1, h, [][2]string{{"x-user-id", "u1"}})
	if got, _ := header(out, "x-experiments"); got != expected(t, cfg, "u1") {
		t.Errorf("next request: x-experiments %q, want %q", got, expected(t, cfg, "u1"))
	}
	m.flush()
	if n := m.host(1).Counter(wire.MetricFailOpen); n != 1 {
		t.Errorf("fail_open %d, want 1", n)
	}
}

// TestUpdatesStartNoGoroutine: configuration updates and the streams
// under them leave the number of goroutines where it was.
func TestUpdatesStartNoGoroutine(t *testing.T) {
	m := newFakeModule(2)
	h := m.ConfigNew(0, FilterName, []byte(experimentsConfig("v0", 2)))
	m.request(0, h, [][2]string{{"x-user-id", "u"}})
	before := runtime.NumGoroutine()
	for v := range 50 {
		next := m.ConfigNew(0, FilterName, []byte(experimentsConfig(fmt.Sprint("v", v+1), 2)))
		m.request(v%2, next, [][2]string{{"x-user-id", "u"}})
		m.ConfigDestroy(h)
		h = next
	}
	m.flush()
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d goroutines after 50 updates, %d before", after, before)
	}
	if n := len(*m.configs.Load()); n != 1 {
		t.Errorf("%d configurations kept, want 1", n)
	}
}

// TestStickyHandles: only a sticky configuration's streams keep state (an
// even handle); a request that assigns a new unit leaves its cookie for
// the response, one that carries it back leaves none.
func TestStickyHandles(t *testing.T) {
	m := newFakeModule(2)
	plain := m.ConfigNew(0, FilterName, []byte(experimentsConfig("v1", 2)))
	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 32))
	sticky := m.ConfigNew(0, FilterName, []byte(`{"version":"s","stickyCookie":{"name":"sb","keys":[{"id":"k","secret":"`+secret+`"}]},
		"experiments":[{"key":"e","variations":["a","b"]}]}`))
	if plain&dynmod.Stateless == 0 || sticky == 0 || sticky&dynmod.Stateless != 0 {
		t.Fatalf("handles %#x (plain), %#x (sticky): want odd and even", plain, sticky)
	}
	m.request(0, plain, [][2]string{{"x-user-id", "u1"}})
	if len(m.cookies) != 0 {
		t.Fatalf("plain configuration left cookies %q", m.cookies)
	}
	m.request(0, sticky, [][2]string{{"x-user-id", "u1"}})
	if len(m.cookies) != 1 || !strings.HasPrefix(m.cookies[0], "sb=k.") {
		t.Fatalf("sticky configuration left %q, want one sb cookie", m.cookies)
	}
	nv, _, _ := strings.Cut(m.cookies[0], ";")
	m.request(1, sticky, [][2]string{{"x-user-id", "u1"}, {"cookie", nv}})
	if len(m.cookies) != 1 {
		t.Fatalf("the cookie returned (on another worker) left %q", m.cookies[1:])
	}
}

// TestObservedHandles: a configuration with an observed experiment gets
// an even handle (its streams keep C state), and each request leaves the
// stat ids of its observed variations for the stream's C hooks — each
// class's counter then the latency histogram, of the variation it was
// assigned — and of no experiment that does not observe. A configuration
// without one keeps an odd handle and leaves nothing.
func TestObservedHandles(t *testing.T) {
	m := newFakeModule(1)
	plain := m.ConfigNew(0, FilterName, []byte(experimentsConfig("v1", 2)))
	observed := m.ConfigNew(0, FilterName, []byte(`{"version":"o","experiments":[
		{"key":"plain","variations":["a","b"],"force":0},
		{"key":"one","variations":["a","b"],"force":1,"observe":true},
		{"key":"two","variations":["a","b","c"],"force":2,"observe":true}]}`))
	if plain&dynmod.Stateless == 0 || observed == 0 || observed&dynmod.Stateless != 0 {
		t.Fatalf("handles %#x (plain), %#x (observed): want odd and even", plain, observed)
	}
	m.request(0, plain, [][2]string{{"x-user-id", "u1"}})
	if len(m.observed) != 0 {
		t.Fatalf("plain configuration left outcome ids %v", m.observed)
	}
	m.request(0, observed, [][2]string{{"x-user-id", "u1"}})
	// Slots: one's variations 0 and 1, then two's 0, 1, 2; ids are
	// positions, dynmod.OutcomeIDs per slot. The request is in one's
	// variation 1 (slot 1) and two's variation 2 (slot 4).
	var want []uint64
	for _, slot := range []int{1, 4} {
		for k := range dynmod.OutcomeIDs {
			want = append(want, uint64(slot*dynmod.OutcomeIDs+k))
		}
	}
	if len(m.observed) != 1 || !slices.Equal(m.observed[0], want) {
		t.Fatalf("outcome ids %v, want [%v]", m.observed, want)
	}
}

// TestOutcomeClassesAgree: the C response hook's classes are the plugin's
// (the Wasm module's), for every status and malformed ones, and a stream's
// ids are one counter per class and the histogram.
func TestOutcomeClassesAgree(t *testing.T) {
	if dynmod.OutcomeIDs != wire.NumClasses+1 {
		t.Fatalf("dynmod.OutcomeIDs = %d, want wire.NumClasses+1 = %d", dynmod.OutcomeIDs, wire.NumClasses+1)
	}
	statuses := []string{"", "2", "20", "2000", "2x0", "20x", ":00", "a00", "-1", "\x00\x00\x00"}
	for s := range 1000 {
		statuses = append(statuses, strconv.Itoa(s), fmt.Sprintf("%03d", s))
	}
	for _, s := range statuses {
		if c, g := dynmod.StatusClass(s), wire.StatusClass(s); c != g {
			t.Errorf("status %q: C class %d, Go class %d", s, c, g)
		}
	}
	if dynmod.StatusClass("503") != wire.Class5xx || dynmod.StatusClass("101") != wire.ClassOther {
		t.Errorf("503 → %d, 101 → %d", dynmod.StatusClass("503"), dynmod.StatusClass("101"))
	}
}

// TestObserveFailureCounted: when a request's observed stat ids cannot be
// left in its stream's C state — the stream has none (filter-new's calloc
// failed: its module value is 0, which the real dynmod.Stream.Observe
// refuses) or the copy's malloc fails — the request is still served and is
// counted in allot.outcomes_unrecorded once, on the flush; a request whose
// ids were left is not, and a configuration without an observed
// experiment has no such counter.
func TestObserveFailureCounted(t *testing.T) {
	observedCfg := `{"version":"o","experiments":[{"key":"one","variations":["a","b"],"force":1,"observe":true}]}`
	for _, tc := range []struct {
		name    string
		observe func(f *fakeModule) func(dynmod.Stream, dynmod.Config, []uint64) bool
		want    int64
	}{
		{"left in the stream", func(f *fakeModule) func(dynmod.Stream, dynmod.Config, []uint64) bool { return f.observeStream }, 0},
		{"no stream state", func(*fakeModule) func(dynmod.Stream, dynmod.Config, []uint64) bool { return dynmod.Stream.Observe }, 1},
		{"malloc failed", func(*fakeModule) func(dynmod.Stream, dynmod.Config, []uint64) bool {
			return func(dynmod.Stream, dynmod.Config, []uint64) bool { return false }
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeModule(1)
			m.observeStream = tc.observe(m)
			plain := m.ConfigNew(0, FilterName, []byte(experimentsConfig("v1", 1)))
			h := m.ConfigNew(0, FilterName, []byte(observedCfg))
			m.request(0, plain, [][2]string{{"x-user-id", "u1"}})
			got := m.request(0, h, [][2]string{{"x-user-id", "u1"}})
			if v, n := header(got, "x-experiment-one"); n != 1 || v != "b" {
				t.Fatalf("x-experiment-one %q (%d), want b once: the request must be served as usual", v, n)
			}
			m.flush()
			host := m.host(0)
			dropped, ok := host.Metrics[wire.MetricOutcomesUnrecorded]
			if !ok {
				t.Fatalf("%s not defined; metrics %v", wire.MetricOutcomesUnrecorded, slices.Sorted(maps.Keys(host.Metrics)))
			}
			if dropped.Value != tc.want {
				t.Errorf("%s = %d, want %d", wire.MetricOutcomesUnrecorded, dropped.Value, tc.want)
			}
			c, err := plugin.ParseConfig([]byte(experimentsConfig("v1", 1)))
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(c.MetricNames(), wire.MetricOutcomesUnrecorded) {
				t.Errorf("a configuration without an observed experiment defines %s", wire.MetricOutcomesUnrecorded)
			}
		})
	}
}

// TestRetainedOutcomeStats: a configuration keeps defined the outcome stats
// of the configurations live when it was made (a replaced revision's,
// whose last counts Envoy would free with the old configuration before
// its next stats flush), for retainOutcomes after they were last seen
// live, and no longer.
func TestRetainedOutcomeStats(t *testing.T) {
	observed := func(rev int) string {
		return fmt.Sprintf(`{"version":"r%d","experiments":[{"key":"k","variations":["a","b"],"observe":true,"assignmentRevision":%d}]}`, rev, rev)
	}
	m := newFakeModule(1)
	old := m.ConfigNew(0, FilterName, []byte(observed(1)))
	m.ConfigNew(0, FilterName, []byte(observed(2)))
	m.ConfigDestroy(old)
	for _, rev := range []int64{1} { // live when revision 2's configuration was made
		for v := range 2 {
			if _, ok := m.retained[wire.OutcomeMetric("k", rev, v, wire.Class5xx)]; !ok {
				t.Errorf("revision %d variation %d: outcome stats not retained", rev, v)
			}
			if r, ok := m.retained[wire.OutcomeMetric("k", rev, v, wire.Latency)]; !ok || !r.histogram {
				t.Errorf("revision %d variation %d: latency histogram not retained as one (%+v)", rev, v, r)
			}
		}
	}
	m.mu.Lock()
	m.retainLocked(0, &entry{}, time.Now().Add(retainOutcomes+time.Second))
	m.mu.Unlock()
	if _, ok := m.retained[wire.OutcomeMetric("k", 1, 0, wire.Class2xx)]; ok {
		t.Error("revision 1's stats retained after retainOutcomes, its configuration gone")
	}
	if _, ok := m.retained[wire.OutcomeMetric("k", 2, 0, wire.Class2xx)]; !ok {
		t.Error("revision 2's stats dropped while its configuration is live")
	}
}
