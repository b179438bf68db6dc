//go:build e2e && reliability

package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// The reliability suite (make test-reliability) proves that Allot keeps
// serving and loses nothing under faults, load and hostile input. Each test
// appends what it did and what it saw to $ALLOT_RELIABILITY_OUT (JSON lines),
// from which docs/RELIABILITY.md is generated.

// record is one line of the reliability report.
type record struct {
	Section string `json:"section"` // load, faults, bad_input, security, durability
	Test    string `json:"test"`
	What    string `json:"what"`
	Result  string `json:"result"`
	Lost    int    `json:"lost"` // acknowledged writes or requests lost
	Command string `json:"command"`
	// Artifact is the filter build the row ran against ("wasm" or
	// "native"), from the subtest forEachArtifact named; empty when the row is
	// not about one.
	Artifact string `json:"artifact,omitempty"`
}

// artifactOf returns the artifact whose name is one of the subtest names
// of test (e.g. "TestReliabilitySoak/native"), or "".
func artifactOf(test string) string {
	for _, part := range strings.Split(test, "/")[1:] {
		for _, a := range artifacts {
			if part == a.name {
				return a.name
			}
		}
	}
	return ""
}

var recordMu sync.Mutex

// report appends a record for t to $ALLOT_RELIABILITY_OUT, if set.
func report(t *testing.T, section, what, result string, lost int) {
	t.Helper()
	t.Logf("[%s] %s: %s (lost %d)", section, what, result, lost)
	path := os.Getenv("ALLOT_RELIABILITY_OUT")
	if path == "" {
		return
	}
	rec := record{Section: section, Test: t.Name(), What: what, Result: result, Lost: lost, Artifact: artifactOf(t.Name()),
		Command: fmt.Sprintf("go test -tags 'e2e reliability' -count=1 -run '^%s$' ./e2e/", strings.SplitN(t.Name(), "/", 2)[0])}
	b, _ := json.Marshal(rec)
	recordMu.Lock()
	defer recordMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("reliability report: %v", err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatalf("reliability report: %v", err)
	}
}

// countStatus sends n requests through p for distinct users and returns how
// many carried header and how many were not 2xx.
func countStatus(t *testing.T, p *proxy, n int, prefix, header string) (assigned, bad int) {
	t.Helper()
	for i := range n {
		r, err := p.get(map[string][]string{"x-user-id": {fmt.Sprintf("%s-%d", prefix, i)}})
		if err != nil {
			bad++
			continue
		}
		if len(r.Header(header)) == 1 {
			assigned++
		}
	}
	return assigned, bad
}

// TestReliabilityControlPlaneDown: with allotd gone, Envoy keeps assigning
// with its last configuration; an Envoy restarted while allotd is down serves
// (default configuration, no 5xx); when allotd returns, every proxy converges.
func TestReliabilityControlPlaneDown(t *testing.T) {
	s := startSystem(t)
	a := s.startSidecar("down-a", "down")
	b := s.startSidecar("down-b", "down")
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "survivor", "variations": []string{"x", "y"}, "weights": []float64{0.5, 0.5}}, nil)
	waitAssigned(t, a, "probe", "x-experiment-survivor")
	waitAssigned(t, b, "probe", "x-experiment-survivor")

	if err := s.allotd.Kill(); err != nil {
		t.Fatal(err)
	}
	assigned, bad := countStatus(t, a, 500, "down-user", "x-experiment-survivor")
	if assigned != 500 || bad != 0 {
		t.Fatalf("with allotd down: %d/500 assigned, %d failed", assigned, bad)
	}
	report(t, "faults", "control plane killed (SIGKILL): proxies keep assigning with the last configuration",
		fmt.Sprintf("500/500 requests assigned, 0 non-2xx"), 0)

	b.MustTerminate(t)
	b = s.startSidecar("down-b", "down")
	var noHeader int
	for i := range 200 {
		r, err := b.get(map[string][]string{"x-user-id": {fmt.Sprintf("cold-%d", i)}, "x-experiment-survivor": {"forged"}})
		if err != nil {
			t.Fatalf("a proxy restarted while allotd is down failed a request: %v", err)
		}
		if len(r.Header("x-experiment-survivor")) == 0 {
			noHeader++
		}
	}
	if noHeader != 200 {
		t.Fatalf("restarted proxy without control plane: %d/200 requests without (forged) assignment headers", noHeader)
	}
	report(t, "faults", "proxy restarted while the control plane is down serves on its default configuration",
		"200/200 requests 2xx, forged assignment headers removed, no assignments", 0)

	start := time.Now()
	s.startAllotd()
	waitAssigned(t, a, "probe", "x-experiment-survivor")
	waitAssigned(t, b, "probe", "x-experiment-survivor")
	report(t, "faults", "control plane back: every proxy converges",
		fmt.Sprintf("both proxies assigning again %v after restart", time.Since(start).Round(10*time.Millisecond)), 0)
}

