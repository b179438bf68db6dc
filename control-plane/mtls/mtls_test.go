package mtls

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
)

func TestParsePolicyErrors(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"not json", `{`, "unexpected EOF"},
		{"trailing data", `{"proxies":[{"identity":"a","clusters":["b"]}]} {}`, "data after the policy object"},
		{"unknown field", `{"proxies":[{"identity":"a","clusters":["b"],"cluster":"c"}]}`, `unknown field "cluster"`},
		{"no proxies", `{"proxies":[]}`, "proxies: empty"},
		{"empty identity", `{"proxies":[{"clusters":["b"]}]}`, "proxies[0].identity: empty"},
		{"exact without clusters", `{"proxies":[{"identity":"a"}]}`, `proxies[0].clusters: empty; list the clusters "a" may subscribe as`},
		{"pattern with clusters", `{"proxies":[{"identity":"spiffe://x/{cluster}","clusters":["b"]}]}`, "proxies[0].clusters: must be absent"},
		{"two placeholders", `{"proxies":[{"identity":"spiffe://x/{cluster}/{cluster}"}]}`, "proxies[0].identity: \"spiffe://x/{cluster}/{cluster}\": {cluster} appears more than once"},
		{"placeholder within a segment", `{"proxies":[{"identity":"spiffe://td/ns/{cluster}-{node}"}]}`, `segment "{cluster}-{node}": a placeholder is a whole path segment`},
		{"unknown placeholder", `{"proxies":[{"identity":"spiffe://td/c/{clustr}","clusters":["x"]}]}`, `segment "{clustr}"`},
		{"placeholder in the authority", `{"proxies":[{"identity":"spiffe://{cluster}/x"}]}`, "placeholders stand for path segments of a URI identity"},
		{"placeholder in a DNS name", `{"proxies":[{"identity":"{cluster}"}]}`, "placeholders stand for path segments of a URI identity"},
		{"node without clusters", `{"proxies":[{"identity":"spiffe://x/node/{node}"}]}`, "proxies[0].clusters: empty"},
		{"empty cluster", `{"proxies":[{"identity":"a","clusters":["b",""]}]}`, "proxies[0].clusters[1]: empty"},
		{"every problem", `{"proxies":[{"identity":""},{"identity":"a"}]}`, "proxies[0].identity: empty\nproxies[1].clusters: empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParsePolicy: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestPolicyAllowed(t *testing.T) {
	p, err := ParsePolicy([]byte(`{"proxies":[
	  {"identity":"spiffe://allot.test/cluster/{cluster}"},
	  {"identity":"spiffe://allot.test/ns/{cluster}/sa/envoy"},
	  {"identity":"spiffe://allot.test/c/{cluster}/node/{node}"},
	  {"identity":"spiffe://allot.test/edge/{node}","clusters":["edge"]},
	  {"identity":"spiffe://allot.test/sa/gateway","clusters":["edge","gateway"]},
	  {"identity":"ops.allot.test","clusters":["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name          string
		ids           []string
		cluster, node string
		want          bool
	}{
		{"pattern, own cluster", []string{"spiffe://allot.test/cluster/checkout"}, "checkout", "n1", true},
		{"pattern, other cluster", []string{"spiffe://allot.test/cluster/checkout"}, "payments", "n1", false},
		{"pattern in the middle", []string{"spiffe://allot.test/ns/shop/sa/envoy"}, "shop", "n1", true},
		{"pattern does not span segments", []string{"spiffe://allot.test/cluster/a/b"}, "a/b", "n1", false},
		{"pattern needs a cluster", []string{"spiffe://allot.test/cluster/"}, "", "n1", false},
		{"exact, listed cluster", []string{"spiffe://allot.test/sa/gateway"}, "edge", "n1", true},
		{"exact, unlisted cluster", []string{"spiffe://allot.test/sa/gateway"}, "checkout", "n1", false},
		{"wildcard", []string{"ops.allot.test"}, "anything", "n1", true},
		{"any of several identities", []string{"unknown.allot.test", "spiffe://allot.test/cluster/checkout"}, "checkout", "n1", true},
		{"prefix is not enough", []string{"spiffe://allot.test/sa/gateway-2"}, "edge", "n1", false},
		{"no identity", nil, "checkout", "n1", false},
		{"cluster with braces", []string{"spiffe://allot.test/cluster/{node}"}, "{node}", "n1", false},
		{"node pattern, own node", []string{"spiffe://allot.test/c/shop/node/shop-7"}, "shop", "shop-7", true},
		{"node pattern, another node", []string{"spiffe://allot.test/c/shop/node/shop-7"}, "shop", "shop-8", false},
		{"node pattern, another cluster", []string{"spiffe://allot.test/c/shop/node/shop-7"}, "cart", "shop-7", false},
		{"node pattern, node with a slash", []string{"spiffe://allot.test/edge/a/b"}, "edge", "a/b", false},
		{"node pattern with listed cluster", []string{"spiffe://allot.test/edge/gw-1"}, "edge", "gw-1", true},
		{"node pattern with unlisted cluster", []string{"spiffe://allot.test/edge/gw-1"}, "shop", "gw-1", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Allowed(tt.ids, tt.cluster, tt.node); got != tt.want {
				t.Fatalf("Allowed(%v, %q, %q) = %v, want %v", tt.ids, tt.cluster, tt.node, got, tt.want)
			}
		})
	}
}

func TestLoadRefusesIncompleteFiles(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files Files
		want  string
	}{
		{"no certificate", Files{Key: "k"}, "server certificate and key are required"},
		{"client CAs without policy", Files{Cert: "c", Key: "k", ClientCA: "ca"}, "client CAs need a proxy identity policy"},
		{"policy without client CAs", Files{Cert: "c", Key: "k", Policy: "p"}, "needs client CAs"},
		{"missing file", Files{Cert: "/nonexistent/c.pem", Key: "/nonexistent/k.pem"}, "/nonexistent/c.pem"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Load(tt.files, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestFailuresReportedOnce: a failure is reported when it is seen at two
// checks in a row (one seen once may be a rotation caught halfway), once
// per distinct failure of each part.
func TestFailuresReportedOnce(t *testing.T) {
	e := func(part int, msg string) [parts]error {
		var errs [parts]error
		errs[part] = errors.New(msg)
		return errs
	}
	var none [parts]error
	var f failures
	steps := []struct {
		errs [parts]error
		want []int
	}{
		{e(partCert, "key does not match"), nil}, // halfway through a rotation
		{none, nil},                              // the rotation finished
		{e(partPolicy, "bad"), nil},
		{e(partPolicy, "bad"), []int{partPolicy}},
		{e(partPolicy, "bad"), nil}, // still broken: not again
		{e(partPolicy, "worse"), nil},
		{e(partPolicy, "worse"), []int{partPolicy}}, // another failure
		{none, nil},
		{e(partPolicy, "worse"), nil},
		{e(partPolicy, "worse"), []int{partPolicy}}, // broken again after a fix
	}
	for i, st := range steps {
		if got := f.observe(st.errs); !slices.Equal(got, st.want) {
			t.Fatalf("check %d: reported %v, want %v", i, got, st.want)
		}
	}
}

// TestReloadKeepsWhatDoesNotLoad: each part (certificate and key, client
// CAs, policy) reloads on its own; one that does not load keeps the
// previous one, and its failure is counted once.
func TestReloadKeepsWhatDoesNotLoad(t *testing.T) {
	dir := t.TempDir()
	ca := mtlstest.NewCA(t, "allotd")
	files := Files{ClientCA: filepath.Join(dir, "ca.pem"), Policy: filepath.Join(dir, "p.json")}
	first := ca.Server(t)
	files.Cert, files.Key = first.Write(t, dir, "server")
	mtlstest.WriteFile(t, files.ClientCA, ca.PEM)
	mtlstest.WriteFile(t, files.Policy, []byte(`{"proxies":[{"identity":"a","clusters":["x"]}]}`))
	r, err := Load(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err != nil {
		t.Fatalf("reload of unchanged files: %v", err)
	}
	if got := testutil.ToFloat64(r.reloads.WithLabelValues("loaded")); got != 0 {
		t.Fatalf("unchanged files counted as %v reloads", got)
	}

	// A broken policy and a new certificate: the certificate is taken, the
	// policy kept.
	mtlstest.WriteFile(t, files.Policy, []byte(`{"proxies":[{"identity":"b"}]}`))
	second := ca.Server(t)
	second.Write(t, dir, "server")
	for range 3 {
		if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "proxies[0].clusters") {
			t.Fatalf("Reload: %v, want the policy's error", err)
		}
	}
	m := r.cur.Load()
	if m.cert.Leaf.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Error("the new certificate was held back by the broken policy")
	}
	if !m.policy.Allowed([]string{"a"}, "x", "n") {
		t.Error("the previous policy is no longer in use")
	}

	// A key that does not match the certificate: the certificate in use
	// stays; the fixed policy is taken.
	mtlstest.WriteFile(t, files.Key, first.KeyPEM)
	mtlstest.WriteFile(t, files.Policy, []byte(`{"proxies":[{"identity":"b","clusters":["y"]}]}`))
	if err := r.Reload(); err == nil || !strings.Contains(err.Error(), "with key") {
		t.Fatalf("Reload: %v, want the key pair's error", err)
	}
	m = r.cur.Load()
	if m.cert.Leaf.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Error("a mismatched key replaced the certificate in use")
	}
	if !m.policy.Allowed([]string{"b"}, "y", "n") || m.policy.Allowed([]string{"a"}, "x", "n") {
		t.Error("the fixed policy is not in use")
	}
	if m.xds.ClientAuth == 0 || m.xds.ClientCAs == nil || len(m.xds.Certificates) != 1 {
		t.Error("the xDS TLS configuration lost its client certificate requirement")
	}
}
