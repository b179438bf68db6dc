package helm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
)

// adminToken is the admin token of ci/bolt-default.yaml, and of the
// tokens file the tests write for the sets whose tokens Secret exists.
const adminToken = "0123456789abcdef0123456789abcdef0123456789abcdef"

// TestAllotdRunsRenderedPod runs allotd as each rendered bbolt pod would,
// on this machine: the command line as rendered, with the listen addresses
// moved to free loopback ports and every mount path under a temporary
// directory, which holds the files of the Secrets and ConfigMaps the chart
// renders and, for the Secrets a values set names as existing, files made
// here in the form the chart documents (a kubernetes.io/tls Secret's
// tls.crt and tls.key, ...). allotd must start — it reads and checks the
// tokens file, the mesh settings, the sticky keys, the certificates and
// the identity policy first —, serve TLS and require proxy certificates
// exactly when the values say so, answer the probes' paths with the
// probes' scheme, and accept the admin token. etcd-replicas runs in
// TestAllotdRunsRenderedReplicas.
func TestAllotdRunsRenderedPod(t *testing.T) {
	ca := mtlstest.NewCA(t, "allot-chart-test")
	server := ca.Server(t)
	tokensFile := fmt.Sprintf(`{"tokens": [{"name": "platform", "role": "admin", "token": %q}]}`, adminToken)
	stickyKeys := fmt.Sprintf(`{"keys": [{"id": "k1", "secret": %q}]}`, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	existing := map[string]map[string][]byte{
		"allot-tokens":      {"tokens.json": []byte(tokensFile)},
		"allotd-tls":        {"tls.crt": server.CertPEM, "tls.key": server.KeyPEM, "ca.crt": ca.PEM},
		"mesh-proxy-ca":     {"ca.crt": ca.PEM},
		"allot-sticky-keys": {"keys.json": []byte(stickyKeys)},
	}
	for _, tc := range []struct {
		set             string
		mesh            map[string]any // merged into the set's values when set
		tls, clientCert bool
	}{
		{set: "bolt-default", mesh: map[string]any{"unitHeader": "x-user-id", "attributes": []any{map[string]any{"name": "country", "header": "x-country"}}}},
		{set: "bolt-tls-mtls", tls: true, clientCert: true},
		{set: "existing-secrets", tls: true},
		{set: "networkpolicy-servicemonitor"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			vals := ciValues(t, tc.set)
			if tc.mesh != nil {
				vals["mesh"] = tc.mesh
			}
			manifest, _, err := render(loadChart(t), release, vals)
			if err != nil {
				t.Fatal(err)
			}
			r := decode(t, manifest)
			serving := runRendered(t, r, existing, nil, nil)
			if serving.TLS != tc.tls || serving.XDSClientCerts != tc.clientCert {
				t.Errorf("allotd serves tls=%v xds_client_certs=%v, want %v and %v", serving.TLS, serving.XDSClientCerts, tc.tls, tc.clientCert)
			}
			c := container(t, r)
			scheme := strings.ToLower(string(c.ReadinessProbe.HTTPGet.Scheme))
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
			base := scheme + "://" + serving.AdminAddr
			waitOK(t, client, base+c.ReadinessProbe.HTTPGet.Path)
			if code, body := get(t, client, base+c.LivenessProbe.HTTPGet.Path, ""); code != http.StatusOK {
				t.Errorf("liveness probe %s: %d %s", c.LivenessProbe.HTTPGet.Path, code, body)
			}
			if code, body := get(t, client, base+"/v1/whoami", adminToken); code != http.StatusOK || !strings.Contains(body, "platform") {
				t.Errorf("/v1/whoami with the admin token: %d %s", code, body)
			}
		})
	}
}

