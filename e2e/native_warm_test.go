//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/nativemod"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/internal/harness"
)

// warmConfig reads only request headers, so the native module's warm path
// serves it: the unit, a country header two experiments' conditions read,
// and the :method pseudo-header.
const warmConfig = `{"version":"w1","attributes":[{"name":"country","header":"x-country"},` +
	`{"name":"method","property":"request.method"}],"experiments":[` +
	`{"key":"split","variations":["control","treatment"],"weights":[0.5,0.5]},` +
	`{"key":"three","variations":["a","b","c"],"weights":[0.2,0.3,0.5]},` +
	`{"key":"fr","variations":["off","on"],"weights":[0.5,0.5],"condition":{"country":"fr"}},` +
	`{"key":"notde","variations":["x","y"],"weights":[0.1,0.9],"condition":{"country":{"$ne":"de"}}},` +
	`{"key":"get","variations":["no","yes"],"weights":[0,1],"condition":{"method":"GET"}}]}`

// warmRequest is a random request: a unit (sometimes none, sometimes two
// x-user-id values, the first empty), a country (sometimes none or
// empty), now and then a forged assignment header.
func warmRequest(r *rand.Rand) map[string][]string {
	h := map[string][]string{}
	switch r.IntN(10) {
	case 0: // no unit
	case 1:
		h["x-user-id"] = []string{"", fmt.Sprint("u", r.IntN(40))}
	default:
		h["x-user-id"] = []string{fmt.Sprint("u", r.IntN(40))}
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		h["x-country"] = []string{""}
	default:
		h["x-country"] = []string{[]string{"fr", "de", "us"}[r.IntN(3)]}
	}
	if r.IntN(8) == 0 {
		h["X-Experiment-Split"] = []string{"forged"}
	}
	return h
}

// upstreamView is what the upstream saw of a request: its headers, but
// for those Envoy makes unique per request.
func upstreamView(r harness.EchoResponse) map[string][]string {
	out := maps.Clone(r.Headers)
	for name := range out {
		if n := strings.ToLower(name); n == "x-request-id" {
			delete(out, name)
		}
	}
	return out
}

// startWarmNative runs Envoy with the native module configured with
// config, the warm path on or off, logging each request's x-seq header
// and exposure record to the file it returns.
func startWarmNative(t *testing.T, config string, warm bool) (*proxy, string) {
	t.Helper()
	t.Setenv(nativemod.WarmEnv, map[bool]string{true: "1", false: "0"}[warm]) // Envoy inherits it
	log := filepath.Join(t.TempDir(), "access.log")
	p := startNativeBootstrap(t, "e2e/testdata/native-warm.yaml", map[string]string{
		"bin/liballot.so": harness.MustBuildNative(t, "./filter/native", "liballot.so"),
		"FILTER_CONFIG":   strings.ReplaceAll(config, "'", "''"),
		"ACCESS_LOG":      log,
	})
	return p, log
}

// exposures reads an access log of startWarmNative's until it has n lines
// and returns each request's exposure record by its x-seq.
func exposures(t *testing.T, log string, n int) map[string]string {
	t.Helper()
	var out map[string]string
	harness.MustEventually(t, 10*time.Second, func() error {
		b, err := os.ReadFile(log)
		if err != nil {
			return err
		}
		out = map[string]string{}
		for line := range strings.Lines(string(b)) {
			seq, exp, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " exposures=")
			out[strings.TrimPrefix(seq, "seq=")] = exp
		}
		if len(out) != n {
			return fmt.Errorf("%d requests logged, want %d", len(out), n)
		}
		return nil
	})
	return out
}

