package helm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestAllotdRunsRenderedPod runs allotd as the rendered pod would, on this
// machine: the command line as rendered, with the listen addresses moved
// to free loopback ports and every mount path under a temporary
// directory, which holds the files of the Secrets and ConfigMaps the chart
// renders. allotd must start (it reads and checks the tokens file and the
// mesh settings first), answer the readiness probe's path, and accept a
// token of the values on its admin API.
func TestAllotdRunsRenderedPod(t *testing.T) {
	vals := ciValues(t, "bolt-default")
	vals["mesh"] = map[string]any{"unitHeader": "x-user-id", "attributes": []any{map[string]any{"name": "country", "header": "x-country"}}}
	manifest, _, err := render(loadChart(t), release, vals)
	if err != nil {
		t.Fatal(err)
	}
	r := decode(t, manifest)
	c := container(t, r)
	root := t.TempDir()
	volumes := volumesByName(r)
	for _, m := range c.VolumeMounts {
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		v, ok := volumes[m.Name]
		if !ok {
			continue // the PVC: an empty directory
		}
		writeVolume(t, r, v, dir)
	}
	var args []string
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		switch {
		case strings.HasSuffix(name, "-addr"):
			value = "127.0.0.1:0"
		case strings.HasPrefix(value, "/") && name != "wasm-path" && name != "native-path":
			value = filepath.Join(root, value)
		}
		args = append(args, "-"+name+"="+value)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, allotdBin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	admin, log := servingAddr(stderr)
	if admin == "" {
		t.Fatalf("allotd did not serve (-%s):\n%s", strings.Join(args, " -"), log)
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, "http://"+admin+"/readyz", "")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body := get(t, "http://"+admin+"/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	token := "0123456789abcdef0123456789abcdef0123456789abcdef" // ci/bolt-default.yaml's platform token
	if code, body := get(t, "http://"+admin+"/v1/whoami", token); code != http.StatusOK || !strings.Contains(body, "platform") {
		t.Errorf("/v1/whoami with the values' admin token: %d %s", code, body)
	}
}

// writeVolume writes the files a Secret or ConfigMap volume of the
// rendered chart holds into dir.
func writeVolume(t *testing.T, r rendered, v corev1.Volume, dir string) {
	t.Helper()
	files := map[string][]byte{}
	var items []corev1.KeyToPath
	switch {
	case v.Secret != nil:
		s, ok := r.secrets[v.Secret.SecretName]
		if !ok {
			t.Fatalf("volume %s: Secret %s is not the chart's", v.Name, v.Secret.SecretName)
		}
		files, items = s.Data, v.Secret.Items
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

// servingAddr reads allotd's JSON log until its "allotd serving" line and
// returns the admin address, or "" and the log when allotd exits first.
func servingAddr(stderr io.Reader) (admin, log string) {
	var b strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
		var line struct {
			Msg       string `json:"msg"`
			AdminAddr string `json:"admin_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "allotd serving" {
			return line.AdminAddr, b.String()
		}
	}
	return "", b.String()
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Sprint(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
