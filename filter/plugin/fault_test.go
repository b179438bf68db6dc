package plugin_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/proxywasm"
)

// The fault-injection matrix: every request of faultRequests, under every
// configuration of faultConfigs, cold (a cache miss) and warm (a hit), is
// first run cleanly with the fake host tracing its calls; then once per
// call of that trace with that call failing, once with it panicking, and
// once per kind of call with every call of the kind failing or panicking.
// Whatever breaks, the service must see no forged value and either the
// clean run's full assignment or no assignment header at all, with the
// failure counted once in fail_open.

// faultFew is a configuration whose requests add a few headers (single
// adds): two experiments every unit is in, one on a property attribute
// (one proxy_get_property per request) and one on a cookie.
const faultFew = `{"version":"v","attributes":[{"name":"addr","property":"source.address"},{"name":"plan","cookie":"plan"}],
 "experiments":[{"key":"e00","variations":["a","b"]},{"key":"e01","variations":["a","b"]},
 {"key":"by-addr","variations":["a","b"],"weights":[0,1],"condition":{"addr":{"$regex":"^10\\."}}},
 {"key":"by-plan","variations":["a","b"],"weights":[0,1],"condition":{"plan":"pro"}}]}`

// faultConfigs: few headers added one call each, more than maxSingleWrites
// added with one rewrite, and the dictionary-only mode with as many
// experiments (two headers added).
var faultConfigs = []struct{ name, config string }{
	{"few experiments", faultFew},
	{"many experiments", experimentsEveryUnitIsIn(plugin.MaxSingleWrites + 5)},
	{"dictionary only", strings.Replace(experimentsEveryUnitIsIn(plugin.MaxSingleWrites+5), `"version":"v",`, `"version":"v","assignmentHeaders":"ASSIGNMENT_HEADERS_DICTIONARY",`, 1)},
}

// forgedNames is n distinct forged prefix headers, each in two casings.
func forgedNames(n int) [][2]string {
	var out [][2]string
	for i := range n {
		out = append(out, [2]string{fmt.Sprintf("x-experiment-f%02d", i), "forged"}, [2]string{fmt.Sprintf("X-Experiment-F%02d", i), "forged-again"})
	}
	return out
}

// faultRequests are hostile requests and one clean one. Every forged value
// contains "forged".
var faultRequests = []struct {
	name    string
	headers [][2]string
}{
	{"clean", [][2]string{{":path", "/"}, {"x-user-id", "u1"}, {"cookie", "plan=pro"}}},
	{"configured key in casings and copies", [][2]string{{":path", "/"}, {"x-user-id", "u1"}, {"cookie", "plan=pro"},
		{"X-Experiment-E01", "forged-1"}, {"x-experiment-e01", "forged-2"}, {"x-EXPERIMENT-e01", "forged-3"}, {"x-experiment-by-addr", "forged"}}},
	{"unconfigured keys", [][2]string{{"x-user-id", "u1"}, {"x-experiment-nope", "forged"}, {"X-EXPERIMENT-OTHER", "forged"}, {"x-experiment-other", "forged"}}},
	{"dictionary and version", [][2]string{{"x-user-id", "u1"}, {"X-Experiments", `e01="forged"`}, {"x-experiments", `e00="forged"`}, {"X-EXPERIMENTS-VERSION", "forged"}}},
	{"no unit id", [][2]string{{":path", "/"}, {"x-experiment-e00", "forged"}, {"x-experiments", `e00="forged"`}, {"x-experiments-version", "forged"}}},
	{"forged names at the limit", append([][2]string{{"x-user-id", "u1"}}, forgedNames(plugin.MaxSingleWrites)...)},
	{"forged names beyond the limit", append([][2]string{{"x-user-id", "u1"}, {"X-Experiment-E00", "forged"}}, forgedNames(plugin.MaxSingleWrites+4)...)},
}

// faultHost starts a plugin on a fresh fake host with source.address set
// (unless noProperty) and, when warm, sends headers once so the next
// request is a cache hit.
func faultHost(t *testing.T, config string, headers [][2]string, warm, noProperty bool) (*fakehost.Host, *proxywasm.Handler, uint32) {
	t.Helper()
	h := fakehost.New()
	if !noProperty {
		h.Properties[abi.JoinPath([]string{"source", "address"})] = []byte("10.1.2.3:5555")
	}
	p := proxywasm.New(h)
	root, ok := h.StartPlugin(p, []byte(config))
	if !ok {
		t.Fatalf("configuration refused: %v", h.Logs)
	}
	if warm {
		if _, err := h.Request(p, root, headers); err != nil {
			t.Fatal(err)
		}
	}
	return h, p, root
}