// TestAllotdRunsRenderedReplicas runs two replicas of the etcd-replicas
// values set as rendered, against one etcd member on loopback that serves
// TLS and requires a client certificate, as the set's Secret
// allotd-etcd-client provides (ca.crt, tls.crt, tls.key); -store points at
// that member instead of the set's endpoints, and $(POD_NAME) is each
// pod's name, as the kubelet expands it. Both replicas must become ready
// and see each other in the mesh registry, under their pod names.
func TestAllotdRunsRenderedReplicas(t *testing.T) {
	ca := mtlstest.NewCA(t, "allot-chart-test")
	etcdServer, allotdClient := ca.Server(t), ca.Client(t, "allotd")
	endpoint := startEtcd(t, ca, etcdServer)
	manifest, _, err := render(loadChart(t), release, ciValues(t, "etcd-replicas"))
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, manifest)
	existing := map[string]map[string][]byte{
		"allot-tokens":       {"tokens.json": fmt.Appendf(nil, `{"tokens": [{"name": "platform", "role": "admin", "token": %q}]}`, adminToken)},
		"allotd-etcd-client": {"ca.crt": ca.PEM, "tls.crt": allotdClient.CertPEM, "tls.key": allotdClient.KeyPEM},
	}
	client := &http.Client{}
	var admins []string
	for i := range 2 {
		pod := fmt.Sprintf("%s-%d", release, i)
		s := runRendered(t, r, existing, map[string]string{"POD_NAME": pod}, map[string]string{"store": "etcd://" + endpoint})
		admins = append(admins, "http://"+s.AdminAddr)
	}
	for _, a := range admins {
		waitOK(t, client, a+"/readyz")
		if code, body := get(t, client, a+"/v1/whoami", adminToken); code != http.StatusOK {
			t.Errorf("%s/v1/whoami: %d %s", a, code, body)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, metrics := get(t, client, admins[0]+"/metrics", "")
		if strings.Contains(metrics, "\nallot_mesh_replicas 2\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica 0 never saw 2 live replicas:\n%s", grepLines(metrics, "allot_mesh_"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get(t, client, admins[0]+"/v1/rollout", adminToken); code != http.StatusOK {
		t.Errorf("/v1/rollout: %d %s", code, body)
	}
}

// startEtcd starts one etcd member on loopback serving TLS with server's
// certificate and requiring client certificates signed by ca; it returns
// the client endpoint, host:port, once the member is healthy.
func startEtcd(t *testing.T, ca *mtlstest.CA, server mtlstest.Leaf) string {
	t.Helper()
	dir := t.TempDir()
	cert, key := server.Write(t, dir, "etcd")
	caFile := filepath.Join(dir, "ca.pem")
	mtlstest.WriteFile(t, caFile, ca.PEM)
	clientPort, peerPort := freePort(t), freePort(t)
	endpoint := fmt.Sprintf("127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	ctx, cancel := context.WithCancel(t.Context())
	cmd := exec.CommandContext(ctx, etcdBin, "--name", "m0", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", "https://"+endpoint, "--advertise-client-urls", "https://"+endpoint,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "m0="+peer,
		"--cert-file", cert, "--key-file", key, "--trusted-ca-file", caFile, "--client-cert-auth",
		"--log-level", "warn")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	probe := ca.Client(t, "probe")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{probe.TLS}}}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, _ := get(t, client, "https://"+endpoint+"/health", ""); code == http.StatusOK {
			return endpoint
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd not healthy within 20s:\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitOK polls url until it answers 200, for at most 10 seconds.
func waitOK(t *testing.T, client *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, client, url, "")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %s", url, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// grepLines is the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}

// serving is what allotd's "allotd serving" log line says.
type serving struct {
	Msg            string `json:"msg"`
	AdminAddr      string `json:"admin_addr"`
	TLS            bool   `json:"tls"`
	XDSClientCerts bool   `json:"xds_client_certs"`
}

// runRendered starts allotd with the rendered pod's arguments and files
// (existing: the files of the Secrets the chart does not render, by
// name; env: the values of the variables Kubernetes expands in the args,
// $(NAME); values: flags whose value the test replaces, such as -store),
// stops it at the end of the test, and returns its serving line.
func runRendered(t *testing.T, r rendered, existing map[string]map[string][]byte, env, values map[string]string) serving {
	t.Helper()
	c := container(t, r)
	root := t.TempDir()
	volumes := volumesByName(r)
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if v, ok := volumes[m.Name]; ok { // else the PVC: an empty directory
			writeVolume(t, r, v, dir, existing)
		}
	}
	var args []string
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if v, ok := values[name]; ok {
			value = v
		}
		switch {
		case strings.HasSuffix(name, "-addr"):
			value = "127.0.0.1:0"
		case slices.Contains(fileFlags, name):
			value = filepath.Join(root, value)
		}
		args = append(args, "-"+name+"="+value)
	}
	// allotd runs for the whole test, however long a loaded machine makes
	// it: t.Context() is canceled, and allotd interrupted, just before the
	// cleanups run; only the wait for its serving line has a deadline.
	cmd := exec.CommandContext(t.Context(), allotdBin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Wait() })
	type started struct {
		s   serving
		log string
	}
	done := make(chan started, 1)
	go func() {
		s, log := servingLine(stderr)
		done <- started{s, log}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	var st started
	select {
	case st = <-done:
	case <-time.After(servingWithin):
		_ = cmd.Process.Kill()
		st = <-done
		t.Fatalf("allotd did not serve within %v (%s):\n%s", servingWithin, strings.Join(args, " "), st.log)
	}
	if st.s.AdminAddr == "" {
		t.Fatalf("allotd did not serve (%s):\n%s", strings.Join(args, " "), st.log)
	}
	return st.s
}

// servingWithin is how long allotd may take from its start to its serving
// line.
const servingWithin = time.Minute

// writeVolume writes the files a Secret or ConfigMap volume of the
// rendered chart holds into dir.
func writeVolume(t *testing.T, r rendered, v corev1.Volume, dir string, existing map[string]map[string][]byte) {
	t.Helper()
	files := map[string][]byte{}
	var items []corev1.KeyToPath
	switch {
	case v.Secret != nil:
		if s, ok := r.secrets[v.Secret.SecretName]; ok {
			files = s.Data
		} else if files, ok = existing[v.Secret.SecretName]; !ok {
			t.Fatalf("volume %s: Secret %s is neither the chart's nor a known existing one", v.Name, v.Secret.SecretName)
		}
		items = v.Secret.Items
	case v.ConfigMap != nil:
		cm := r.configMaps[v.ConfigMap.Name]
		for k, d := range cm.Data {
			files[k] = []byte(d)
		}
		items = v.ConfigMap.Items
	default:
		t.Fatalf("volume %s: neither Secret nor ConfigMap", v.Name)
	}
	if len(items) > 0 {
		picked := map[string][]byte{}
		for _, it := range items {
			picked[it.Path] = files[it.Key]
		}
		files = picked
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// servingLine reads allotd's JSON log until its "allotd serving" line and
// returns it, or an empty line and the log when allotd exits first.
func servingLine(stderr io.Reader) (s serving, log string) {
	var b strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
		var line serving
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "allotd serving" {
			return line, b.String()
		}
	}
	return serving{}, b.String()
}

// get GETs url through client with token as the bearer token, if any.
func get(t *testing.T, client *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Sprint(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