// TestReliabilityHostileRequests: hostile requests get a clear error or no
// assignment, never a crash or a 5xx, and the proxy keeps serving.
func TestReliabilityHostileRequests(t *testing.T) {
	forEachArtifact(t, reliabilityArtifacts, testReliabilityHostileRequests)
}

func testReliabilityHostileRequests(t *testing.T, a artifact) {
	s := startSystemFor(t, a, "-mesh", repoPath(t, "envoy-configs/mesh.json"))
	p := s.startSidecar("hostile", "hostile")
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "target", "variations": []string{"a", "b"}, "weights": []float64{0.5, 0.5},
		"condition": map[string]any{"plan": map[string]any{"$ne": "blocked"}}}, nil)
	waitAssigned(t, p, "probe", "x-experiment-target")

	many := make([]string, 3000)
	for i := range many {
		many[i] = fmt.Sprintf("c%d=%d", i, i)
	}
	tests := []struct {
		name  string
		lines []string
		want  string // "assigned", "unassigned" or "rejected" (a 4xx from Envoy)
	}{
		{"64 KiB cookie", []string{"x-user-id: u1", "Cookie: plan=" + strings.Repeat("p", 64<<10)}, "rejected"},
		{"3,000 cookies", []string{"x-user-id: u1", "Cookie: " + strings.Join(many, "; ") + "; plan=pro"}, "assigned"},
		{"invalid UTF-8 id", []string{"x-user-id: \xff\xfe\xfd"}, "assigned"},
		{"UTF-8 id", []string{"x-user-id: Zoë 用户 🎉"}, "assigned"},
		{"empty id", []string{"x-user-id: "}, "unassigned"},
		{"whitespace id", []string{"x-user-id:    "}, "unassigned"},
		{"odd casing", []string{"X-USER-ID: u1", "X-Experiment-TARGET: forged", "x-EXPERIMENTS: target=\"forged\""}, "assigned"},
		{"several ids", []string{"x-user-id: u1", "x-user-id: u2"}, "assigned"},
		{"4 KiB id", []string{"x-user-id: " + strings.Repeat("i", 4096)}, "assigned"},
		{"control bytes in cookie", []string{"x-user-id: u1", "Cookie: plan=\x01\x02; x=\"unterminated"}, "rejected"},
		{"unterminated quote in cookie", []string{"x-user-id: u1", "Cookie: x=\"unterminated; plan=pro"}, "assigned"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := rawRequest(t, p.URL, tt.lines)
			if code >= 500 {
				t.Fatalf("status %d: %.200s", code, body)
			}
			var got string
			switch {
			case code >= 400:
				got = "rejected"
			case strings.Contains(body, `"x-experiment-target":["forged"]`) || strings.Contains(body, `target=\"forged\"`):
				t.Fatalf("a forged header reached the service: %.300s", body)
			case strings.Contains(body, `"x-experiment-target"`):
				got = "assigned"
			default:
				got = "unassigned"
			}
			if got != tt.want {
				t.Fatalf("%s: got %s (status %d), want %s: %.300s", tt.name, got, code, tt.want, body)
			}
			report(t, "bad_input", "hostile request: "+tt.name, fmt.Sprintf("status %d, %s", code, got), 0)
		})
	}
	// The proxy is still healthy and assigning.
	if assigned, bad := countStatus(t, p, 100, "after-hostile", "x-experiment-target"); assigned != 100 || bad != 0 {
		t.Fatalf("after the hostile requests: %d/100 assigned, %d failed", assigned, bad)
	}
}

