package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/server"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/translate"
)

// startAllotd runs allotd's server in-process on a fresh bbolt file with
// mesh as its -mesh settings and returns its admin API's URL.
func startAllotd(t *testing.T, mesh translate.Mesh) string {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "allot.db"))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := admin.ParseTokens([]byte(onlineTokens))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan server.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, db, server.Config{
			AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", Tokens: tokens, Mesh: mesh,
			Ready: func(a server.Addrs) { ready <- a },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
		db.Close()
	})
	select {
	case a := <-ready:
		return "http://" + a.Admin.String()
	case err := <-done:
		done <- nil
		t.Fatalf("server.Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("allotd not ready after 10s")
	}
	return ""
}

// TestEvalAcceptsWhatApplyAccepts feeds every file of testdata/corpus/files
// to "allotctl eval" (offline, with the corpus's mesh settings) and to
// "allotctl apply" against a real allotd (in-process, on its own bbolt
// file, with the same mesh settings): both must accept or both reject each
// file, and as its name says (ok-* accepted, bad-* rejected).
func TestEvalAcceptsWhatApplyAccepts(t *testing.T) {
	meshFile, err := filepath.Abs("testdata/corpus/mesh.json")
	if err != nil {
		t.Fatal(err)
	}
	meshJSON, err := os.ReadFile(meshFile)
	if err != nil {
		t.Fatal(err)
	}
	meshSettings, err := translate.ParseMesh(meshJSON)
	if err != nil {
		t.Fatal(err)
	}
	mesh := translate.Mesh{WasmPath: "/allot.wasm", Filter: meshSettings}
	files, err := filepath.Glob("testdata/corpus/files/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	t.Setenv("ALLOT_SERVER", "")
	t.Setenv("ALLOT_TOKEN", "")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := Run(context.Background(), args, strings.NewReader(""), &out, &out)
		return out.String(), err
	}
	var accepted, rejected []string
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			wantOK := strings.HasPrefix(name, "ok-")
			if !wantOK && !strings.HasPrefix(name, "bad-") {
				t.Fatalf("corpus file %s: name it ok-* or bad-*", name)
			}
			evalOut, evalErr := run("eval", "-f", file, "--mesh", meshFile, "--attributes", `{"id":"u1","country":"US"}`)
			url := startAllotd(t, mesh)
			applyOut, applyErr := run("apply", "-f", file, "--server", url, "--token", "admin-token-0123456789")
			if (evalErr == nil) != (applyErr == nil) {
				t.Fatalf("eval and apply disagree:\neval:  %v\n%s\napply: %v\n%s", evalErr, evalOut, applyErr, applyOut)
			}
			if (evalErr == nil) != wantOK {
				t.Fatalf("both %s it, want the opposite:\neval:  %v\n%s\napply: %v\n%s",
					map[bool]string{true: "accept", false: "reject"}[evalErr == nil], evalErr, evalOut, applyErr, applyOut)
			}
			if wantOK {
				accepted = append(accepted, name)
			} else {
				rejected = append(rejected, name)
			}
			t.Logf("eval: %v\napply: %v", evalErr, applyErr)
		})
	}
	t.Logf("%d files: %d accepted by both (%s), %d rejected by both (%s)",
		len(files), len(accepted), strings.Join(accepted, " "), len(rejected), strings.Join(rejected, " "))
}
