package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/rollout"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// waitFlag registers --wait on a write subcommand.
func waitFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("wait", 0, "wait up to `DURATION` (e.g. 30s, at most 60s) until every affected proxy applied the change")
}

// withWait adds ?wait= to a write's path.
func withWait(path string, wait time.Duration) string {
	if wait <= 0 {
		return path
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	return path + sep + "wait=" + wait.String()
}

// unwrapWaited splits the body of a write made with ?wait= into the
// experiment (nil for a delete) and the rollout; other bodies are returned
// as they are.
func unwrapWaited(b []byte, wait time.Duration) ([]byte, *adminv1.Rollout, error) {
	if wait <= 0 {
		return b, nil, nil
	}
	var w struct {
		Experiment json.RawMessage `json:"experiment"`
		Rollout    json.RawMessage `json:"rollout"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, nil, fmt.Errorf("decode response: %w", err)
	}
	ro := &adminv1.Rollout{}
	if err := protojson.Unmarshal(w.Rollout, ro); err != nil {
		return nil, nil, fmt.Errorf("decode rollout: %w", err)
	}
	return w.Experiment, ro, nil
}

// decodeWritten decodes the experiment a write answered with, and its
// rollout when the write waited.
func decodeWritten(b []byte, wait time.Duration) (*experimentv1.Experiment, *adminv1.Rollout, error) {
	b, ro, err := unwrapWaited(b, wait)
	if err != nil {
		return nil, nil, err
	}
	e, err := decodeExperiment(b)
	return e, ro, err
}

// applied is the applied state's name in the admin API's rollout.
const applied = string(rollout.StateApplied)

// reportRollout prints how a waited write rolled out and returns an error
// naming the proxies that did not apply it (the write itself stands).
func reportRollout(w io.Writer, what string, ro *adminv1.Rollout) error {
	if ro == nil {
		return nil
	}
	total := int32(0)
	for _, n := range ro.GetCounts() {
		total += n
	}
	fmt.Fprintf(w, "%s: rollout %s, applied by %d/%d proxies\n", what, ro.GetResult(), ro.GetCounts()[applied], total)
	if ro.GetResult() == rollout.ResultApplied {
		return nil
	}
	for _, p := range ro.GetProxies() {
		if p.GetState() != applied {
			fmt.Fprintf(w, "  %s (%s): %s %s\n", p.GetNodeId(), p.GetCluster(), p.GetState(), proxyError(p))
		}
	}
	return fmt.Errorf("%s: the change is stored but not applied everywhere: %s", what, ro.GetError())
}

const rolloutUsage = `Usage: allotctl rollout [-o table|json|yaml]

Shows every connected proxy, with the filter artifact it runs (wasm or
native), against the configuration version its cluster should run: applied,
pending, rejected with Envoy's reason, or unserved (its node metadata
allot.artifact names an artifact allotd does not serve) with allotd's.
`

func runRollout(ctx context.Context, env *Env, args []string) error {
	b, err := getDocument(ctx, env, "rollout", rolloutUsage, "/v1/rollout", args)
	if b == nil {
		return err
	}
	ro := &adminv1.Rollout{}
	if err := protojson.Unmarshal(b, ro); err != nil {
		return fmt.Errorf("decode rollout: %w", err)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	// STATE stays the third column: scripts (and e2e/rollout_api_test.go) read it there.
	// REPLICA appears when allotd runs as replicas on etcd.
	replicated := len(ro.GetReplicas()) > 0
	header := "NODE\tCLUSTER\tSTATE\tARTIFACT\tTARGET\tACKED\tERROR"
	if replicated {
		header = "NODE\tCLUSTER\tSTATE\tARTIFACT\tTARGET\tACKED\tREPLICA\tERROR"
	}
	fmt.Fprintln(tw, header)
	for _, p := range ro.GetProxies() {
		msg := proxyError(p)
		if len(msg) > 60 {
			msg = msg[:57] + "..."
		}
		cols := []string{p.GetNodeId(), p.GetCluster(), p.GetState(), dash(p.GetArtifact()), dash(p.GetTargetVersion()), dash(p.GetAckedVersion())}
		if replicated {
			cols = append(cols, dash(p.GetReplica()))
		}
		fmt.Fprintln(tw, strings.Join(append(cols, dash(msg)), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range ro.GetReplicas() {
		fmt.Fprintf(env.Stdout, "replica %s (xDS %s, admin %s): %d proxies, store revision %d\n",
			r.GetId(), r.GetXdsAddr(), r.GetAdminAddr(), r.GetProxies(), r.GetRevision())
	}
	for _, line := range byVersion(ro) {
		fmt.Fprintln(env.Stdout, line)
	}
	return nil
}

// proxyError is why p did not apply its target: allotd's reason for an
// unserved proxy, else Envoy's for its last rejection.
func proxyError(p *adminv1.ProxyStatus) string {
	if p.GetState() == string(rollout.StateUnserved) {
		return p.GetError()
	}
	return p.GetRejectionError()
}

// byVersion summarizes a rollout per target version: "version V (cluster):
// N applied, N pending, N rejected", and ", N unserved" when there are any.
func byVersion(ro *adminv1.Rollout) []string {
	type key struct{ version, cluster string }
	counts := map[key]map[string]int{}
	var order []key
	for _, p := range ro.GetProxies() {
		k := key{p.GetTargetVersion(), p.GetCluster()}
		if counts[k] == nil {
			counts[k] = map[string]int{}
			order = append(order, k)
		}
		counts[k][p.GetState()]++
	}
	var out []string
	for _, k := range order {
		c := counts[k]
		line := fmt.Sprintf("version %s (%s): %d applied, %d pending, %d rejected",
			dash(k.version), k.cluster, c[applied], c[string(rollout.StatePending)], c[string(rollout.StateRejected)])
		if n := c[string(rollout.StateUnserved)]; n > 0 {
			line += fmt.Sprintf(", %d unserved", n)
		}
		out = append(out, line)
	}
	return out
}
