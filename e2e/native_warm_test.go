//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/wire"
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
// x-user-id values, the first empty, sometimes a value of more than 128
// bytes: a two-byte length in the key), a country (sometimes none or
// empty), now and then a forged assignment header.
func warmRequest(r *rand.Rand) map[string][]string {
	h := map[string][]string{}
	switch r.IntN(10) {
	case 0: // no unit
	case 1:
		h["x-user-id"] = []string{"", fmt.Sprint("u", r.IntN(40))}
	case 2:
		h["x-user-id"] = []string{fmt.Sprint(strings.Repeat("l", 150), r.IntN(5))}
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

// faultHeader is nativemod.FaultHeader, which only the allotfault build
// defines: its value names the host call of the request that panics.
const faultHeader = "x-allot-test-fault"

// manyHeaders is a request of a warm unit with more headers than the warm
// path reads (dynmod.WarmMaxHeaders): C sends it to Go.
func manyHeaders() map[string][]string {
	h := map[string][]string{"x-user-id": {"u1"}, "x-country": {"fr"}}
	for i := range dynmod.WarmMaxHeaders + 1 {
		h[fmt.Sprint("x-pad-", i)] = []string{"p"}
	}
	return h
}

// upstreamView is what the upstream saw of a request: its headers, but
// for those Envoy makes unique per request and the test's own (x-seq,
// the fault header).
func upstreamView(r harness.EchoResponse) map[string][]string {
	out := maps.Clone(r.Headers)
	for name := range out {
		if n := strings.ToLower(name); n == "x-request-id" || n == "x-seq" || n == faultHeader {
			delete(out, name)
		}
	}
	return out
}

// scrubbed is view as a request that failed open reaches the upstream:
// without any header the filter owns.
func scrubbed(view map[string][]string) map[string][]string {
	out := maps.Clone(view)
	maps.DeleteFunc(out, func(name string, _ []string) bool {
		return strings.HasPrefix(strings.ToLower(name), "x-experiment")
	})
	return out
}

// startWarmNative runs Envoy with the native module's allotfault build as
// artifact a (nativeArtifact: the warm path on; nativeGoArtifact: off),
// configured with config, logging each request's x-seq header and
// exposure record to the file it returns.
func startWarmNative(t *testing.T, config string, a artifact) (*proxy, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "access.log")
	p := startNativeBootstrap(t, "e2e/testdata/native-warm.yaml", a.env(), map[string]string{
		"bin/liballot.so": harness.MustBuildNative(t, "./filter/native", "liballot.so", "allotfault"),
		"FILTER_CONFIG":   strings.ReplaceAll(config, "'", "''"),
		"ACCESS_LOG":      log,
	})
	return p, log
}

// rawStatus sends a GET with one extra header line, name: value, byte for
// byte (net/http refuses names that are not tokens), and returns the
// status Envoy answered.
func rawStatus(t *testing.T, p *proxy, name, value string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	req := "GET / HTTP/1.1\r\nHost: warm\r\nx-user-id: u1\r\n" + name + ": " + value + "\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
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
			if seq != "seq=-" {
				out[strings.TrimPrefix(seq, "seq=")] = exp
			}
		}
		if len(out) != n {
			return fmt.Errorf("%d requests logged, want %d", len(out), n)
		}
		return nil
	})
	return out
}