func TestFaultInjectionMatrix(t *testing.T) {
	cases, failed := 0, 0
	for _, c := range faultConfigs {
		for _, rq := range faultRequests {
			for _, warm := range []bool{false, true} {
				name := c.name + "/" + rq.name + map[bool]string{false: "/cold", true: "/warm"}[warm]
				// The clean run: the calls to break and the outcome to
				// expect.
				h, p, root := faultHost(t, c.config, rq.headers, warm, false)
				h.Trace = true
				want, err := h.Request(p, root, rq.headers)
				if err != nil || p.Plugin().FailOpen(root) != 0 {
					t.Fatalf("%s: clean run: %v, fail_open %d", name, err, p.Plugin().FailOpen(root))
				}
				checkNoForged(t, name+"/clean", want)
				trace := h.Calls
				// The outcome when proxy_get_property fails: the attribute is
				// missing, which is no error.
				h, p, root = faultHost(t, c.config, rq.headers, warm, true)
				wantNoProperty, _ := h.Request(p, root, rq.headers)

				// Each call of the trace in turn (the Nth call of any
				// kind), then every call of each kind; failing, then
				// panicking.
				type injection struct {
					f    fakehost.Fault
					call string // the call broken
				}
				var faults []injection
				for i, call := range trace {
					for _, panics := range []bool{false, true} {
						faults = append(faults, injection{fakehost.Fault{Nth: i + 1, Panic: panics}, call})
					}
				}
				for _, call := range slices.Compact(slices.Sorted(slices.Values(trace))) {
					for _, panics := range []bool{false, true} {
						faults = append(faults, injection{fakehost.Fault{Call: call, Panic: panics}, call})
					}
				}
				for _, in := range faults {
					f := in.f
					h, p, root := faultHost(t, c.config, rq.headers, warm, false)
					h.Inject(f)
					before := counted(p, root)
					got, err := h.Request(p, root, rq.headers)
					what := fmt.Sprintf("%s: %+v", name, f)
					if err != nil {
						t.Fatalf("%s: stream not continued: %v", what, err)
					}
					if h.Fired == 0 {
						t.Fatalf("%s: the fault never fired", what)
					}
					cases++
					if n := counted(p, root) - before; n != 1 {
						t.Fatalf("%s: the request was counted %d times (evaluated plus fail_open), want once", what, n)
					}
					switch {
					case !f.Panic && in.call == "proxy_set_property":
						// The exposure record is lost; the request keeps its
						// assignment.
						checkOutcome(t, what, rq.headers, got, want, p.Plugin().FailOpen(root), false)
					case !f.Panic && in.call == "proxy_get_property":
						checkOutcome(t, what, rq.headers, got, wantNoProperty, p.Plugin().FailOpen(root), false)
					case f.Nth == 0 && f.Call == "proxy_get_header_map_pairs":
						// The map can never be read: the configured names are
						// removed blind, other forged names cannot be known.
						failed++
						checkBlindScrub(t, what, p, root, rq.headers, got)
					default:
						failed++
						checkOutcome(t, what, rq.headers, got, want, p.Plugin().FailOpen(root), true)
					}
				}
			}
		}
	}
	t.Logf("%d injected faults, %d of them failing the request open", cases, failed)
}

// TestEveryHostCallBroken: when every host call fails or panics, the
// request still continues, unchanged, counted once.
func TestEveryHostCallBroken(t *testing.T) {
	for _, panics := range []bool{false, true} {
		for _, rq := range faultRequests {
			h, p, root := faultHost(t, faultFew, rq.headers, false, false)
			h.Inject(fakehost.Fault{Panic: panics})
			got, err := h.Request(p, root, rq.headers)
			if err != nil {
				t.Fatalf("%s (panic %v): stream not continued: %v", rq.name, panics, err)
			}
			if !slices.Equal(sortedPairs(got), sortedPairs(rq.headers)) || p.Plugin().FailOpen(root) != 1 {
				t.Fatalf("%s (panic %v): headers %q, fail_open %d; want them unchanged, 1", rq.name, panics, got, p.Plugin().FailOpen(root))
			}
		}
	}
}

