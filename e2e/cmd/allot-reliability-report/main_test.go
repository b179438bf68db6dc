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
		"- soak — Wasm; result: ok; lost: 0; reproduce: `c`\n",
		"- soak — native; result: ok; lost: 0; reproduce: `c`\n",
		"- etcd | leader; result: ok; lost: 1; reproduce: `c`\n",
		"**Data lost: 1**",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

// TestWrap: a long record is wrapped within the width, its command kept
// on one line, and no word is lost.
func TestWrap(t *testing.T) {
	r := record{What: strings.Repeat("word ", 60), Result: strings.Repeat("figure ", 50), Lost: 0,
		Command: "go test -tags 'e2e reliability' -count=1 -run '^TestReliabilitySoak$' ./e2e/"}
	got := item(r)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) < 4 {
		t.Fatalf("%d lines, want the record wrapped:\n%s", len(lines), got)
	}
	for i, l := range lines {
		if len(l) > width {
			t.Errorf("line %d is %d characters, want at most %d", i+1, len(l), width)
		}
		if i > 0 && !strings.HasPrefix(l, "  ") {
			t.Errorf("line %d is not indented under the item: %q", i+1, l)
		}
	}
	if !strings.Contains(got, "`"+r.Command+"`") {
		t.Errorf("the command is split across lines:\n%s", got)
	}
	if strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields("- "+r.What+"; result: "+r.Result+"; lost: 0; reproduce: `"+r.Command+"`"), " ") {
		t.Errorf("words lost or changed:\n%s", got)
	}
}
