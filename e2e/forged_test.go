//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
)

// rawRequest sends one HTTP/1.1 request with exactly the header lines given
// (names keep their casing) and returns the status code and the body.
func rawRequest(t *testing.T, url string, lines []string) (int, string) {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET / HTTP/1.1\r\nHost: " + addr + "\r\nConnection: close\r\n" + strings.Join(lines, "\r\n")
	if len(lines) > 0 {
		req += "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&body)
	return resp.StatusCode, body.String()
}

// forgedExperiments is how many experiments TestFilterForgedHeaders
// configures; forgedTargeted of them apply only to x-country NL, so a
// request from NL adds more headers than the filter adds one call each
// (the rewrite path) and any other request a few (single adds).
const (
	forgedExperiments = 45
	forgedTargeted    = 40
)

// TestFilterForgedHeaders sends hostile requests through a real Envoy:
// forged assignment headers in many casings and copies, for configured and
// unconfigured keys, more forged names than the filter removes one call
// each, without a unit id, with hostile values and a header map near
// Envoy's size limit; on both write paths. The service must never see a
// forged value, and sees either the full assignment or none.
func TestFilterForgedHeaders(t *testing.T) { forArtifacts(t, testFilterForgedHeaders) }

func testFilterForgedHeaders(t *testing.T, a artifact) {
	s := startSystemFor(t, a, "-mesh", repoPath(t, "envoy-configs/mesh.json"))
	p := s.startSidecar("sidecar-forged", "forged")
	for i := range forgedExperiments {
		def := map[string]any{"key": fmt.Sprintf("f%02d", i), "variations": []string{"off", "on"}, "weights": []float64{0, 1}}
		if i < forgedTargeted {
			def["condition"] = map[string]any{"country": "NL"}
		}
		s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", def, nil)
	}
	last := fmt.Sprintf("x-experiment-f%02d", forgedExperiments-1)
	waitAssigned(t, p, "probe", last)

	// forge returns header lines for name in several casings, copies
	// times each.
	forge := func(name string, copies int) []string {
		var out []string
		for _, n := range []string{name, strings.ToUpper(name), strings.ToUpper(name[:1]) + name[1:], mixedCase(name)} {
			for c := range copies {
				out = append(out, fmt.Sprintf("%s: forged-%d", n, c))
			}
		}
		return out
	}
	many := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("X-Experiment-Forged-%02d: forged", i))
		}
		return out
	}
	owned := append(append(forge("x-experiment-f00", 2), forge("x-experiment-f44", 2)...), append(forge("x-experiments", 2), forge("x-experiments-version", 2)...)...)
	unconfigured := append(forge("x-experiment-nope", 3), forge("x-experiment-f99", 1)...)
	big := make([]string, 40)
	for i := range big {
		big[i] = fmt.Sprintf("x-padding-%02d: %s", i, strings.Repeat("p", 1200))
	}
	// Values Envoy's codec accepts (a control byte or DEL it rejects with
	// 400 before any filter runs): obs-text, broken structured fields,
	// whitespace runs, 9 KB.
	hostile := []string{"x-experiment-f00: forged \xff\xfe\x80", "X-Experiments: f00=\"forged\xff\", f01=?1, f02=%\"\xc3\"", "x-experiment-f01: forged" + strings.Repeat(" \t", 100) + "x",
		"x-experiment-f02: " + strings.Repeat("forged", 1500), "X-EXPERIMENTS-VERSION: \"forged\"; v=1, forged"}

	unit, nl := []string{"x-user-id: u1"}, []string{"x-user-id: u1", "x-country: NL"}
	tests := []struct {
		name     string
		lines    []string
		assigned int // experiments the unit is in (0: no unit)
	}{
		{"casings and copies, single adds", append(owned, unit...), forgedExperiments - forgedTargeted},
		{"casings and copies, rewrite", append(owned, nl...), forgedExperiments},
		{"unconfigured keys", append(unconfigured, nl...), forgedExperiments},
		{"more forged names than single removals, single adds", append(many(45), unit...), forgedExperiments - forgedTargeted},
		{"more forged names than single removals, rewrite", append(append(many(45), owned...), nl...), forgedExperiments},
		{"no unit id", append(owned, unconfigured...), 0},
		{"no unit id, more forged names than single removals", many(45), 0},
		{"hostile values, rewrite", append(hostile, nl...), forgedExperiments},
		{"header map near Envoy's limit, rewrite", append(append(append(big, many(41)...), hostile...), nl...), forgedExperiments},
	}
	before := settledCounts(t, p)
	unassigned := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := rawRequest(t, p.URL, tt.lines)
			if code != http.StatusOK {
				t.Fatalf("status %d: %.300s", code, body)
			}
			if strings.Contains(body, "forged") {
				t.Fatalf("a forged value reached the service: %.2000s", body)
			}
			var r echo.Response
			if err := json.Unmarshal([]byte(body), &r); err != nil {
				t.Fatal(err)
			}
			var keys []string
			for name, v := range r.Headers {
				if strings.HasPrefix(name, "x-experiment-") {
					if len(v) != 1 || v[0] != "on" {
						t.Fatalf("%s = %q, want [on]", name, v)
					}
					keys = append(keys, name)
				}
			}
			switch {
			case len(keys) == 0 && len(r.Header("x-experiments")) == 0:
				if tt.assigned > 0 {
					unassigned++ // failed open: counted below
				}
			case len(keys) != tt.assigned || len(r.Header("x-experiments")) != 1 || len(r.Header("x-experiments-version")) != 1:
				t.Fatalf("%d assignment headers, dictionary %q, version %q; want %d, one, one", len(keys), r.Header("x-experiments"), r.Header("x-experiments-version"), tt.assigned)
			}
		})
	}
	// Every request was either evaluated or passed through unassigned,
	// and counted as such, once.
	var after [2]int64
	harness.MustEventually(t, 5*time.Second, func() error {
		after = counts(p.MustStats(t))
		if after[0]-before[0]+after[1]-before[1] != int64(len(tests)) || after[1]-before[1] != int64(unassigned) {
			return fmt.Errorf("evaluated +%d, fail_open +%d; want %d requests, %d of them unassigned", after[0]-before[0], after[1]-before[1], len(tests), unassigned)
		}
		return nil
	})
	t.Logf("%d hostile requests, %d passed through unassigned", len(tests), unassigned)
}

