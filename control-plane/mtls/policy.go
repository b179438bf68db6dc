package mtls

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// The placeholders of an identity pattern, each a whole path segment of a
// URI identity. {cluster} stands for the cluster:
// "spiffe://example.org/cluster/{cluster}" lets the certificate with SPIFFE
// ID spiffe://example.org/cluster/checkout subscribe as cluster checkout,
// and only as it. {node} stands for the node id, binding a certificate to
// one proxy: ".../cluster/{cluster}/node/{node}".
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
	// segments is the identity split at "/"; a segment that is a
	// placeholder matches the cluster or node id it stands for.
	segments []string
	cluster  bool     // a segment is {cluster}
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
// or a URI with a {cluster} path segment standing for the cluster (then
// "clusters" must be absent) and/or a {node} path segment standing for the
// node id, each at most once; an identity without {cluster} lists the
// clusters it may subscribe as ("*": any). Every problem is reported with
// its field path; unknown fields and trailing data are errors.
func ParsePolicy(b []byte) (*Policy, error) {
	var f policyFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the policy object")
	}
	if len(f.Proxies) == 0 {
		return nil, errors.New("proxies: empty, so no proxy could subscribe; list at least one identity")
	}
	var errs []error
	p := &Policy{}
	for i, e := range f.Proxies {
		field := fmt.Sprintf("proxies[%d]", i)
		if e.Identity == "" {
			errs = append(errs, fmt.Errorf("%s.identity: empty", field))
			continue
		}
		r, err := parseIdentity(e.Identity)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s.identity: %q: %w", field, e.Identity, err))
			continue
		case r.cluster && len(e.Clusters) > 0:
			errs = append(errs, fmt.Errorf("%s.clusters: must be absent when identity has %s (the cluster is what it matches)", field, clusterVar))
			continue
		case !r.cluster && len(e.Clusters) == 0:
			errs = append(errs, fmt.Errorf("%s.clusters: empty; list the clusters %q may subscribe as, or \"*\"", field, e.Identity))
			continue
		}
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

// parseIdentity splits an identity into segments and checks its
// placeholders: whole segments after the URI's authority, each at most
// once, and no other braces.
func parseIdentity(id string) (rule, error) {
	r := rule{segments: strings.Split(id, "/")}
	seen := map[string]bool{}
	for i, seg := range r.segments {
		if !strings.ContainsAny(seg, "{}") {
			continue
		}
		switch {
		case seg != clusterVar && seg != nodeVar:
			return r, fmt.Errorf("segment %q: a placeholder is a whole path segment, %s or %s", seg, clusterVar, nodeVar)
		case !strings.Contains(id, "://") || i < 3:
			return r, fmt.Errorf("%s: placeholders stand for path segments of a URI identity (spiffe://trust-domain/...)", seg)
		case seen[seg]:
			return r, fmt.Errorf("%s appears more than once", seg)
		}
		seen[seg] = true
	}
	r.cluster = seen[clusterVar]
	return r, nil
}

// Allowed reports whether a proxy with identities ids may subscribe as
// cluster with node id node.
func (p *Policy) Allowed(ids []string, cluster, node string) bool {
	if !validValue(cluster) {
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

// validValue reports whether v can stand for a placeholder: one non-empty
// path segment.
func validValue(v string) bool { return v != "" && !strings.ContainsAny(v, "/{}") }

func (r rule) allows(id, cluster, node string) bool {
	segs := strings.Split(id, "/")
	if len(segs) != len(r.segments) {
		return false
	}
	for i, want := range r.segments {
		switch want {
		case clusterVar:
			want = cluster
		case nodeVar:
			if !validValue(node) {
				return false
			}
			want = node
		}
		if segs[i] != want {
			return false
		}
	}
	if r.cluster {
		return true
	}
	_, ok := slices.BinarySearch(r.clusters, cluster)
	return ok || slices.Contains(r.clusters, "*")
}
