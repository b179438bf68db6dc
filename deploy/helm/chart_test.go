package helm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// chartDir is the chart under test; ciDir its documented values sets.
const (
	chartDir  = "allot"
	ciDir     = "allot/ci"
	release   = "allot"
	namespace = "allot"
)

// kubeVersion is the cluster version every render assumes (the chart's
// kubeVersion constraint is checked against it).
var kubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// rendered is one install's output, each document decoded strictly into
// its API type.
type rendered struct {
	notes        string
	statefulSet  *appsv1.StatefulSet
	services     map[string]*corev1.Service
	secrets      map[string]*corev1.Secret
	configMaps   map[string]*corev1.ConfigMap
	pdbs         []*policyv1.PodDisruptionBudget
	netpols      []*networkingv1.NetworkPolicy
	monitors     []*monitoringv1.ServiceMonitor
	serviceAccts []*corev1.ServiceAccount
}

// render installs the chart the way `helm install --dry-run` does on the
// client (values merged with the chart's, checked against
// values.schema.json, templates rendered), with release name name.
func render(ch *chart.Chart, name string, vals map[string]any) (manifest, notes string, err error) {
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = name, namespace
	inst.KubeVersion = kubeVersion
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return "", "", err
	}
	return rel.Manifest, rel.Info.Notes, nil
}

// strictDecoder decodes YAML into the registered Kubernetes types,
// refusing unknown and duplicate fields.
func strictDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := monitoringv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{Yaml: true, Strict: true})
}

// decode splits a manifest and decodes every document strictly.
func decode(t *testing.T, manifest string) rendered {
	t.Helper()
	dec := strictDecoder(t)
	r := rendered{services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	docs := releaseutil.SplitManifests(manifest)
	for _, k := range slices.Sorted(maps.Keys(docs)) {
		doc := docs[k]
		obj, gvk, err := dec.Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decode strictly:\n%s\n%v", doc, err)
		}
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			if r.statefulSet != nil {
				t.Fatalf("two StatefulSets")
			}
			r.statefulSet = o
		case *corev1.Service:
			r.services[o.Name] = o
		case *corev1.Secret:
			r.secrets[o.Name] = o
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *corev1.ServiceAccount:
			r.serviceAccts = append(r.serviceAccts, o)
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *networkingv1.NetworkPolicy:
			r.netpols = append(r.netpols, o)
		case *monitoringv1.ServiceMonitor:
			r.monitors = append(r.monitors, o)
		default:
			t.Fatalf("unexpected %v", gvk)
		}
		if ns := obj.(interface{ GetNamespace() string }).GetNamespace(); ns != namespace {
			t.Errorf("%v: namespace %q, want %q", gvk, ns, namespace)
		}
	}
	if r.statefulSet == nil {
		t.Fatal("no StatefulSet")
	}
	return r
}

