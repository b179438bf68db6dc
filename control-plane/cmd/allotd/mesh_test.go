package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// meshCases are -mesh files allotd must refuse at start-up, with the field
// paths its error must name.
var meshCases = []struct {
	name, mesh string
	want       []string
}{
	{"uppercase unit header", `{"unitHeader": "X-User-Id"}`, []string{"unitHeader"}},
	{"every problem", `{"version": "v1", "experiments": [{"key": "k"}], "versionHeader": "x-experiment-v",
		"attributes": [{"name": "a", "header": "x-a"}, {"name": "a", "cookie": "c"}, {"name": "b"}]}`,
		[]string{"version:", "experiments:", "versionHeader:", "attributes[1].name:", "attributes[2]:"}},
	{"wrong type", `{"cacheSize": "big"}`, []string{"cacheSize"}},
	{"sticky cookie without -sticky-keys", `{"stickyCookie": {"name": "sb"}}`, []string{"-sticky-keys is required"}},
	{"keys in the mesh settings", `{"stickyCookie": {"name": "sb", "keys": [{"id": "k", "secret": "` + strings.Repeat("A", 44) + `"}]}}`,
		[]string{"stickyCookie.keys: come from allotd -sticky-keys"}},
	{"bad cookie settings", `{"stickyCookie": {"name": "a b", "sameSite": "lax", "path": "x"}}`,
		[]string{"stickyCookie.name:", "stickyCookie.sameSite:", "stickyCookie.path:"}},
}

// TestMainStickyKeys: -sticky-keys is read at start-up, every problem
// named; it goes with a mesh that sets stickyCookie, and only with one.
func TestMainStickyKeys(t *testing.T) {
	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 32))
	for _, tc := range []struct {
		name, mesh, keys string
		want             []string // nil: accepted
	}{
		{"good", `{"stickyCookie": {"name": "sb"}}`, `{"keys": [{"id": "k2", "secret": "` + secret + `"}, {"id": "k1", "secret": "` + secret + `"}]}`, nil},
		{"every problem", `{"stickyCookie": {"name": "sb"}}`, `{"keys": [{"id": "k.1", "secret": "c2hvcnQ="}, {"secret": "` + secret + `"}]}`,
			[]string{"keys[0].id:", "keys[0].secret: 5 bytes, at least 32", "keys[1].id: is required"}},
		{"no keys", `{"stickyCookie": {"name": "sb"}}`, `{"keys": []}`, []string{"keys: at least one key is required"}},
		{"unknown field", `{"stickyCookie": {"name": "sb"}}`, `{"keys": [{"id": "k", "secret": "` + secret + `", "expires": 1}]}`, []string{"unknown field \"expires\""}},
		{"no sticky cookie", `{}`, `{"keys": [{"id": "k", "secret": "` + secret + `"}]}`, []string{"set no stickyCookie"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			keys := filepath.Join(dir, "keys.json")
			if err := os.WriteFile(keys, []byte(tc.keys), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := Main(ctx, append(writeStartFiles(t, dir, tc.mesh), "-sticky-keys", keys), io.Discard, io.Discard)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Main: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Main accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// writeStartFiles writes a tokens file and a mesh file and returns the
// allotd arguments that use them, on loopback ports and a db in dir.
func writeStartFiles(t *testing.T, dir, mesh string) []string {
	t.Helper()
	tokens := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"tokens":[{"name":"root","role":"admin","token":"`+testToken+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	meshFile := filepath.Join(dir, "mesh.json")
	if err := os.WriteFile(meshFile, []byte(mesh), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"-tokens", tokens, "-mesh", meshFile, "-db", filepath.Join(dir, "allot.db"),
		"-admin-addr", "127.0.0.1:0", "-xds-addr", "127.0.0.1:0"}
}

// TestMainRefusesBadMesh: Main decodes -mesh with the filter's decoder and
// returns every problem with its field path, before opening the store.
func TestMainRefusesBadMesh(t *testing.T) {
	for _, tc := range meshCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var stderr bytes.Buffer
			err := Main(context.Background(), writeStartFiles(t, dir, tc.mesh), io.Discard, &stderr)
			if err == nil {
				t.Fatal("Main accepted the mesh settings")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "allot.db")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the store was opened: %v", err)
			}
		})
	}
}

// TestMainAcceptsMesh: the demo's mesh file passes the start-up check (Main
// then serves until its context ends).
func TestMainAcceptsMesh(t *testing.T) {
	mesh, err := os.ReadFile("../../../envoy-configs/mesh.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // serve nothing: Run returns at once once started
	var stderr bytes.Buffer
	if err := Main(ctx, writeStartFiles(t, t.TempDir(), string(mesh)), io.Discard, &stderr); err != nil {
		t.Fatalf("Main: %v\n%s", err, stderr.String())
	}
}

// TestAllotdExitsOnBadMesh builds the allotd binary and checks that it
// exits with status 1 naming the offending field.
func TestAllotdExitsOnBadMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("builds allotd")
	}
	bin := filepath.Join(t.TempDir(), "allotd")
	build := exec.Command("go", "build", "-o", bin, "github.com/allotmesh/allot/control-plane/cmd/allotd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, tc := range meshCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, writeStartFiles(t, t.TempDir(), tc.mesh)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("allotd: %v, want exit status 1\n%s", err, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not name %s", stderr.String(), w)
				}
			}
		})
	}
}
