package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// OFREPClients are the OpenFeature OFREP client programs of e2e/ofrep
// (OpenFeature's published providers, installed by `make ofrep-clients`)
// and the interpreters that run them.
type OFREPClients struct {
	// Dir is <repo>/e2e/ofrep: evaluate.mjs, evaluate.py, web/ and the
	// npm packages in node_modules/.
	Dir string
	// Node is node from PATH; Python is <repo>/.venv/bin/python, which has
	// PyPI's provider.
	Node, Python string
}

// The stamps `make ofrep-clients` writes once an install succeeded.
const (
	ofrepNodeStamp   = "node_modules/.installed"
	ofrepPythonStamp = ".venv/.ofrep-clients"
)

// FindOFREPClients returns the client programs of e2e/ofrep, or an error
// naming `make ofrep-clients` when their packages are not installed.
func FindOFREPClients() (OFREPClients, error) {
	root, err := RepoRoot()
	if err != nil {
		return OFREPClients{}, err
	}
	c := OFREPClients{Dir: filepath.Join(root, "e2e", "ofrep"), Python: filepath.Join(root, ".venv", "bin", "python")}
	const install = "run `make ofrep-clients` (or `make test`, which installs them)"
	for _, stamp := range []string{filepath.Join(c.Dir, ofrepNodeStamp), filepath.Join(root, ofrepPythonStamp)} {
		if _, err := os.Stat(stamp); err != nil {
			return OFREPClients{}, fmt.Errorf("the OFREP clients' packages are not installed (%w)\n%s", err, install)
		}
	}
	if c.Node, err = exec.LookPath("node"); err != nil {
		return OFREPClients{}, fmt.Errorf("no node on PATH for the OFREP clients: %w", err)
	}
	return c, nil
}

// MustOFREPClients is FindOFREPClients that fails the test — never skips
// it: CI must not pass by running no client.
func MustOFREPClients(t testing.TB) OFREPClients {
	t.Helper()
	return must[OFREPClients](t)(FindOFREPClients())
}

// OFREPEvaluation is one flag as a client program's provider resolved it
// (one line of its output).
type OFREPEvaluation struct {
	Flag  string `json:"flag"`
	Value any    `json:"value"`
	// Variant, Reason and ErrorCode are "" when the provider gave none.
	Variant   string `json:"variant"`
	Reason    string `json:"reason"`
	ErrorCode string `json:"errorCode"`
}

// The client programs Evaluate runs.
const (
	OFREPNode   = "node"   // evaluate.mjs: @openfeature/ofrep-provider in @openfeature/server-sdk
	OFREPPython = "python" // evaluate.py: openfeature-provider-ofrep in openfeature-sdk
)

// Evaluate runs the client program of lang (OFREPNode or OFREPPython)
// against OFREP at baseURL with evalCtx as the evaluation context, and
// returns its provider's resolution of each flag ("key" or "key:type",
// type one of string, boolean, integer, float, object), in order.
func (c OFREPClients) Evaluate(ctx context.Context, lang, baseURL string, evalCtx map[string]any, flags ...string) ([]OFREPEvaluation, error) {
	js, err := json.Marshal(evalCtx)
	if err != nil {
		return nil, fmt.Errorf("evaluation context: %w", err)
	}
	var cmd *exec.Cmd
	switch lang {
	case OFREPNode:
		cmd = exec.CommandContext(ctx, c.Node, append([]string{filepath.Join(c.Dir, "evaluate.mjs"), baseURL, string(js)}, flags...)...)
	case OFREPPython:
		cmd = exec.CommandContext(ctx, c.Python, append([]string{filepath.Join(c.Dir, "evaluate.py"), baseURL, string(js)}, flags...)...)
	default:
		return nil, fmt.Errorf("OFREP client %q: want %q or %q", lang, OFREPNode, OFREPPython)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s client: %w\nstderr:\n%s", lang, err, stderr.Bytes())
	}
	var out []OFREPEvaluation
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var e OFREPEvaluation
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s client printed %q: %w", lang, sc.Text(), err)
		}
		out = append(out, e)
	}
	if len(out) != len(flags) {
		return nil, fmt.Errorf("%s client resolved %d flags of %d: %+v\nstderr:\n%s", lang, len(out), len(flags), out, stderr.Bytes())
	}
	return out, nil
}
