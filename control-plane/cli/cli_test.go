package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestEvalGolden runs each testdata/eval/<case>/args (the whole command line,
// whitespace-separated, run inside the case directory) and compares stdout,
// stderr and the returned error byte for byte with <case>/want.golden.
// Rewrite the golden files with: go test ./control-plane/cli -update
func TestEvalGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/eval/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			abs, err := filepath.Abs(dir)
			if err != nil {
				t.Fatal(err)
			}
			args, err := os.ReadFile(filepath.Join(abs, "args"))
			if err != nil {
				t.Fatal(err)
			}
			t.Chdir(abs)
			var stdout, stderr bytes.Buffer
			runErr := Run(context.Background(), strings.Fields(string(args)), strings.NewReader(""), &stdout, &stderr)
			got := golden(stdout.String(), stderr.String(), runErr)
			path := filepath.Join(abs, "want.golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s (run with -update to accept):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
			}
		})
	}
}

func golden(stdout, stderr string, err error) string {
	var sb strings.Builder
	for _, s := range []struct{ name, text string }{{"stdout", stdout}, {"stderr", stderr}} {
		if s.text != "" {
			sb.WriteString("-- " + s.name + " --\n" + s.text)
			if !strings.HasSuffix(s.text, "\n") {
				sb.WriteString("\n")
			}
		}
	}
	if err != nil {
		sb.WriteString("-- error --\n" + err.Error() + "\n")
	}
	return sb.String()
}

func TestRunErrors(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		usage bool
	}{
		{"no args", nil, true},
		{"unknown subcommand", []string{"frobnicate"}, true},
		{"bad flag", []string{"eval", "--nope"}, true},
		{"missing attributes", []string{"eval", "-f", "x.json"}, true},
		{"missing file", []string{"eval", "-f", "testdata/does-not-exist.json", "--attributes", "{}"}, false},
		{"bad attributes", []string{"eval", "-f", "testdata/eval/single/checkout.json", "--attributes", "[1]"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := Run(context.Background(), tc.args, strings.NewReader(""), &out, &errOut)
			if err == nil {
				t.Fatal("Run succeeded")
			}
			if errors.Is(err, ErrUsage) != tc.usage {
				t.Errorf("errors.Is(%v, ErrUsage) = %v, want %v", err, !tc.usage, tc.usage)
			}
		})
	}
}

func TestEvalStdin(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), []string{"eval", "-f", "testdata/eval/single/checkout.json", "--attributes-file", "-"},
		strings.NewReader(`{"id":"a"}`+"\n"+`{"id":"b"}`+"\n"), &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 2 {
		t.Errorf("got %d lines, want 2:\n%s", n, out.String())
	}
}
