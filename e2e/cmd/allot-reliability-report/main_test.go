package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunLabelsArtifacts: rows of one check run against both filter builds
// say which build each is, and a control-plane row says it is neither.
func TestRunLabelsArtifacts(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	lines := `{"section":"load","test":"TestReliabilitySoak/wasm","what":"soak","result":"ok","lost":0,"command":"c","artifact":"wasm"}
{"section":"load","test":"TestReliabilitySoak/native","what":"soak","result":"ok","lost":0,"command":"c","artifact":"native"}
{"section":"faults","test":"TestReliabilityEtcdFaults","what":"etcd | leader","result":"ok","lost":1,"command":"c"}
`
	if err := os.WriteFile(in, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.md")
	if err := run(in, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"| soak | Wasm | ok | 0 | `c` |",
		"| soak | native | ok | 0 | `c` |",
		"| etcd \\| leader | – | ok | 1 | `c` |",
		"**Data lost: 1**",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}