// loadChart loads the chart directory.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// ciValues reads one documented values set.
func ciValues(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(filepath.Join(ciDir, name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// allotdBin is allotd built from this repository, the oracle for the
// rendered command line, and etcdBin the etcd server the product tests
// against; both built once by TestMain.
var allotdBin, etcdBin string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "allot-chart")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	allotdBin, etcdBin = filepath.Join(dir, "allotd"), filepath.Join(dir, "etcd")
	// allotd's flags live in its package main, and etcd is the product
	// module's go.mod tool: both are built in the product's module.
	for bin, pkg := range map[string]string{allotdBin: "./control-plane/cmd/allotd", etcdBin: "go.etcd.io/etcd/server/v3"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	return m.Run()
}

// parseWithAllotd has allotd parse args with its own flag set: followed
// by -h, a command line whose every flag allotd defines (with a value of
// its type) prints the usage and exits 0; an unknown flag, a bad value or
// a positional argument fails.
func parseWithAllotd(args []string) error {
	cmd := exec.Command(allotdBin, append(slices.Clone(args), "-h")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("allotd %s -h: %v\n%s", strings.Join(args, " "), err, firstLines(stderr.String(), 3))
	}
	if !strings.Contains(stderr.String(), "Usage:") {
		return fmt.Errorf("allotd -h printed no usage: %s", stderr.String())
	}
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// TestOracles checks the two checkers the other tests rely on: allotd's
// flag parsing refuses an unknown flag and a bad value, and the strict
// decoder refuses unknown and duplicate fields.
func TestOracles(t *testing.T) {
	if err := parseWithAllotd([]string{"-db=/x", "-tokens=/t"}); err != nil {
		t.Errorf("known flags: %v", err)
	}
	for _, args := range [][]string{{"-no-such-flag=1"}, {"-xds-max-streams=many"}, {"-tls-reload=5"}, {"positional"}} {
		if err := parseWithAllotd(args); err == nil {
			t.Errorf("allotd accepted %q", args)
		}
	}
	dec := strictDecoder(t)
	for name, doc := range map[string]string{
		"unknown field":   "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {portz: []}\n",
		"duplicate field": "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP, type: NodePort}\n",
		"unknown in CRD":  "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {endpoints: [{prot: admin}]}\n",
	} {
		if _, _, err := dec.Decode([]byte(doc), nil, nil); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// TestValuesSets renders every documented values set in ci/ and checks
// what holds for all of them, then what each set is for.
func TestValuesSets(t *testing.T) {
	ch := loadChart(t)
	files, err := filepath.Glob(filepath.Join(ciDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values sets in %s: %v", ciDir, err)
	}
	checks := map[string]func(*testing.T, rendered){
		"bolt-default":                 checkBoltDefault,
		"bolt-tls-mtls":                checkBoltTLSMTLS,
		"etcd-replicas":                checkEtcdReplicas,
		"networkpolicy-servicemonitor": checkNetworkPolicyServiceMonitor,
		"existing-secrets":             checkExistingSecrets,
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		if !strings.Contains(string(readme), "(allot/ci/"+name+".yaml)") {
			t.Errorf("README.md does not link values set %s", f)
		}
		t.Run(name, func(t *testing.T) {
			manifest, notes, err := render(ch, release, ciValues(t, name))
			if err != nil {
				t.Fatal(err)
			}
			r := decode(t, manifest)
			r.notes = notes
			checkEveryRender(t, r)
			check, ok := checks[name]
			if !ok {
				t.Fatalf("no behaviour check for values set %s: add one", name)
			}
			check(t, r)
		})
	}
}

// TestDefaultValuesNeedTokens: the chart's own values are not enough to
// install; the first error names the missing tokens.
func TestDefaultValuesNeedTokens(t *testing.T) {
	_, _, err := render(loadChart(t), release, nil)
	if err == nil || !strings.Contains(err.Error(), "/tokens/tokens") {
		t.Fatalf("render with the defaults: %v, want an error naming /tokens/tokens", err)
	}
}

// container is the allotd container of the StatefulSet.
func container(t *testing.T, r rendered) corev1.Container {
	t.Helper()
	cs := r.statefulSet.Spec.Template.Spec.Containers
	if len(cs) != 1 || cs[0].Name != "allotd" {
		t.Fatalf("containers: %+v, want one named allotd", cs)
	}
	return cs[0]
}

// flagValue is the value of -name in args, and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "-"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// fileFlags are allotd's flags that name a file it reads.
var fileFlags = []string{"tokens", "db", "tls-cert", "tls-key", "xds-client-ca", "xds-identities", "mesh", "sticky-keys", "etcd-ca", "etcd-cert", "etcd-key"}

// checkEveryRender holds for every values set: allotd accepts the command
// line, every file it names is on a volume the pod mounts, the pod is
// locked down, the probes are allotd's health endpoints, and the Services
// select the pods and name its ports.
func checkEveryRender(t *testing.T, r rendered) {
	t.Helper()
	sts := r.statefulSet
	pod := sts.Spec.Template.Spec
	c := container(t, r)
	if err := parseWithAllotd(c.Args); err != nil {
		t.Errorf("rendered args: %v", err)
	}
	if len(c.Command) != 0 {
		t.Errorf("command %q: the image's entrypoint /allotd runs the args", c.Command)
	}
	for _, a := range c.Args {
		if strings.Contains(a, "$(POD_NAME)") && !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		}) {
			t.Errorf("%s without a POD_NAME env from metadata.name", a)
		}
	}
	for _, f := range fileFlags {
		if p, ok := flagValue(c.Args, f); ok {
			checkMounted(t, r, c, f, p)
		}
	}

	// Security context, pod and container.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != 65532 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext: %+v", psc)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext: %+v", sc)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken: %v, want false (allotd does not call the Kubernetes API)", pod.AutomountServiceAccountToken)
	}

	// Probes: /healthz and /readyz on the admin listener, HTTPS with TLS.
	scheme := corev1.URISchemeHTTP
	if _, ok := flagValue(c.Args, "tls-cert"); ok {
		scheme = corev1.URISchemeHTTPS
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.StrVal != "admin" || p.probe.HTTPGet.Scheme != scheme {
			t.Errorf("%s probe: %+v, want GET %s on port admin over %s", p.name, p.probe, p.path, scheme)
		}
	}
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v, want memory requests and limits", c.Resources)
	}

	// Listen addresses are the container ports.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for flagName, port := range map[string]string{"admin-addr": "admin", "xds-addr": "xds", "admin-grpc-addr": "admin-grpc"} {
		v, ok := flagValue(c.Args, flagName)
		if !ok {
			if _, has := ports[port]; has || flagName != "admin-grpc-addr" {
				t.Errorf("port %s without -%s", port, flagName)
			}
			continue
		}
		if want := fmt.Sprintf(":%d", ports[port]); v != want {
			t.Errorf("-%s=%s, container port %s is %d", flagName, v, port, ports[port])
		}
	}

	// Services: xDS, admin, headless; each selects the pods and targets a named port.
	for _, suffix := range []string{"-xds", "-admin", "-headless"} {
		svc, ok := r.services[release+suffix]
		if !ok {
			t.Errorf("no Service %s%s", release, suffix)
			continue
		}
		for k, v := range svc.Spec.Selector {
			if sts.Spec.Template.Labels[k] != v {
				t.Errorf("Service %s selects %s=%s, not a pod label", svc.Name, k, v)
			}
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := ports[p.TargetPort.StrVal]; !ok {
				t.Errorf("Service %s targets port %q, not a container port", svc.Name, p.TargetPort.String())
			}
		}
	}
	if _, ok := r.services[release+"-xds"].Spec.Selector["app.kubernetes.io/instance"]; !ok {
		t.Errorf("xds Service selects no instance")
	}
	if sts.Spec.ServiceName != release+"-headless" {
		t.Errorf("serviceName %q", sts.Spec.ServiceName)
	}
	for k, v := range sts.Spec.Selector.MatchLabels {
		if sts.Spec.Template.Labels[k] != v {
			t.Errorf("StatefulSet selector %s=%s not on its pods", k, v)
		}
	}
	if !strings.Contains(r.notes, "port-forward svc/"+release+"-admin") || !strings.Contains(r.notes, release+"-xds."+namespace+".svc:") ||
		!strings.Contains(r.notes, "ALLOT_TOKEN") {
		t.Errorf("NOTES lack the port-forward, the token or the xDS address:\n%s", r.notes)
	}
	_, mtls := flagValue(c.Args, "xds-client-ca")
	if warned := strings.Contains(r.notes, "WARNING: xDS requires no proxy certificate"); warned == mtls {
		t.Errorf("NOTES warn of xDS without proxy certificates: %v, with -xds-client-ca: %v", warned, mtls)
	}
}

// checkMounted checks that file p, named by -flagName, is on a volume the
// container mounts, and for a chart-made ConfigMap or Secret, or a volume
// with items, that the volume has that file.
func checkMounted(t *testing.T, r rendered, c corev1.Container, flagName, p string) {
	t.Helper()
	dir, file := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
	if i < 0 {
		t.Errorf("-%s=%s: no volume mounted at %s", flagName, p, dir)
		return
	}
	m := c.VolumeMounts[i]
	if m.SubPath != "" {
		t.Errorf("-%s: mounted with subPath, which never sees an update", flagName)
	}
	if flagName != "db" && !m.ReadOnly {
		t.Errorf("-%s: volume %s mounted read-write", flagName, m.Name)
	}
	spec := r.statefulSet.Spec.Template.Spec
	j := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
	if j < 0 {
		if flagName == "db" && slices.ContainsFunc(r.statefulSet.Spec.VolumeClaimTemplates, func(pvc corev1.PersistentVolumeClaim) bool { return pvc.Name == m.Name }) {
			return
		}
		t.Errorf("-%s: volume %s not in the pod", flagName, m.Name)
		return
	}
	v := spec.Volumes[j]
	var items []corev1.KeyToPath
	switch {
	case v.Secret != nil:
		items = v.Secret.Items
		if s, ok := r.secrets[v.Secret.SecretName]; ok {
			if _, has := s.Data[file]; !has && len(items) == 0 {
				t.Errorf("-%s: Secret %s has no %s", flagName, s.Name, file)
			}
		}
	case v.ConfigMap != nil:
		items = v.ConfigMap.Items
		cm, ok := r.configMaps[v.ConfigMap.Name]
		if !ok {
			t.Errorf("-%s: ConfigMap %s not rendered", flagName, v.ConfigMap.Name)
		} else if _, has := cm.Data[file]; !has {
			t.Errorf("-%s: ConfigMap %s has no %s", flagName, cm.Name, file)
		}
	default:
		t.Errorf("-%s: volume %s is neither a Secret nor a ConfigMap", flagName, v.Name)
	}
	if len(items) > 0 && !slices.ContainsFunc(items, func(k corev1.KeyToPath) bool { return k.Path == file }) {
		t.Errorf("-%s: volume %s's items %+v lack %s", flagName, v.Name, items, file)
	}
}

func checkBoltDefault(t *testing.T, r rendered) {
	sts := r.statefulSet
	c := container(t, r)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 {
		t.Errorf("replicas %v, want 1", sts.Spec.Replicas)
	}
	if db, _ := flagValue(c.Args, "db"); db != "/var/lib/allot/allot.db" {
		t.Errorf("-db=%q, want /var/lib/allot/allot.db", db)
	}
	if _, ok := flagValue(c.Args, "store"); ok {
		t.Errorf("-store with bolt: allotd refuses -db with -store")
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("volumeClaimTemplates: %d, want 1", len(sts.Spec.VolumeClaimTemplates))
	}
	pvc := sts.Spec.VolumeClaimTemplates[0]
	if pvc.Name != "data" || pvc.Spec.Resources.Requests.Storage().String() != "1Gi" ||
		!slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) || pvc.Spec.StorageClassName != nil {
		t.Errorf("PVC: %+v", pvc)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "data" && m.MountPath == "/var/lib/allot" && !m.ReadOnly
	}) {
		t.Errorf("data volume not mounted read-write at /var/lib/allot: %+v", c.VolumeMounts)
	}
	if fs := sts.Spec.Template.Spec.SecurityContext.FSGroup; fs == nil || *fs != 65532 {
		t.Errorf("fsGroup %v, want 65532 (the PVC must be writable by allotd)", fs)
	}
	if len(r.pdbs) != 0 || len(sts.Spec.Template.Spec.TopologySpreadConstraints) != 0 {
		t.Errorf("a single bbolt pod has a PDB or spreading")
	}
	if len(r.netpols) != 0 || len(r.monitors) != 0 {
		t.Errorf("NetworkPolicy or ServiceMonitor rendered while disabled")
	}
	if want := "ghcr.io/allotmesh/allotd:0.1.0"; c.Image != want {
		t.Errorf("image %q, want %q (the chart's appVersion)", c.Image, want)
	}
	// The tokens Secret made from the values: allotd's tokens file format.
	s, ok := r.secrets[release+"-tokens"]
	if !ok {
		t.Fatalf("no tokens Secret")
	}
	var tf struct {
		Tokens []struct {
			Name       string   `json:"name"`
			Role       string   `json:"role"`
			Token      string   `json:"token"`
			Namespaces []string `json:"namespaces"`
		} `json:"tokens"`
	}
	dec := json.NewDecoder(bytes.NewReader(s.Data["tokens.json"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tf); err != nil || len(tf.Tokens) != 2 || tf.Tokens[0].Name != "platform" || tf.Tokens[0].Role != "admin" {
		t.Errorf("tokens.json %s: %+v, %v", s.Data["tokens.json"], tf, err)
	}
	if sts.Spec.Template.Annotations["checksum/tokens"] == "" {
		t.Errorf("no checksum/tokens annotation: allotd reads the tokens at start-up only")
	}
}

func checkBoltTLSMTLS(t *testing.T, r rendered) {
	c := container(t, r)
	for f, want := range map[string]string{
		"tls-cert": "/etc/allot/tls/tls.crt", "tls-key": "/etc/allot/tls/tls.key",
		"xds-client-ca": "/etc/allot/xds-client-ca/ca.crt", "xds-identities": "/etc/allot/xds-identities/identities.json",
		"admin-grpc-addr": ":8081", "tokens": "/etc/allot/tokens/tokens.json",
	} {
		if got, _ := flagValue(c.Args, f); got != want {
			t.Errorf("-%s=%q, want %q", f, got, want)
		}
	}
	vols := volumesByName(r)
	if v := vols["tls"]; v.Secret == nil || v.Secret.SecretName != "allotd-tls" {
		t.Errorf("tls volume: %+v", v)
	}
	if v := vols["xds-client-ca"]; v.Secret == nil || v.Secret.SecretName != "mesh-proxy-ca" {
		t.Errorf("xds-client-ca volume: %+v", v)
	}
	if v := vols["tokens"]; v.Secret == nil || v.Secret.SecretName != "allot-tokens" {
		t.Errorf("tokens volume: %+v", v)
	}
	if _, ok := r.secrets[release+"-tokens"]; ok {
		t.Errorf("tokens Secret rendered with tokens.existingSecret")
	}
	var policy struct {
		Proxies []struct {
			Identity string   `json:"identity"`
			Clusters []string `json:"clusters"`
		} `json:"proxies"`
	}
	cm := r.configMaps[release+"-xds-identities"]
	if cm == nil {
		t.Fatal("no identities ConfigMap")
	}
	if err := json.Unmarshal([]byte(cm.Data["identities.json"]), &policy); err != nil || len(policy.Proxies) != 2 ||
		policy.Proxies[0].Identity != "spiffe://cluster.local/cluster/{cluster}" {
		t.Errorf("identities.json %s: %+v %v", cm.Data["identities.json"], policy, err)
	}
	admin := r.services[release+"-admin"]
	if !slices.ContainsFunc(admin.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "admin-grpc" && p.Port == 8081 }) {
		t.Errorf("admin Service lacks admin-grpc: %+v", admin.Spec.Ports)
	}
	if sc := r.statefulSet.Spec.VolumeClaimTemplates[0].Spec.StorageClassName; sc == nil || *sc != "fast-ssd" {
		t.Errorf("storageClassName %v", sc)
	}
}