// counts is the evaluated and fail_open counters.
func counts(stats map[string]int64) [2]int64 {
	return [2]int64{stats["wasmcustom."+wire.MetricEvaluated], stats["wasmcustom."+wire.MetricFailOpen]}
}

// settledCounts returns the evaluated and fail_open counters once they
// have stopped moving: two reads more than a flush period (1 s) apart
// agree.
func settledCounts(t *testing.T, p *proxy) [2]int64 {
	t.Helper()
	var last [2]int64
	since := time.Now()
	harness.MustEventually(t, 15*time.Second, func() error {
		if c := counts(p.MustStats(t)); c != last {
			last, since = c, time.Now()
		}
		if time.Since(since) < 1200*time.Millisecond {
			return fmt.Errorf("counters %v still moving", last)
		}
		return nil
	})
	return last
}

// mixedCase alternates the case of name's letters: x-ExPeRiMeNt-….
func mixedCase(name string) string {
	b := []byte(name)
	for i := range b {
		if i%2 == 1 && 'a' <= b[i] && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		}
	}
	return string(b)
}

// forged are assignment headers a client forges, one of each kind Allot
// owns (its prefix in two casings and alone, the dictionary, the version):
// no guard lets any reach a service.
var forged = []string{"x-experiment-a", "X-Experiment-B", "x-experiment-", "x-experiments", "x-experiments-version"}

// withForged is headers plus every forged header and x-experimental-flag
// (not Allot's: it must reach the service).
func withForged(headers map[string][]string) map[string][]string {
	for _, h := range forged {
		headers[h] = []string{"forged"}
	}
	headers["x-experimental-flag"] = []string{"kept"}
	return headers
}

// noForged fails t if a forged header reached the service with its forged
// value or x-experimental-flag did not.
func noForged(t *testing.T, r harness.EchoResponse) {
	t.Helper()
	for _, h := range forged {
		if slices.Contains(r.Header(h), "forged") {
			t.Errorf("%s = %q reached the service", h, r.Header(h))
		}
	}
	if v := r.Header("x-experimental-flag"); len(v) != 1 || v[0] != "kept" {
		t.Errorf("x-experimental-flag = %q, want [kept]: not a header Allot owns", v)
	}
}
