package mtls

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// clusterVar is the placeholder of an identity pattern that stands for the
// cluster: "spiffe://example.org/cluster/{cluster}" lets the certificate
// with SPIFFE ID spiffe://example.org/cluster/checkout subscribe as cluster
// checkout, and only as it.
const clusterVar = "{cluster}"

// Policy says which proxy identity may subscribe to xDS as which clusters
// (an Envoy node's cluster selects the experiments it receives). A proxy's
// identities are its client certificate's URI SANs (SPIFFE IDs) and DNS
// SANs. An identity no rule names may subscribe as nothing.
type Policy struct {
	rules []rule
}

type rule struct {
	prefix, suffix string // pattern around {cluster}, or the whole identity (exact)
	pattern        bool
	clusters       []string // allowed clusters, sorted; "*" allows every cluster
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
// or with one {cluster} placeholder standing for one path segment that is
// the cluster (then "clusters" must be absent); an exact identity lists the
// clusters it may subscribe as ("*": any). Every problem is reported with
// its field path; unknown fields are errors.
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
		n := strings.Count(e.Identity, clusterVar)
		switch {
		case e.Identity == "":
			errs = append(errs, fmt.Errorf("%s.identity: empty", field))
			continue
		case n > 1:
			errs = append(errs, fmt.Errorf("%s.identity: %q has %s %d times, want at most once", field, e.Identity, clusterVar, n))
			continue
		case n == 1 && len(e.Clusters) > 0:
			errs = append(errs, fmt.Errorf("%s.clusters: must be absent when identity has %s (the cluster is what it matches)", field, clusterVar))
			continue
		case n == 0 && len(e.Clusters) == 0:
			errs = append(errs, fmt.Errorf("%s.clusters: empty; list the clusters %q may subscribe as, or \"*\"", field, e.Identity))
			continue
		}
		r := rule{pattern: n == 1, prefix: e.Identity}
		if r.pattern {
			r.prefix, r.suffix, _ = strings.Cut(e.Identity, clusterVar)
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

// Allowed reports whether a proxy with identities ids may subscribe as
// cluster.
func (p *Policy) Allowed(ids []string, cluster string) bool {
	if cluster == "" {
		return false
	}
	for _, r := range p.rules {
		for _, id := range ids {
			if r.allows(id, cluster) {
				return true
			}
		}
	}
	return false
}

func (r rule) allows(id, cluster string) bool {
	if r.pattern {
		return !strings.Contains(cluster, "/") && id == r.prefix+cluster+r.suffix
	}
	if id != r.prefix {
		return false
	}
	_, ok := slices.BinarySearch(r.clusters, cluster)
	return ok || slices.Contains(r.clusters, "*")
}