func checkEtcdReplicas(t *testing.T, r rendered) {
	sts := r.statefulSet
	c := container(t, r)
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", sts.Spec.Replicas)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("volumeClaimTemplates on etcd")
	}
	if _, ok := flagValue(c.Args, "db"); ok {
		t.Errorf("-db with -store: allotd refuses both")
	}
	for f, want := range map[string]string{
		"store":       "etcd://etcd-0.etcd.etcd.svc:2379,etcd-1.etcd.etcd.svc:2379,etcd-2.etcd.etcd.svc:2379",
		"etcd-prefix": "/allot/prod/", "etcd-ca": "/etc/allot/etcd-tls/ca.crt",
		"etcd-cert": "/etc/allot/etcd-tls/tls.crt", "etcd-key": "/etc/allot/etcd-tls/tls.key",
		"replica-id": "$(POD_NAME)", "store-timeout": "5s", "lease-ttl": "10s",
	} {
		if got, _ := flagValue(c.Args, f); got != want {
			t.Errorf("-%s=%q, want %q", f, got, want)
		}
	}
	if v := volumesByName(r)["etcd-tls"]; v.Secret == nil || v.Secret.SecretName != "allotd-etcd-client" {
		t.Errorf("etcd-tls volume: %+v", v)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel", sts.Spec.PodManagementPolicy)
	}
	if len(r.pdbs) != 1 {
		t.Fatalf("PDBs: %d, want 1", len(r.pdbs))
	}
	pdb := r.pdbs[0]
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB: %+v", pdb.Spec)
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if sts.Spec.Template.Labels[k] != v {
			t.Errorf("PDB selects %s=%s, not a pod label", k, v)
		}
	}
	tsc := sts.Spec.Template.Spec.TopologySpreadConstraints
	byKey := map[string]corev1.TopologySpreadConstraint{}
	for _, c := range tsc {
		byKey[c.TopologyKey] = c
		for k, v := range c.LabelSelector.MatchLabels {
			if sts.Spec.Template.Labels[k] != v {
				t.Errorf("spread constraint selects %s=%s, not a pod label", k, v)
			}
		}
	}
	if h := byKey["kubernetes.io/hostname"]; h.WhenUnsatisfiable != corev1.DoNotSchedule || h.MaxSkew != 1 {
		t.Errorf("hostname spread: %+v", h)
	}
	if z := byKey["topology.kubernetes.io/zone"]; z.WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Errorf("zone spread: %+v", z)
	}
	for i := range 3 {
		if want := fmt.Sprintf("priority %d: %s-%d.%s-headless.%s.svc:18000", i, release, i, release, namespace); !strings.Contains(r.notes, want) {
			t.Errorf("NOTES lack %q", want)
		}
	}
}

