package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/admin"
	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/control-plane/xds/loadgen"
)

// replica is one allotd replica run in-process on a shared etcd cluster.
type replica struct {
	addrs  Addrs
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, c *etcdtest.Cluster, endpoint, id string) *replica {
	t.Helper()
	tokens, err := admin.ParseTokens([]byte(`{"tokens":[{"name":"root","role":"admin","token":"` + testToken + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	db, err := etcd.Open(t.Context(), clientv3.Config{Endpoints: []string{endpoint}}, etcd.WithPrefix("/replica-test/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ready := make(chan Addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- Run(ctx, db, Config{
			AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", Tokens: tokens,
			Mesh:     translate.Mesh{WasmPath: "/allot.wasm", NativePath: "/liballot.so"},
			Ready:    func(a Addrs) { ready <- a },
			Registry: rolloutetcd.New(db.Conn(), id, 2*time.Second), ReplicaID: id,
		})
	}()
	t.Cleanup(r.stop)
	select {
	case r.addrs = <-ready:
	case err := <-r.done:
		t.Fatalf("replica %s: %v", id, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("replica %s not ready after 10 s", id)
	}
	return r
}

func (r *replica) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

// rolloutBody is a waited write's or GET /v1/rollout's rollout.
type rolloutBody struct {
	Result  string            `json:"result"`
	Error   string            `json:"error"`
	Targets map[string]string `json:"targets"`
	Counts  map[string]int    `json:"counts"`
	Proxies []struct {
		Replica       string `json:"replica"`
		NodeID        string `json:"nodeId"`
		State         string `json:"state"`
		TargetVersion string `json:"targetVersion"`
		AckedVersion  string `json:"ackedVersion"`
	} `json:"proxies"`
}

func (r *replica) call(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+r.addrs.Admin.String()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// TestReplicasShareOneMesh runs three replicas on a three-member etcd
// cluster, each serving its own fleet of simulated proxies of one cluster:
// a write waited for through replica 1 returns applied only when every
// proxy of all three fleets runs it, GET /v1/rollout on any replica lists
// every proxy once with its replica, and a replica that stops takes its
// proxies out of the rollout.
func TestReplicasShareOneMesh(t *testing.T) {
	c := etcdtest.Start(t, 3)
	var reps []*replica
	var fleets []*loadgen.Fleet
	for i := range 3 {
		r := startReplica(t, c, c.Endpoints()[i], fmt.Sprintf("r%d", i+1))
		reps = append(reps, r)
		f, err := loadgen.Connect(t.Context(), loadgen.Config{Addr: r.addrs.XDS.String(), Clients: 4, Cluster: "web", Node: fmt.Sprintf("r%d-web", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		fleets = append(fleets, f)
	}
	// Every replica sees all twelve proxies.
	eventually(t, 20*time.Second, "every replica lists the twelve proxies", func() error {
		for _, r := range reps {
			var ro rolloutBody
			r.call(t, "GET", "/v1/rollout", nil, &ro)
			if len(ro.Proxies) != 12 {
				return fmt.Errorf("replica %s lists %d proxies, want 12: %+v", r.addrs.Admin, len(ro.Proxies), ro)
			}
		}
		return nil
	})

	var revision any
	for step := range 5 {
		def := map[string]any{"key": "checkout", "variations": []string{"a", "b"}, "weights": []float64{1 - float64(step)/5, float64(step) / 5}}
		if revision != nil {
			def["revision"] = revision
		}
		var w struct {
			Experiment map[string]any `json:"experiment"`
			Rollout    rolloutBody    `json:"rollout"`
		}
		method, path, want := "PUT", "/v1/experiments/checkout?wait=10s", http.StatusOK
		if step == 0 {
			method, path, want = "POST", "/v1/experiments?wait=10s", http.StatusCreated
		}
		if code := reps[0].call(t, method, path, def, &w); code != want {
			t.Fatalf("step %d: %s %s: %d %+v", step, method, path, code, w)
		}
		if w.Rollout.Result != "applied" || w.Rollout.Counts["applied"] != 12 || len(w.Rollout.Counts) != 1 || len(w.Rollout.Proxies) != 0 {
			t.Fatalf("step %d: rollout %+v, want applied by 12 proxies, none listed", step, w.Rollout)
		}
		revision = w.Experiment["revision"]
		target := w.Rollout.Targets["web"]
		// Right after, another replica lists all twelve on it.
		var st rolloutBody
		reps[1].call(t, "GET", "/v1/rollout", nil, &st)
		if len(st.Proxies) != 12 || st.Counts["applied"] != 12 {
			t.Fatalf("step %d: status right after: %+v, want 12 applied", step, st)
		}
		replicas := map[string]int{}
		for _, p := range st.Proxies {
			replicas[p.Replica]++
			if p.State != "applied" || p.AckedVersion != target {
				t.Fatalf("step %d: proxy %+v, want applied %s", step, p, target)
			}
		}
		if len(replicas) != 3 {
			t.Fatalf("step %d: proxies by replica %v, want 4 on each of 3", step, replicas)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		for i, f := range fleets {
			if err := f.Await(ctx, target); err != nil {
				t.Fatalf("step %d: fleet on replica %d: %v", step, i+1, err)
			}
		}
		cancel()
	}

	// Replica 3 stops (gracefully: it withdraws its lease): its proxies
	// leave the mesh at once; a waited write covers the other eight.
	reps[2].stop()
	var ro rolloutBody
	reps[0].call(t, "GET", "/v1/rollout", nil, &ro)
	if len(ro.Proxies) != 8 {
		t.Fatalf("after replica 3 stopped: %d proxies, want 8", len(ro.Proxies))
	}
	var w struct {
		Rollout rolloutBody `json:"rollout"`
	}
	def := map[string]any{"key": "checkout", "variations": []string{"a", "b"}, "weights": []float64{0.5, 0.5}, "revision": revision}
	if code := reps[1].call(t, "PUT", "/v1/experiments/checkout?wait=10s", def, &w); code != http.StatusOK {
		t.Fatalf("write after replica 3 stopped: %d %+v", code, w)
	}
	if w.Rollout.Result != "applied" || w.Rollout.Counts["applied"] != 8 {
		t.Fatalf("write after replica 3 stopped: rollout %+v, want applied by 8", w.Rollout)
	}
}
