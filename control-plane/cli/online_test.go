package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/translate"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

const onlineTokens = `{"tokens": [
  {"name": "root", "role": "admin", "token": "admin-token-0123456789"},
  {"name": "alice", "role": "owner", "namespaces": ["team-a"], "token": "alice-token-0123456789"},
  {"name": "dashboard", "role": "reader", "token": "reader-token-0123456789"}
]}`

// startAPI serves a real admin API over HTTP on a real bbolt store whose
// clock is fixed, so outputs are byte-for-byte stable.
func startAPI(t *testing.T) string {
	t.Helper()
	url, _ := startAPIStore(t)
	return url
}

// startAPIStore is startAPI that also returns the store, for a test to
// write what allotd writes.
func startAPIStore(t *testing.T) (string, *bolt.DB) {
	t.Helper()
	fixed := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"), bolt.WithClock(func() time.Time { return fixed }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tokens, err := admin.ParseTokens([]byte(onlineTokens))
	if err != nil {
		t.Fatal(err)
	}
	svc := admin.NewService(db, nil, admin.WithClock(func() time.Time { return fixed }), admin.WithMesh(translate.Mesh{WasmPath: "/allot.wasm"}),
		admin.WithOutcomes(fixedOutcomes{}))
	srv := httptest.NewServer(admin.NewHTTP(svc, tokens))
	t.Cleanup(srv.Close)
	return srv.URL, db
}

// fixedOutcomes is a hand-written admin.Outcomes: the observed experiment
// "observed" (since 03:02:30, the window ending at startAPI's clock, 03:04)
// whose variation 1 failed twice in 03:03 and which had no request in
// 03:04; any other key is not observed.
type fixedOutcomes struct{}

func (fixedOutcomes) Outcomes(_ context.Context, key string, minutes int) (*adminv1.Outcomes, error) {
	if key != "observed" {
		return nil, &admin.Error{Code: admin.CodeNotFound, Message: fmt.Sprintf("experiment %q: not an observed experiment", key)}
	}
	if minutes == 0 {
		minutes = 5
	}
	at := func(m int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2030, 1, 2, 3, m, 0, 0, time.UTC))
	}
	lat := func(p50, p95, p99 float64) *adminv1.LatencyQuantiles {
		return &adminv1.LatencyQuantiles{P50: p50, P95: p95, P99: p99}
	}
	series := []*adminv1.OutcomesMinute{
		{Start: at(2), Variations: []*adminv1.MinuteOutcomes{{Variation: 0, Requests: 12, LatencyMs: lat(3, 4.75, 4.95)}, {Variation: 1, Requests: 10, LatencyMs: lat(7.5, 9.75, 9.95)}}},
		{Start: at(3), Variations: []*adminv1.MinuteOutcomes{{Variation: 0, Requests: 8, LatencyMs: lat(3, 4.5, 4.9)}, {Variation: 1, Requests: 8, ErrorRate: 0.25, LatencyMs: lat(8, 9.8, 9.96)}}},
		{Start: at(4), Variations: []*adminv1.MinuteOutcomes{{Variation: 0}, {Variation: 1}}},
	}
	if minutes < len(series) {
		series = series[len(series)-minutes:]
	}
	v := func(i int, weight float64, requests, errors int64, share float64, l *adminv1.LatencyQuantiles) *adminv1.VariationOutcomes {
		return &adminv1.VariationOutcomes{Variation: int32(i), Weight: weight, Requests: requests, Share: share, Timed: requests - errors,
			ErrorRate: float64(errors) / float64(requests), Responses: map[string]int64{"2xx": requests - errors, "5xx": errors}, LatencyMs: l}
	}
	window := []*adminv1.VariationOutcomes{v(0, 0.5, 20, 0, 20.0/38, lat(3, 4.7, 4.94)), v(1, 0.5, 18, 2, 18.0/38, lat(7.7, 9.8, 9.96))}
	return &adminv1.Outcomes{Experiment: key, Revision: "4", Since: timestamppb.New(time.Date(2030, 1, 2, 3, 2, 30, 0, time.UTC)),
		Minutes: int32(minutes), Window: window, Total: window, Series: series}, nil
}

// TestOnlineGolden runs testdata/online/<step>/args in order against one
// real admin API (steps build on each other's state) with ALLOT_SERVER and
// ALLOT_TOKEN (admin) set, and compares stdout, stderr and the error with
// <step>/want.golden. $SERVER in args is the API's URL.
// Rewrite the golden files with: go test ./control-plane/cli -update
func TestOnlineGolden(t *testing.T) {
	url := startAPI(t)
	t.Setenv("ALLOT_SERVER", url)
	t.Setenv("ALLOT_TOKEN", "admin-token-0123456789")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no user config file
	dirs, err := filepath.Glob("testdata/online/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden steps: %v", err)
	}
	for _, dir := range dirs {
		ok := t.Run(filepath.Base(dir), func(t *testing.T) {
			abs, err := filepath.Abs(dir)
			if err != nil {
				t.Fatal(err)
			}
			args, err := os.ReadFile(filepath.Join(abs, "args"))
			if err != nil {
				t.Fatal(err)
			}
			t.Chdir(abs)
			var stdout, stderr bytes.Buffer
			fields := strings.Fields(strings.ReplaceAll(string(args), "$SERVER", url))
			runErr := Run(context.Background(), fields, strings.NewReader(""), &stdout, &stderr)
			got := strings.ReplaceAll(golden(stdout.String(), stderr.String(), runErr), url, "$SERVER")
			path := filepath.Join(abs, "want.golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s (run with -update to accept):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
			}
		})
		if !ok {
			t.Fatalf("step %s failed; later steps depend on it", filepath.Base(dir))
		}
	}
}