func checkNetworkPolicyServiceMonitor(t *testing.T, r rendered) {
	if len(r.netpols) != 1 || len(r.monitors) != 1 {
		t.Fatalf("NetworkPolicies %d, ServiceMonitors %d, want 1 and 1", len(r.netpols), len(r.monitors))
	}
	np := r.netpols[0]
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 2 {
		t.Fatalf("NetworkPolicy: %+v", np.Spec)
	}
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if r.statefulSet.Spec.Template.Labels[k] != v {
			t.Errorf("NetworkPolicy selects %s=%s, not a pod label", k, v)
		}
	}
	if p := np.Spec.Ingress[0]; p.Ports[0].Port.StrVal != "admin" || len(p.From) != 2 {
		t.Errorf("admin rule: %+v", p)
	}
	if p := np.Spec.Ingress[1]; p.Ports[0].Port.StrVal != "xds" || p.From[0].NamespaceSelector.MatchLabels["allot.mesh/enabled"] != "true" {
		t.Errorf("xds rule: %+v", p)
	}
	sm := r.monitors[0]
	// The ServiceMonitor selects the admin Service, and no other.
	for name, svc := range r.services {
		matches := true
		for k, v := range sm.Spec.Selector.MatchLabels {
			matches = matches && svc.Labels[k] == v
		}
		if matches != (name == release+"-admin") {
			t.Errorf("ServiceMonitor selects Service %s: %v", name, matches)
		}
	}
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("endpoints: %+v", sm.Spec.Endpoints)
	}
	ep := sm.Spec.Endpoints[0]
	if ep.Port != "admin" || ep.Path != "/metrics" || ep.Scheme == nil || *ep.Scheme != "http" || ep.Interval != "15s" {
		t.Errorf("endpoint: %+v", ep)
	}
	if sm.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("labels %v", sm.Labels)
	}
}