// TestReliabilityForgedHeaders: forged inbound assignment headers, in every
// casing and with several copies, never reach the service.
func TestReliabilityForgedHeaders(t *testing.T) {
	forEachArtifact(t, reliabilityArtifacts, testReliabilityForgedHeaders)
}

func testReliabilityForgedHeaders(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	p := s.startSidecar("forged", "forged")
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "real", "variations": []string{"a", "b"}, "weights": []float64{0.5, 0.5}}, nil)
	waitAssigned(t, p, "probe", "x-experiment-real")
	names := []string{"x-experiment-real", "X-Experiment-Real", "X-EXPERIMENT-REAL", "x-ExPeRiMeNt-real",
		"x-experiment-other", "X-Experiments", "x-experiments", "X-Experiments-Version", "x-experiments-version"}
	tried := 0
	for _, withUnit := range []bool{true, false} {
		for copies := 1; copies <= 3; copies++ {
			var lines []string
			if withUnit {
				lines = append(lines, "x-user-id: forger")
			}
			for _, n := range names {
				for c := range copies {
					lines = append(lines, fmt.Sprintf("%s: forged-%d", n, c))
				}
			}
			code, body := rawRequest(t, p.URL, lines)
			tried++
			if code != http.StatusOK || strings.Contains(body, "forged") {
				t.Fatalf("unit=%v copies=%d: status %d, forged value reached the service: %.400s", withUnit, copies, code, body)
			}
		}
	}
	report(t, "security", fmt.Sprintf("forged assignment headers: %d names/casings × 1–3 copies, with and without a unit id", len(names)),
		fmt.Sprintf("%d requests, 0 forged values reached the service", tried), 0)
}

// TestReliabilityKillDuringWrites kills allotd with SIGKILL at random points
// during a stream of writes, 50 times: after each restart every acknowledged
// write is present and the store opens cleanly.
func TestReliabilityKillDuringWrites(t *testing.T) {
	s := startSystem(t)
	acked := map[string]int64{} // key → last acknowledged revision
	client := &http.Client{Timeout: 5 * time.Second}
	totalAcked, lost := 0, 0
	for round := range 50 {
		stop := make(chan struct{})
		done := make(chan struct{})
		var mu sync.Mutex
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%02d-%04d", round, i)
				body := fmt.Sprintf(`{"key":%q,"variations":["a","b"]}`, key)
				req, _ := http.NewRequest("POST", s.adminURL+"/v1/experiments", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+adminToken)
				resp, err := client.Do(req)
				if err != nil {
					return // allotd is gone
				}
				var out struct {
					Revision json.Number `json:"revision"`
				}
				json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if resp.StatusCode == http.StatusCreated {
					rev, _ := out.Revision.Int64()
					mu.Lock()
					acked[key] = rev
					mu.Unlock()
				}
			}
		}()
		time.Sleep(time.Duration(20+rand.IntN(200)) * time.Millisecond) // a random point in the stream
		if err := s.allotd.Kill(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		<-done
		s.startAllotd() // fails the test if the store does not open
		var list struct {
			Experiments []struct {
				Key      string      `json:"key"`
				Revision json.Number `json:"revision"`
			} `json:"experiments"`
		}
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments", nil, &list)
		present := map[string]bool{}
		for _, e := range list.Experiments {
			present[e.Key] = true
		}
		mu.Lock()
		for k := range acked {
			if !present[k] {
				lost++
				t.Errorf("round %d: acknowledged write %s missing after restart", round, k)
			}
		}
		totalAcked = len(acked)
		mu.Unlock()
	}
	report(t, "durability", "allotd killed with SIGKILL at a random point during writes, 50 times",
		fmt.Sprintf("%d acknowledged writes, all present after every restart; the store opened cleanly 50/50 times", totalAcked), lost)
}