// TestConnectionResolution: flags beat the environment, which beats the
// config file; --config names another file; without a server the command
// fails with a usage error.
func TestConnectionResolution(t *testing.T) {
	url := startAPI(t)
	cfgDir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgDir)
	t.Setenv("ALLOT_SERVER", "")
	t.Setenv("ALLOT_TOKEN", "")
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := Run(context.Background(), args, strings.NewReader(""), &out, &out)
		return out.String(), err
	}

	if _, err := run("list"); err == nil || !strings.Contains(err.Error(), "no server") {
		t.Errorf("without a server: %v, want a no-server usage error", err)
	}

	// The default config file.
	if err := os.MkdirAll(filepath.Join(cfgDir, "allot"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeCfg := func(path, server, token string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(`{"server": "`+server+`", "token": "`+token+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(filepath.Join(cfgDir, "allot", "config.json"), url, "reader-token-0123456789")
	if out, err := run("list"); err != nil || !strings.Contains(out, "No experiments.") {
		t.Errorf("with the default config file: %q %v", out, err)
	}

	// The environment beats the file: a wrong token from the env fails.
	t.Setenv("ALLOT_TOKEN", "wrong-token-0123456789")
	if _, err := run("list"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("env token: %v, want 401", err)
	}
	// The flag beats the environment.
	if _, err := run("list", "--token", "reader-token-0123456789"); err != nil {
		t.Errorf("flag token: %v", err)
	}

	// --config names another file; a missing one is an error.
	other := filepath.Join(t.TempDir(), "other.json")
	writeCfg(other, url, "admin-token-0123456789")
	t.Setenv("ALLOT_TOKEN", "")
	if _, err := run("list", "--config", other); err != nil {
		t.Errorf("--config: %v", err)
	}
	if _, err := run("list", "--config", filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("--config with a missing file succeeded")
	}
}

// TestRebucketReassigns checks, through the admin API's preview (which
// holds no sticky buckets: what a unit without an assignment of the
// current version gets, i.e. every unit after a rebucket), why rebucket
// sets a new seed: with the seed kept and the weights unchanged, every unit
// hashes back to its variation; with the new seed about half of them move
// (two equal variations).
func TestRebucketReassigns(t *testing.T) {
	t.Setenv("ALLOT_SERVER", startAPI(t))
	t.Setenv("ALLOT_TOKEN", "admin-token-0123456789")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	run := func(stdin string, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := Run(context.Background(), args, strings.NewReader(stdin), &out, &errOut); err != nil {
			t.Fatalf("allotctl %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}
	file := filepath.Join(t.TempDir(), "exp.json")
	if err := os.WriteFile(file, []byte(`{"key": "banner", "owner": "team-a", "variations": ["a", "b"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run("", "apply", "-f", file)
	var units strings.Builder
	const n = 400
	for i := range n {
		fmt.Fprintf(&units, "{\"id\": \"u%d\"}\n", i)
	}
	assign := func() []int {
		t.Helper()
		var got []int
		for line := range strings.Lines(run(units.String(), "eval", "--server", os.Getenv("ALLOT_SERVER"), "--attributes-file", "-")) {
			var r struct {
				Assignments []struct {
					VariationID int `json:"variationId"`
				} `json:"assignments"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil || len(r.Assignments) != 1 {
				t.Fatalf("eval line %q: %v", line, err)
			}
			got = append(got, r.Assignments[0].VariationID)
		}
		return got
	}
	moved := func(a, b []int) int {
		m := 0
		for i := range a {
			if a[i] != b[i] {
				m++
			}
		}
		return m
	}
	v0 := assign()
	run("", "rebucket", "banner", "--keep-seed")
	if m := moved(v0, assign()); m != 0 {
		t.Errorf("rebucket --keep-seed moved %d of %d units, want 0", m, n)
	}
	run("", "rebucket", "banner")
	if m := moved(v0, assign()); m < n*35/100 || m > n*65/100 {
		t.Errorf("rebucket moved %d of %d units, want about half", m, n)
	}
}

func TestRolloutByVersion(t *testing.T) {
	ro := &adminv1.Rollout{Proxies: []*adminv1.ProxyStatus{
		{NodeId: "a", Cluster: "svc", State: "applied", TargetVersion: "v2"},
		{NodeId: "b", Cluster: "svc", State: "rejected", TargetVersion: "v2"},
		{NodeId: "c", Cluster: "other", State: "pending", TargetVersion: "v9"},
		{NodeId: "d", Cluster: "svc", State: "unserved", TargetVersion: "v2", Artifact: "wasm32"},
	}}
	got := strings.Join(byVersion(ro), "\n")
	want := "version v2 (svc): 1 applied, 0 pending, 1 rejected, 1 unserved\nversion v9 (other): 0 applied, 1 pending, 0 rejected"
	if got != want {
		t.Fatalf("byVersion:\n%s\nwant:\n%s", got, want)
	}
}