func checkExistingSecrets(t *testing.T, r rendered) {
	c := container(t, r)
	want := "registry.example.org/mirror/allotd:0.1.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if c.Image != want {
		t.Errorf("image %q, want %q", c.Image, want)
	}
	if ps := r.statefulSet.Spec.Template.Spec.ImagePullSecrets; len(ps) != 1 || ps[0].Name != "registry-example-org" {
		t.Errorf("imagePullSecrets %+v", ps)
	}
	if len(r.secrets) != 0 {
		t.Errorf("Secrets rendered with every secret existing: %v", slices.Collect(maps.Keys(r.secrets)))
	}
	for f, want := range map[string]string{"sticky-keys": "/etc/allot/sticky-keys/keys.json", "mesh": "/etc/allot/mesh/mesh.json"} {
		if got, _ := flagValue(c.Args, f); got != want {
			t.Errorf("-%s=%q, want %q", f, got, want)
		}
	}
	var mesh map[string]any
	cm := r.configMaps[release+"-mesh"]
	if cm == nil {
		t.Fatal("no mesh ConfigMap")
	}
	if err := json.Unmarshal([]byte(cm.Data["mesh.json"]), &mesh); err != nil || mesh["unitHeader"] != "x-user-id" || mesh["stickyCookie"] == nil {
		t.Errorf("mesh.json %s: %v", cm.Data["mesh.json"], err)
	}
	if r.statefulSet.Spec.Template.Annotations["checksum/mesh"] == "" {
		t.Errorf("no checksum/mesh annotation: allotd reads the mesh settings at start-up only")
	}
	ep := r.monitors[0].Spec.Endpoints[0]
	if ep.Scheme == nil || *ep.Scheme != "https" || ep.TLSConfig == nil || ep.TLSConfig.ServerName == nil || *ep.TLSConfig.ServerName != "allotd.allot.svc" {
		t.Errorf("ServiceMonitor endpoint over TLS: %+v", ep)
	}
}