// TestNativeWarmPathEqualsGo sends the same random requests, three rounds
// of them after a cold start of new units that makes the warm Envoy's
// workers stop looking (wcache.h's skip), through the native module with the warm path off (every request
// served by Go) and on (a unit's later requests served in C), for each
// header mode, with the exposure record off, without a version and with
// observed experiments: the upstream sees the same headers for each
// request, header for header, the access log the same exposure record,
// and the counters agree (requests evaluated, failed open, per variation,
// per observed variation's outcome class); on each, every evaluated
// request is a cache hit or a miss. The requests include values longer
// than 128 bytes, a request with more headers than C reads and one with a
// header name that is not ASCII. Then a fourth round, with the allotfault
// build's x-allot-test-fault: read (a panic in Go's first header read),
// goes to the warm path's Envoy only: requests C serves stay assigned as
// before, and only those that enter Go fail open — the forged ones, the
// one with too many headers and new units, which must — and C served at
// least half of the others: the differential cannot pass with C serving
// nothing.
func TestNativeWarmPathEqualsGo(t *testing.T) {
	const coldStart = 300 // new units before the rounds: > 2 × 64 looks on each of the 2 workers
	for name, config := range map[string]string{
		"every header":  warmConfig,
		"lean":          strings.Replace(warmConfig, `{"version"`, `{"assignmentHeaders":"ASSIGNMENT_HEADERS_DICTIONARY","version"`, 1),
		"no exposure":   strings.Replace(warmConfig, `{"version"`, `{"disableExposureState":true,"version"`, 1),
		"empty version": strings.Replace(warmConfig, `"version":"w1",`, ``, 1),
		"observed": strings.NewReplacer(`"key":"split",`, `"key":"split","observe":true,`,
			`"key":"fr",`, `"key":"fr","observe":true,`).Replace(warmConfig),
	} {
		t.Run(name, func(t *testing.T) {
			cold, coldLog := startWarmNative(t, config, nativeGoArtifact)
			warm, warmLog := startWarmNative(t, config, nativeArtifact)
			r := rand.New(rand.NewPCG(37, 1))
			reqs := []map[string][]string{manyHeaders()}
			for range 150 {
				reqs = append(reqs, warmRequest(r))
			}
			// A cold start: new units, more than two windows of looks on
			// each worker (wcache.h's ALLOT_WLOOK_WINDOW), so that the warm
			// Envoy's workers stop looking; the fault round below finds C
			// serving only if Go's seen inserts ended the skip.
			for i := range coldStart {
				h := map[string][]string{"x-user-id": {fmt.Sprint("cold-", i)}}
				for _, p := range []*proxy{cold, warm} {
					if _, err := p.get(h); err != nil {
						t.Fatal(err)
					}
				}
			}
			views := make([]map[string][]string, len(reqs)) // the cold Envoy's, by request
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
					views[i] = upstreamView(a)
					if bv := upstreamView(b); !maps.EqualFunc(views[i], bv, slices.Equal) {
						t.Fatalf("round %d, request %d %q:\nwarm path off: %q\nwarm path on:  %q", round, i, h, views[i], bv)
					}
				}
			}
			// A name that is not ASCII: Envoy's HTTP/1 codec refuses it
			// (400) before any filter runs, so it reaches neither path
			// (the fuzz targets drive C with such names); were it ever
			// let through, the answers and the counts would have to agree.
			a, b := rawStatus(t, cold, "x-\xc3\xb1", "1"), rawStatus(t, warm, "x-\xc3\xb1", "1")
			if a != b {
				t.Errorf("a non-ASCII header name: status %d with the warm path off, %d with it on", a, b)
			}
			if a == http.StatusOK {
				cold.sent.Add(1)
				warm.sent.Add(1)
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
			evaluated, failOpen := "wasmcustom."+wire.MetricEvaluated, "wasmcustom."+wire.MetricFailOpen
			hits, misses := "wasmcustom."+wire.MetricCacheHits, "wasmcustom."+wire.MetricCacheMisses
			for path, s := range map[string]map[string]int64{"off": cs, "on": ws} {
				if s[hits]+s[misses] != s[evaluated] || s[evaluated] == 0 {
					t.Errorf("the warm path %s: %d cache hits + %d misses, %d requests evaluated; want as many", path, s[hits], s[misses], s[evaluated])
				}
			}
			if n := ws[failOpen]; n != 0 {
				t.Errorf("fail_open %d with the warm path on, want 0", n)
			}

			// The fourth round: Go panics in its first header read.
			mustGo := map[int]bool{}
			for i, h := range reqs {
				if _, forged := h["X-Experiment-Split"]; forged || i == 0 {
					mustGo[i] = true
				}
			}
			fresh := len(reqs)
			reqs = append(reqs, map[string][]string{"x-user-id": {"fresh-1"}}, map[string][]string{"x-user-id": {"fresh-2"}, "x-country": {"fr"}})
			mustGo[fresh], mustGo[fresh+1] = true, true
			before := ws[failOpen]
			failed := 0
			for i, h := range reqs {
				h = maps.Clone(h)
				h["x-seq"] = []string{fmt.Sprint(3, "-", i)}
				h[faultHeader] = []string{"read"}
				b, err := warm.get(h)
				if err != nil {
					t.Fatal(err)
				}
				bv := upstreamView(b)
				switch {
				case i < fresh && maps.EqualFunc(bv, views[i], slices.Equal) && !mustGo[i]:
				case maps.EqualFunc(bv, scrubbed(bv), slices.Equal) && (i >= fresh || maps.EqualFunc(bv, scrubbed(views[i]), slices.Equal)):
					failed++
				default:
					t.Errorf("fault round, request %d %q: the upstream saw %q, want it as before or failed open", i, h, bv)
				}
			}
			ws = warm.settledStats(t)
			served, candidates := len(reqs)-int(ws[failOpen]-before), len(reqs)-len(mustGo)
			if got := int(ws[failOpen] - before); got < len(mustGo) || got < failed {
				t.Errorf("fault round: fail_open rose by %d, want at least the %d requests that must enter Go and the %d that looked failed open", got, len(mustGo), failed)
			}
			if served*2 < candidates {
				t.Errorf("fault round: C served %d of the %d requests it could: the warm path serves (nearly) nothing", served, candidates)
			}
			t.Logf("fault round: C served %d of the %d requests it could, %d entered Go and failed open", served, candidates, ws[failOpen]-before)
			if s := ws; s[hits]+s[misses] != s[evaluated] {
				t.Errorf("after the fault round: %d cache hits + %d misses, %d requests evaluated; want as many", s[hits], s[misses], s[evaluated])
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
	p := startStaticNative(t, nativeArtifact, warmConfig, "allotfault")
	failOpen := "wasmcustom." + wire.MetricFailOpen
	settled := func() map[string]int64 { return p.settledStats(t) }
	unit := map[string][]string{"x-user-id": {"warm-unit"}, "x-country": {"fr"}}
	want, err := p.get(unit)
	if err != nil {
		t.Fatal(err)
	}
	faulted := maps.Clone(unit)
	faulted[faultHeader] = []string{"read"}
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
