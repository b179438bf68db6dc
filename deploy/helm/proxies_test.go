package helm

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"helm.sh/helm/v3/pkg/releaseutil"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// bootstrap is the part of an Envoy bootstrap that says where the
// allot_xds cluster points.
type bootstrap struct {
	StaticResources struct {
		Clusters []struct {
			Name           string `json:"name"`
			LoadAssignment struct {
				Endpoints []struct {
					LbEndpoints []struct {
						Endpoint struct {
							Address struct {
								SocketAddress struct {
									Address   string `json:"address"`
									PortValue int32  `json:"port_value"`
								} `json:"socket_address"`
							} `json:"address"`
						} `json:"endpoint"`
					} `json:"lb_endpoints"`
				} `json:"endpoints"`
			} `json:"load_assignment"`
		} `json:"clusters"`
	} `json:"static_resources"`
}

// allotXDS is every address (host:port) the allot_xds cluster of the
// bootstrap in doc (YAML or JSON) lists.
func allotXDS(t *testing.T, doc []byte) []string {
	t.Helper()
	var b bootstrap
	if err := yaml.Unmarshal(doc, &b); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, c := range b.StaticResources.Clusters {
		if c.Name != "allot_xds" {
			continue
		}
		for _, e := range c.LoadAssignment.Endpoints {
			for _, lb := range e.LbEndpoints {
				sa := lb.Endpoint.Address.SocketAddress
				addrs = append(addrs, fmt.Sprintf("%s:%d", sa.Address, sa.PortValue))
			}
		}
	}
	return addrs
}

// TestIstioBootstrapsPointAtChart: the Istio bootstrap overrides' allot_xds
// cluster points at the xDS Service this chart makes when installed as its
// README says (release allot in namespace allot, the default values): the
// Service's cluster DNS name and its port. Every bootstrap of
// bootstrap-override-configmap.yaml (Wasm and native) is checked, as are
// the DNS names of allotd the Istio and Envoy Gateway guides give.
func TestIstioBootstrapsPointAtChart(t *testing.T) {
	vals := map[string]any{"tokens": map[string]any{"tokens": []any{map[string]any{"name": "platform", "role": "admin", "token": adminToken}}}}
	manifest, _, err := render(loadChart(t), release, vals)
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, manifest)
	var xds *corev1.Service
	var port int32
	for _, svc := range r.services {
		for _, p := range svc.Spec.Ports {
			if p.Name == "xds" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
				if xds != nil {
					t.Fatalf("two xDS Services: %s and %s", xds.Name, svc.Name)
				}
				xds, port = svc, p.Port
			}
		}
	}
	if xds == nil {
		t.Fatal("no xDS Service (a port named xds, not headless)")
	}
	host := xds.Name + "." + xds.Namespace + ".svc.cluster.local"
	want := fmt.Sprintf("%s:%d", host, port)
	if want != "allot-xds.allot.svc.cluster.local:18000" {
		t.Errorf("the xDS Service is %s: the overrides and the guides name allot-xds.allot.svc.cluster.local:18000", want)
	}

	istio := filepath.Join("..", "istio")
	bootstraps := map[string][]byte{}
	for _, f := range []string{"bootstrap-override.yaml", "bootstrap-override-native.yaml"} {
		b, err := os.ReadFile(filepath.Join(istio, f))
		if err != nil {
			t.Fatal(err)
		}
		bootstraps[f] = b
	}
	cmFile := "bootstrap-override-configmap.yaml"
	b, err := os.ReadFile(filepath.Join(istio, cmFile))
	if err != nil {
		t.Fatal(err)
	}
	dec := strictDecoder(t)
	for _, doc := range releaseutil.SplitManifests(string(b)) {
		obj, _, err := dec.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", cmFile, err)
		}
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			t.Fatalf("%s: a %T, want ConfigMaps", cmFile, obj)
		}
		js, ok := cm.Data["custom_bootstrap.json"]
		if !ok || !json.Valid([]byte(js)) {
			t.Fatalf("%s: ConfigMap %s has no JSON custom_bootstrap.json", cmFile, cm.Name)
		}
		bootstraps[cmFile+" "+cm.Name] = []byte(js)
	}
	if len(bootstraps) != 4 {
		t.Errorf("bootstraps %d, want 4 (two files, two ConfigMaps)", len(bootstraps))
	}
	for name, doc := range bootstraps {
		addrs := allotXDS(t, doc)
		if len(addrs) == 0 {
			t.Errorf("%s: no allot_xds endpoint", name)
		}
		for _, a := range addrs {
			if a != want {
				t.Errorf("%s: allot_xds at %s, want the chart's xDS Service %s", name, a, want)
			}
		}
	}

	// The guides, where they name allotd's DNS name.
	named := regexp.MustCompile(`\ballot[a-z0-9-]*\.[a-z0-9-]+\.svc\.cluster\.local(:[0-9]+)?`)
	for _, f := range []string{filepath.Join(istio, "README.md"), filepath.Join("..", "envoy-gateway", "README.md")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllSubmatch(b, -1) {
			h, p := string(m[0][:len(m[0])-len(m[1])]), string(m[1])
			if h != host || (p != "" && p != ":"+strconv.Itoa(int(port))) {
				t.Errorf("%s names %s, want the chart's xDS Service %s", f, m[0], want)
			}
		}
	}
}