func volumesByName(r rendered) map[string]corev1.Volume {
	m := map[string]corev1.Volume{}
	for _, v := range r.statefulSet.Spec.Template.Spec.Volumes {
		m[v.Name] = v
	}
	return m
}

// TestBadValues: each bad value fails the install with an error naming
// the field, from the schema or, where one value is checked against
// another or against the release name, from the templates.
func TestBadValues(t *testing.T) {
	ch := loadChart(t)
	tokens := map[string]any{"tokens": []any{map[string]any{"name": "platform", "role": "admin", "token": "0123456789abcdef0123"}}}
	for _, tc := range []struct {
		name    string
		release string
		vals    string // YAML merged over a valid bolt install
		want    []string
	}{
		{name: "wrong type", vals: "replicas: \"3\"", want: []string{"/replicas", "got string, want integer"}},
		{name: "unknown top-level key", vals: "replica: 3", want: []string{"additional properties 'replica' not allowed"}},
		{name: "unknown nested key", vals: "image: {tagg: latest}", want: []string{"/image", "additional properties 'tagg' not allowed"}},
		{name: "replicas 3 with bolt", vals: "replicas: 3", want: []string{"/replicas", "maximum: got 3, want 1"}},
		{name: "etcd without endpoints", vals: "store: etcd", want: []string{"/etcd/endpoints", "minItems: got 0, want 1"}},
		{name: "etcd endpoint with a scheme", vals: "{store: etcd, etcd: {endpoints: ['https://etcd:2379']}}", want: []string{"/etcd/endpoints/0", "does not match pattern"}},
		{name: "etcd prefix without a trailing slash", vals: "{store: etcd, etcd: {endpoints: ['etcd:2379'], prefix: /allot}}", want: []string{"/etcd/prefix", "does not match pattern '/$'"}},
		{name: "negative port", vals: "admin: {port: -1}", want: []string{"/admin/port", "minimum: got -1, want 1"}},
		{name: "port too large", vals: "xds: {port: 70000}", want: []string{"/xds/port", "maximum: got 70,000, want 65,535"}},
		{name: "bad store enum", vals: "store: sqlite", want: []string{"/store", "value must be one of 'bolt', 'etcd'"}},
		{name: "bad log level", vals: "log: {level: verbose}", want: []string{"/log/level", "value must be one of"}},
		{name: "duration without unit", vals: "guardianInterval: \"10\"", want: []string{"/guardianInterval", "does not match pattern"}},
		{name: "no tokens", vals: "tokens: {tokens: []}", want: []string{"/tokens/tokens", "minItems: got 0, want 1"}},
		{name: "short token", vals: "tokens: {tokens: [{name: a, role: admin, token: short}]}", want: []string{"/tokens/tokens/0/token", "minLength: got 5, want 16"}},
		{name: "bad role", vals: "tokens: {tokens: [{name: a, role: root, token: 0123456789abcdef}]}", want: []string{"/tokens/tokens/0/role", "value must be one of"}},
		{name: "TLS without a Secret", vals: "tls: {enabled: true}", want: []string{"/tls/secretName", "minLength: got 0, want 1"}},
		{name: "mTLS without TLS", vals: "xdsMTLS: {enabled: true, caSecret: ca, identities: {proxies: [{identity: x}]}}", want: []string{"/tls/enabled", "value must be true"}},
		{name: "mTLS without a policy", vals: "{tls: {enabled: true, secretName: t}, xdsMTLS: {enabled: true, caSecret: ca}}", want: []string{"/xdsMTLS/identities/proxies", "minItems: got 0, want 1"}},
		{name: "bad digest", vals: "image: {digest: latest}", want: []string{"/image/digest", "does not match pattern"}},
		{name: "sticky cookie without keys", vals: "mesh: {stickyCookie: {name: s}}", want: []string{"/stickyKeys/existingSecret", "minLength: got 0, want 1"}},
		{name: "sticky keys without a cookie", vals: "stickyKeys: {existingSecret: k}", want: []string{"/mesh", "missing property 'stickyCookie'"}},
		{name: "zero maxStreams", vals: "xds: {maxStreams: 0}", want: []string{"/xds/maxStreams", "minimum: got 0, want 1"}},
		{name: "bad service type", vals: "admin: {service: {type: Ingress}}", want: []string{"/admin/service/type", "value must be one of"}},
		// Exposed beyond the cluster, the admin API carries bearer tokens: TLS or ClusterIP.
		{name: "admin NodePort without TLS", vals: "admin: {service: {type: NodePort}}", want: []string{"/admin/service/type", "value must be 'ClusterIP'", "/tls/enabled", "value must be true"}},
		{name: "admin LoadBalancer without TLS", vals: "admin: {service: {type: LoadBalancer, loadBalancerSourceRanges: [10.0.0.0/8]}}", want: []string{"/admin/service/type", "/tls/enabled"}},
		// Exposed beyond the cluster, xDS hands out the sticky keys and takes the outcomes guardrails act on: proxy certificates or ClusterIP.
		{name: "xds LoadBalancer without TLS", vals: "xds: {service: {type: LoadBalancer}}", want: []string{"/xds/service/type", "value must be 'ClusterIP'", "/tls/enabled", "/xdsMTLS/enabled"}},
		{name: "xds NodePort with TLS but no proxy certificates", vals: "{xds: {service: {type: NodePort}}, tls: {enabled: true, secretName: t}}", want: []string{"/xds/service/type", "/xdsMTLS/enabled", "value must be true"}},
		{name: "same port twice", vals: "xds: {port: 8080}", want: []string{"admin.port, xds.port and admin.grpc.port (when enabled) must differ"}},
		{name: "gRPC port on the xDS port", vals: "admin: {grpc: {enabled: true, port: 18000}}", want: []string{"must differ"}},
		{name: "release name too long", release: strings.Repeat("r", 47), want: []string{"at most 52", "fullnameOverride"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(tc.vals))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := vals["tokens"]; !ok {
				vals["tokens"] = tokens
			}
			name := release
			if tc.release != "" {
				name = tc.release
			}
			_, _, err = render(ch, name, vals)
			if err == nil {
				t.Fatal("rendered without error")
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			var pathErr *os.PathError
			if errors.As(err, &pathErr) {
				t.Errorf("not a values error: %v", err)
			}
		})
	}
}

