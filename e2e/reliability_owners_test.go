//go:build e2e && reliability

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/internal/harness"
)

// apiErr is the admin API's error body.
type apiErr struct {
	Error struct {
		Code    string   `json:"code"`
		Details []string `json:"details"`
	} `json:"error"`
}

// TestReliabilityHostileOwners: what one experiment owner sends cannot
// wedge the mesh or reach another team, on allotd replicas sharing three
// real etcd members at etcd's default request limit (1.5 MiB):
//   - the largest experiment the API accepts is found by the API itself
//     (a binary search over one condition string) and goes through
//     update, start, pause, stop and delete; one byte more is a field
//     error, never a 500;
//   - experiments whose headers would pass a service's budget are refused,
//     and a request through a real Envoy gets every running one's headers;
//   - while an admin moves an experiment between team-a and team-b, a
//     team-b owner's updates and deletes never commit on a revision team-a
//     owned (the history says who owned each revision written).
func TestReliabilityHostileOwners(t *testing.T) {
	h := startReplicated(t, 2)
	write, read := h.replicas[0], h.replicas[1]
	call := func(token, method, path string, body, out any) (int, []byte) {
		t.Helper()
		code, b, err := adminCallAs(write.client(), write.adminURL, token, method, path, body, out)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return code, b
	}

	t.Run("largest document", func(t *testing.T) {
		doc := func(n int) map[string]any {
			return map[string]any{"key": "big", "owner": "team-b", "variations": []string{"control", "treatment"},
				"weights": []float64{0.5, 0.5}, "services": []string{"big-svc"},
				"condition": map[string]any{"country": strings.Repeat("x", n)}}
		}
		internal := 0
		try := func(n int) (bool, apiErr) {
			var e apiErr
			code, b := call(bobToken, "POST", "/v1/experiments", doc(n), &e)
			switch code {
			case http.StatusCreated:
				if c, b := call(adminToken, "DELETE", "/v1/experiments/big", nil, nil); c != http.StatusOK && c != http.StatusNoContent {
					t.Fatalf("delete the probe of %d bytes: %d %s", n, c, b)
				}
				return true, e
			case http.StatusBadRequest:
				return false, e
			}
			internal++
			t.Fatalf("create with a condition string of %d bytes: %d %s", n, code, b)
			return false, e
		}
		lo, hi := 0, experiment.MaxDocumentBytes // lo accepted, hi refused
		if ok, _ := try(lo); !ok {
			t.Fatal("the smallest probe was refused")
		}
		if ok, _ := try(hi); ok {
			t.Fatalf("a condition string of %d bytes was accepted", hi)
		}
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; func() bool { ok, _ := try(mid); return ok }() {
				lo = mid
			} else {
				hi = mid
			}
		}
		_, refused := try(hi)
		over := fmt.Sprintf("experiment: %d bytes as compact JSON (with the longest status), limit %d", experiment.MaxDocumentBytes+1, experiment.MaxDocumentBytes)
		if refused.Error.Code != string(admin.CodeInvalid) || len(refused.Error.Details) != 1 || refused.Error.Details[0] != over {
			t.Fatalf("one byte over the largest accepted: %+v, want invalid_argument %q", refused.Error, over)
		}

		// The largest accepted, through its whole life on etcd.
		var cur struct {
			Revision string `json:"revision"`
			Status   string `json:"status"`
		}
		if c, b := call(bobToken, "POST", "/v1/experiments", doc(lo), &cur); c != http.StatusCreated {
			t.Fatalf("create the largest: %d %s", c, b)
		}
		steps := []string{"create"}
		up := doc(lo)
		up["weights"], up["revision"] = []float64{0.4, 0.6}, cur.Revision // the same size
		if c, b := call(bobToken, "PUT", "/v1/experiments/big", up, &cur); c != http.StatusOK {
			t.Fatalf("update the largest: %d %s", c, b)
		}
		steps = append(steps, "update")
		for _, op := range []string{"start", "pause", "stop"} {
			if c, b := call(bobToken, "POST", "/v1/experiments/big:"+op, nil, &cur); c != http.StatusOK {
				t.Fatalf("%s the largest: %d %s", op, c, b)
			}
			steps = append(steps, op)
		}
		if c, b := call(bobToken, "DELETE", "/v1/experiments/big", nil, nil); c != http.StatusOK && c != http.StatusNoContent {
			t.Fatalf("delete the largest: %d %s", c, b)
		}
		steps = append(steps, "delete")
		if c := read.api("GET", "/v1/experiments/big", nil, nil); c != http.StatusNotFound {
			t.Fatalf("the largest is still listed through the other replica: %d", c)
		}
		report(t, "bad_input", fmt.Sprintf("the largest experiment the API accepts (%d KiB as compact JSON), found by the API itself, on 3 etcd members at their default request limit (1.5 MiB), through 2 allotd replicas", experiment.MaxDocumentBytes>>10),
			fmt.Sprintf("%s all acknowledged; one byte more refused 400 %q; %d internal errors", strings.Join(steps, ", "), over, internal), 0)
	})

	t.Run("header budget", func(t *testing.T) {
		value := strings.Repeat("v", experiment.MaxVariationValueBytes/2) // each experiment writes it twice: its header and the dictionary
		exp := func(i int) map[string]any {
			return map[string]any{"key": fmt.Sprintf("wide-%d", i), "owner": "team-b", "status": "running",
				"variations": []string{"c", value}, "weights": []float64{0, 1}, "services": []string{"wide-svc"}}
		}
		var accepted int
		var refused apiErr
		for i := range 10 {
			code, b := call(bobToken, "POST", "/v1/experiments", exp(i), &refused)
			if code == http.StatusCreated {
				accepted++
				continue
			}
			if code != http.StatusBadRequest {
				t.Fatalf("create wide-%d: %d %s", i, code, b)
			}
			break
		}
		if accepted == 0 || accepted == 10 {
			t.Fatalf("%d of 10 experiments of %d-byte variations accepted on one service", accepted, len(value))
		}
		if len(refused.Error.Details) != 1 || !strings.HasPrefix(refused.Error.Details[0], `services[0]: service "wide-svc": `) ||
			!strings.Contains(refused.Error.Details[0], fmt.Sprintf("limit of %d", admin.MaxServiceHeaderBytes)) {
			t.Fatalf("the experiment past the budget: %+v, want a services[0] error naming wide-svc and the limit", refused.Error)
		}
		// The same experiment on another service is accepted: the budget
		// is per service.
		other := exp(accepted)
		other["services"] = []string{"other-svc"}
		if c, b := call(bobToken, "POST", "/v1/experiments", other, nil); c != http.StatusCreated {
			t.Fatalf("the same experiment on another service: %d %s", c, b)
		}

		// A real Envoy of the service: once it runs them, every request
		// gets each running experiment's header, within the budget.
		p := write.startSidecar("wide-1", "wide-svc")
		headers := func(user string) (n, size int, err error) {
			r, err := p.get(map[string][]string{"x-user-id": {user}})
			if err != nil {
				return 0, 0, err
			}
			for name, vs := range r.Headers {
				if l := strings.ToLower(name); strings.HasPrefix(l, "x-experiment") {
					for _, v := range vs {
						size += len(name) + len(v)
					}
					if strings.HasPrefix(l, "x-experiment-wide-") {
						n++
					}
				}
			}
			return n, size, nil
		}
		harness.MustEventually(t, 15*time.Second, func() error {
			if n, _, err := headers("wide-probe"); err != nil || n != accepted {
				return fmt.Errorf("%d experiment headers, want %d (%v)", n, accepted, err)
			}
			return nil
		})
		most := 0
		for i := range 20 {
			n, size, err := headers(fmt.Sprintf("wide-user-%d", i))
			if err != nil || n != accepted {
				t.Fatalf("request %d through the wide-svc Envoy: %d experiment headers, want %d (%v)", i, n, accepted, err)
			}
			most = max(most, size)
		}
		if most > admin.MaxServiceHeaderBytes {
			t.Fatalf("a request carried %d bytes of assignment headers, budget %d", most, admin.MaxServiceHeaderBytes)
		}
		report(t, "bad_input", fmt.Sprintf("an owner creating running experiments with %d-byte variations on one service (budget %d bytes of assignment headers per request)", len(value), admin.MaxServiceHeaderBytes),
			fmt.Sprintf("%d accepted, the next refused 400 naming services[0] and the service; the same on another service accepted; 20 requests through the service's Envoy each got the %d experiments' headers, at most %d bytes", accepted, accepted, most), 0)
	})

	t.Run("ownership race", func(t *testing.T) {
		type exp = map[string]any
		create := func() {
			c, b := call(adminToken, "POST", "/v1/experiments", exp{"key": "contested", "owner": "team-b",
				"variations": []string{"a", "b"}, "weights": []float64{0.5, 0.5}, "services": []string{"contested-svc"}}, nil)
			if c != http.StatusCreated && c != http.StatusConflict {
				t.Errorf("create contested: %d %s", c, b)
			}
		}
		create()
		var (
			stop          atomic.Bool
			wg            sync.WaitGroup
			bobOK, bobNo  atomic.Int64
			moves, recrea atomic.Int64
		)
		get := func(token string) (map[string]any, int) {
			var cur map[string]any
			c, _, err := adminCallAs(write.client(), write.adminURL, token, "GET", "/v1/experiments/contested", nil, &cur)
			if err != nil {
				return nil, 0
			}
			return cur, c
		}
		// The admin moves the experiment between the teams (and recreates it
		// when team-b deleted it).
		wg.Go(func() {
			for !stop.Load() {
				cur, c := get(adminToken)
				if c == http.StatusNotFound {
					create()
					recrea.Add(1)
					continue
				}
				if c != http.StatusOK {
					continue
				}
				if cur["owner"] == "team-b" {
					cur["owner"] = "team-a"
				} else {
					cur["owner"] = "team-b"
				}
				if c, _, _ := adminCallAs(write.client(), write.adminURL, adminToken, "PUT", "/v1/experiments/contested", cur, nil); c == http.StatusOK {
					moves.Add(1)
				}
			}
		})
		// Bob (team-b) updates what he reads and deletes at revision 0.
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				var c int
				if i%4 == 3 {
					c, _, _ = adminCallAs(write.client(), write.adminURL, bobToken, "DELETE", "/v1/experiments/contested", nil, nil)
				} else {
					cur, gc := get(bobToken)
					if gc != http.StatusOK {
						continue
					}
					cur["description"] = fmt.Sprintf("bob %d", i)
					c, _, _ = adminCallAs(write.client(), write.adminURL, bobToken, "PUT", "/v1/experiments/contested", cur, nil)
				}
				if c == http.StatusOK || c == http.StatusNoContent {
					bobOK.Add(1)
				} else {
					bobNo.Add(1)
				}
			}
		})
		deadline := time.Now().Add(8 * time.Second)
		for time.Now().Before(deadline) && (bobOK.Load() < 20 || moves.Load() < 20) {
			time.Sleep(100 * time.Millisecond) // the load runs in the goroutines; this only bounds it
		}
		stop.Store(true)
		wg.Wait()

		var hist struct {
			Changes []struct {
				Revision string         `json:"revision"`
				Op       string         `json:"op"`
				Actor    string         `json:"actor"`
				Before   map[string]any `json:"before"`
			} `json:"changes"`
		}
		read.mustAPI(http.StatusOK, "GET", "/v1/experiments/contested/history", nil, &hist)
		byBob, wrong := 0, 0
		for _, c := range hist.Changes {
			if c.Actor != "bob" || c.Op == "create" {
				continue
			}
			byBob++
			if c.Before["owner"] != "team-b" {
				wrong++
				t.Errorf("bob's %s at revision %s was of a revision owned by %v", c.Op, c.Revision, c.Before["owner"])
			}
		}
		if byBob == 0 || moves.Load() == 0 {
			t.Fatalf("no race: %d of bob's writes committed, %d owner moves", byBob, moves.Load())
		}
		report(t, "security", "a team-b owner updating and deleting (revision 0) an experiment while an admin moves it between team-a and team-b, 2 allotd replicas on etcd",
			fmt.Sprintf("%d owner moves, %d recreations; %d of team-b's writes committed (history), %d refused; %d committed on a revision team-a owned", moves.Load(), recrea.Load(), byBob, bobNo.Load(), wrong), wrong)
	})
}