// TestPanicInEveryStage breaks the configuration a root holds so that a
// stage without host calls panics — attribute extraction, the engine,
// the dictionary, the writes, the counters — and sends every fault
// request through it.
func TestPanicInEveryStage(t *testing.T) {
	for _, stage := range plugin.Stages {
		t.Run(stage, func(t *testing.T) {
			failed := 0
			for _, c := range faultConfigs {
				for _, rq := range faultRequests {
					h, p, root := faultHost(t, c.config, rq.headers, false, false)
					want, _ := h.Request(p, root, rq.headers)
					h, p, root = faultHost(t, c.config, rq.headers, false, false)
					p.Plugin().Sabotage(root, stage)
					before := counted(p, root)
					got, err := h.Request(p, root, rq.headers)
					what := c.name + "/" + rq.name
					if err != nil {
						t.Fatalf("%s: stream not continued: %v", what, err)
					}
					n := p.Plugin().FailOpen(root)
					failed += int(n)
					if n := counted(p, root) - before; n != 1 {
						t.Fatalf("%s: the request was counted %d times (evaluated plus fail_open), want once", what, n)
					}
					checkOutcome(t, what, rq.headers, got, want, n, n == 1)
				}
			}
			if failed == 0 {
				t.Fatal("no request reached the broken stage")
			}
		})
	}
}

// counted is how many requests root counted as evaluated or failed open:
// each request must add exactly one.
func counted(p *proxywasm.Handler, root uint32) int64 { return p.Plugin().Counted(root) }

// checkNoForged fails if any header value is forged.
func checkNoForged(t *testing.T, what string, got [][2]string) {
	t.Helper()
	for _, kv := range got {
		if strings.Contains(kv[1], "forged") {
			t.Fatalf("%s: forged header reached the service: %q", what, kv)
		}
	}
}

// checkOutcome: without a failure the service sees want (the clean run's
// headers) and nothing is counted; after one it sees the request's own
// headers without any assignment header, counted once.
func checkOutcome(t *testing.T, what string, in, got, want [][2]string, failOpen int64, failed bool) {
	t.Helper()
	checkNoForged(t, what, got)
	if !failed {
		if failOpen != 0 || !slices.Equal(sortedPairs(got), sortedPairs(want)) {
			t.Fatalf("%s: fail_open %d, headers %q; want 0 and the full assignment %q", what, failOpen, got, want)
		}
		return
	}
	if failOpen != 1 {
		t.Fatalf("%s: fail_open %d, want 1", what, failOpen)
	}
	if !slices.Equal(sortedPairs(got), sortedPairs(unowned(in))) {
		t.Fatalf("%s: headers %q; want the request's own %q without assignment headers", what, got, unowned(in))
	}
}

// checkBlindScrub: when the header map can never be read, the dictionary,
// the version and every configured experiment's header are gone; forged
// names the configuration does not know may stay.
func checkBlindScrub(t *testing.T, what string, p *proxywasm.Handler, root uint32, in, got [][2]string) {
	t.Helper()
	known := p.Plugin().KnownHeaders(root)
	for _, kv := range got {
		if slices.ContainsFunc(known, func(n string) bool { return strings.EqualFold(n, kv[0]) }) {
			t.Fatalf("%s: configured header %q left", what, kv)
		}
	}
	if p.Plugin().FailOpen(root) != 1 {
		t.Fatalf("%s: fail_open %d, want 1", what, p.Plugin().FailOpen(root))
	}
}

// unowned is headers without the default configuration's assignment
// headers.
func unowned(headers [][2]string) [][2]string {
	var out [][2]string
	for _, kv := range headers {
		if len(ownedHeaders([][2]string{kv})) == 0 {
			out = append(out, kv)
		}
	}
	return out
}

// sortedPairs is headers with lowercased names, sorted: the multiset the
// service receives.
func sortedPairs(headers [][2]string) [][2]string {
	out := make([][2]string, len(headers))
	for i, kv := range headers {
		out[i] = [2]string{strings.ToLower(kv[0]), kv[1]}
	}
	slices.SortFunc(out, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	return out
}