// TestExposedServices: the Services go beyond ClusterIP with what they
// need (TLS for the admin API; TLS and proxy certificates for xDS), and
// an admin Service exposed with TLS leaves xDS on ClusterIP without proxy
// certificates free.
func TestExposedServices(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		name        string
		vals        string
		admin, xds  corev1.ServiceType
		notesWarned bool
	}{
		{name: "admin LoadBalancer with TLS", vals: "{admin: {service: {type: LoadBalancer, loadBalancerSourceRanges: [10.0.0.0/8]}}, tls: {enabled: true, secretName: t}}",
			admin: corev1.ServiceTypeLoadBalancer, xds: corev1.ServiceTypeClusterIP, notesWarned: true},
		{name: "both NodePort with proxy certificates", vals: "{admin: {service: {type: NodePort}}, xds: {service: {type: NodePort}}, tls: {enabled: true, secretName: t}, xdsMTLS: {enabled: true, caSecret: ca, identities: {proxies: [{identity: x}]}}}",
			admin: corev1.ServiceTypeNodePort, xds: corev1.ServiceTypeNodePort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(tc.vals))
			if err != nil {
				t.Fatal(err)
			}
			vals["tokens"] = map[string]any{"tokens": []any{map[string]any{"name": "platform", "role": "admin", "token": "0123456789abcdef0123"}}}
			manifest, notes, err := render(ch, release, vals)
			if err != nil {
				t.Fatal(err)
			}
			r := decode(t, manifest)
			if got := r.services[release+"-admin"].Spec.Type; got != tc.admin {
				t.Errorf("admin Service type %q, want %q", got, tc.admin)
			}
			if got := r.services[release+"-xds"].Spec.Type; got != tc.xds {
				t.Errorf("xDS Service type %q, want %q", got, tc.xds)
			}
			if warned := strings.Contains(notes, "WARNING: xDS requires no proxy certificate"); warned != tc.notesWarned {
				t.Errorf("NOTES warn of xDS without proxy certificates: %v, want %v\n%s", warned, tc.notesWarned, notes)
			}
		})
	}
}

// TestVersion: the chart's appVersion, and so its default image tag, is
// the repository's VERSION, the tag `make images` gives the images.
func TestVersion(t *testing.T) {
	v, err := os.ReadFile(filepath.Join("..", "..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loadChart(t).Metadata.AppVersion, strings.TrimSpace(string(v)); got != want {
		t.Errorf("Chart.yaml appVersion %q, want VERSION's %q", got, want)
	}
}