// TestNativeWarmPathEqualsGo sends the same random requests, three rounds
// of them, through the native module with the warm path off (every request
// served by Go) and on (a unit's later requests served in C), for each
// header mode, with the exposure record off, without a version and with
// observed experiments: the upstream sees the same headers for each
// request, header for header, the access log the same exposure record,
// and the counters agree (requests evaluated, failed open, per variation,
// per observed variation's outcome class).
func TestNativeWarmPathEqualsGo(t *testing.T) {
	for name, config := range map[string]string{
		"every header":  warmConfig,
		"lean":          strings.Replace(warmConfig, `{"version"`, `{"assignmentHeaders":"ASSIGNMENT_HEADERS_DICTIONARY","version"`, 1),
		"no exposure":   strings.Replace(warmConfig, `{"version"`, `{"disableExposureState":true,"version"`, 1),
		"empty version": strings.Replace(warmConfig, `"version":"w1",`, ``, 1),
		"observed": strings.NewReplacer(`"key":"split",`, `"key":"split","observe":true,`,
			`"key":"fr",`, `"key":"fr","observe":true,`).Replace(warmConfig),
	} {
		t.Run(name, func(t *testing.T) {
			cold, coldLog := startWarmNative(t, config, false)
			warm, warmLog := startWarmNative(t, config, true)
			r := rand.New(rand.NewPCG(37, 1))
			var reqs []map[string][]string
			for range 150 {
				reqs = append(reqs, warmRequest(r))
			}
			for round := range 3 {
				for i, h := range reqs {
					h = maps.Clone(h)
					h["x-seq"] = []string{fmt.Sprint(round, "-", i)} // no attribute reads it: the key is unchanged
					a, err := cold.get(h)
					if err != nil {
						t.Fatal(err)
					}
					b, err := warm.get(h)
					if err != nil {
						t.Fatal(err)
					}
					if av, bv := upstreamView(a), upstreamView(b); !maps.EqualFunc(av, bv, slices.Equal) {
						t.Fatalf("round %d, request %d %q:\nwarm path off: %q\nwarm path on:  %q", round, i, h, av, bv)
					}
				}
			}
			n := 3 * len(reqs)
			if a, b := exposures(t, coldLog, n), exposures(t, warmLog, n); !maps.Equal(a, b) {
				for seq, e := range a {
					if b[seq] != e {
						t.Errorf("request %s: exposure %q with the warm path off, %q with it on", seq, e, b[seq])
					}
				}
			}
			cs, ws := cold.settledStats(t), warm.settledStats(t)
			for name, n := range cs {
				if !strings.HasPrefix(name, "wasmcustom.allot.") || strings.Contains(name, "cache_") {
					continue // hits and misses depend on which worker each connection landed on
				}
				if ws[name] != n {
					t.Errorf("%s: %d with the warm path off, %d with it on", name, n, ws[name])
				}
			}
			if n := ws["wasmcustom."+plugin.MetricFailOpen]; n != 0 {
				t.Errorf("fail_open %d with the warm path on, want 0", n)
			}
		})
	}
}

// TestNativeWarmPathSkipsGo: once a unit's assignment is cached, its
// requests do not enter Go. The allotfault build panics in Go's header
// read when a request names "read" in x-allot-test-fault, a header no
// attribute reads (so the key is unchanged): with the warm path on, such
// requests of a warm unit are assigned and nothing fails open, while a
// request of a new unit still enters Go and fails open, as every such
// request does with the warm path off (TestNativePanicRecovered).
func TestNativeWarmPathSkipsGo(t *testing.T) {
	t.Setenv(nativemod.WarmEnv, "1")
	p := startStaticNative(t, warmConfig, "allotfault")
	evaluated, failOpen := "wasmcustom."+plugin.MetricEvaluated, "wasmcustom."+plugin.MetricFailOpen
	// settled waits until the counters account for every request sent
	// (they flush on a one-second tick): each is evaluated or failed open.
	settled := func() map[string]int64 {
		var s map[string]int64
		harness.MustEventually(t, 5*time.Second, func() error {
			s = p.MustStats(t)
			if got, want := s[evaluated]+s[failOpen], p.sent.Load(); got != want {
				return fmt.Errorf("%d requests counted, %d sent", got, want)
			}
			return nil
		})
		return s
	}
	unit := map[string][]string{"x-user-id": {"warm-unit"}, "x-country": {"fr"}}
	want, err := p.get(unit)
	if err != nil {
		t.Fatal(err)
	}
	faulted := maps.Clone(unit)
	faulted["x-allot-test-fault"] = []string{"read"}
	// Two workers, a cache each, connections spread over them: send the
	// unit until both hold it, i.e. until faulted requests stop failing
	// open (at most 10 rounds).
	warmed := false
	for round := 0; round < 10 && !warmed; round++ {
		for range 8 {
			if _, err := p.get(unit); err != nil {
				t.Fatal(err)
			}
		}
		before := settled()[failOpen]
		wrong := 0
		for range 20 {
			r, err := p.get(faulted)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Header("x-experiments"), want.Header("x-experiments")) {
				wrong++
			}
		}
		if settled()[failOpen] == before {
			warmed = true
			if wrong > 0 {
				t.Errorf("%d of 20 faulted requests of a warm unit served without its assignment", wrong)
			}
		}
	}
	if !warmed {
		t.Fatal("after 10 rounds, faulted requests of a warm unit still failed open: they entered Go")
	}
	before := settled()[failOpen]
	cold := maps.Clone(faulted)
	cold["x-user-id"] = []string{"cold-unit"}
	if _, err := p.get(cold); err != nil {
		t.Fatal(err)
	}
	if got := settled()[failOpen] - before; got != 1 {
		t.Errorf("a faulted request of a new unit: fail_open rose by %d, want 1 (it entered Go)", got)
	}
}
