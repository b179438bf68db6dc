package mtls

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The placeholders of an identity pattern. {cluster} stands for the
// cluster: "spiffe://example.org/cluster/{cluster}" lets the certificate
// with SPIFFE ID spiffe://example.org/cluster/checkout subscribe as cluster
// checkout, and only as it. {node} stands for the node id, binding a
// certificate to one proxy: ".../cluster/{cluster}/node/{node}".
const (
	clusterVar = "{cluster}"
	nodeVar    = "{node}"
)

// Policy says which proxy identity may subscribe to xDS as which clusters,
// and optionally as which node ids (an Envoy node's cluster selects the
// experiments it receives; its id names it in rollouts). A proxy's
// identities are its client certificate's URI SANs (SPIFFE IDs) and DNS
// SANs. An identity no rule names may subscribe as nothing.
type Policy struct {
	rules []rule
}

type rule struct {
	identity string   // exact, or a pattern with {cluster} and/or {node}
	cluster  bool     // identity has {cluster}
	node     bool     // identity has {node}
	clusters []string // allowed clusters without {cluster}, sorted; "*" allows every cluster
}

// policyFile is the JSON form of a Policy:
//
//	{"proxies": [
//	  {"identity": "spiffe://example.org/cluster/{cluster}"},
//	  {"identity": "spiffe://example.org/ns/edge/sa/gateway", "clusters": ["gateway"]},
//	  {"identity": "ops.example.org", "clusters": ["*"]}
//	]}
type policyFile struct {
	Proxies []struct {
		Identity string   `json:"identity"`
		Clusters []string `json:"clusters"`
	} `json:"proxies"`
}

// ParsePolicy decodes a policy file. Each entry names an identity: exact,
// or with a {cluster} placeholder standing for the cluster (then "clusters"
// must be absent) and/or a {node} placeholder standing for the node id,
// each at most once and each matching a value without "/"; an identity
// without {cluster} lists the clusters it may subscribe as ("*": any).
// Every problem is reported with its field path; unknown fields are errors.
func ParsePolicy(b []byte) (*Policy, error) {
	var f policyFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("proxy identity policy: %w", err)
	}
	if len(f.Proxies) == 0 {
		return nil, errors.New("proxies: empty, so no proxy could subscribe; list at least one identity")
	}
	var errs []error
	p := &Policy{}
	for i, e := range f.Proxies {
		field := fmt.Sprintf("proxies[%d]", i)
		nc, nn := strings.Count(e.Identity, clusterVar), strings.Count(e.Identity, nodeVar)
		switch {
		case e.Identity == "":
			errs = append(errs, fmt.Errorf("%s.identity: empty", field))
			continue
		case nc > 1 || nn > 1:
			errs = append(errs, fmt.Errorf("%s.identity: %q has a placeholder more than once", field, e.Identity))
			continue
		case nc == 1 && len(e.Clusters) > 0:
			errs = append(errs, fmt.Errorf("%s.clusters: must be absent when identity has %s (the cluster is what it matches)", field, clusterVar))
			continue
		case nc == 0 && len(e.Clusters) == 0:
			errs = append(errs, fmt.Errorf("%s.clusters: empty; list the clusters %q may subscribe as, or \"*\"", field, e.Identity))
			continue
		}
		r := rule{identity: e.Identity, cluster: nc == 1, node: nn == 1}
		for j, c := range e.Clusters {
			if c == "" {
				errs = append(errs, fmt.Errorf("%s.clusters[%d]: empty", field, j))
			}
		}
		r.clusters = slices.Sorted(slices.Values(e.Clusters))
		p.rules = append(p.rules, r)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// Allowed reports whether a proxy with identities ids may subscribe as
// cluster with node id node.
func (p *Policy) Allowed(ids []string, cluster, node string) bool {
	if cluster == "" {
		return false
	}
	for _, r := range p.rules {
		for _, id := range ids {
			if r.allows(id, cluster, node) {
				return true
			}
		}
	}
	return false
}

func (r rule) allows(id, cluster, node string) bool {
	want := r.identity
	if r.cluster {
		if strings.Contains(cluster, "/") {
			return false
		}
		want = strings.Replace(want, clusterVar, cluster, 1)
	}
	if r.node {
		if node == "" || strings.Contains(node, "/") {
			return false
		}
		want = strings.Replace(want, nodeVar, node, 1)
	}
	if id != want {
		return false
	}
	if r.cluster {
		return true
	}
	_, ok := slices.BinarySearch(r.clusters, cluster)
	return ok || slices.Contains(r.clusters, "*")
}
