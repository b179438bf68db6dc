package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// write creates the files of tree (path → content) below a new directory.
func write(t *testing.T, tree map[string]string) (root string, files []string) {
	t.Helper()
	root = t.TempDir()
	for name, content := range tree {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
	}
	return root, files
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		tree map[string]string
		want []string
	}{
		{"conflict markers in Markdown and Go", map[string]string{
			"README.md": "# A\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> h-console\n",
			"x.go":      "package x\n<<<<<<< HEAD\n",
		}, []string{
			`README.md:2: merge-conflict marker "<<<<<<< HEAD"`,
			`README.md:4: merge-conflict marker "======="`,
			`README.md:6: merge-conflict marker ">>>>>>> h-console"`,
			`x.go:2: merge-conflict marker "<<<<<<< HEAD"`,
		}},
		{"a setext underline alone is a heading", map[string]string{
			"README.md": "Title\n=======\n\ntext\n",
		}, nil},
		{"links", map[string]string{
			"README.md": "# Top\n\n## Choosing an artifact: Wasm or native\n\n" +
				"[ok](docs/a.md) [ok](docs/a.md#the-section) [ok](#choosing-an-artifact-wasm-or-native) [ok](https://example.org/x)\n" +
				"![img](docs/pic.png) [dir](docs/)\n" +
				"[gone](docs/missing.md) [bad anchor](docs/a.md#nowhere) ![gone](pic.png)\n" +
				"`[code](nowhere.md)`\n" +
				"```\n[fenced](nowhere.md)\n```\n" +
				"[ref]: other/missing.md\n",
			"docs/a.md":    "# Doc\n\n## The section\n\n[up](../README.md#top) [up](../README.md#bottom)\n",
			"docs/pic.png": "\x89PNG\x00",
		}, []string{
			`README.md:7: link "docs/missing.md": no such file docs/missing.md`,
			`README.md:7: link "docs/a.md#nowhere": docs/a.md has no heading #nowhere`,
			`README.md:7: link "pic.png": no such file pic.png`,
			`README.md:12: link "other/missing.md": no such file other/missing.md`,
			`docs/a.md:5: link "../README.md#bottom": README.md has no heading #bottom`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, files := write(t, tt.tree)
			got := check(root, files)
			want := append([]string(nil), tt.want...)
			sort.Strings(want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("check:\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestMakeLintRefusesConflictMarker runs the Makefile's lint-tree target
// (which `make lint` runs first) on a git repository whose tracked README
// has a committed conflict marker: make must fail and name the line.
func TestMakeLintRefusesConflictMarker(t *testing.T) {
	for _, tool := range []string{"git", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	root, _ := write(t, map[string]string{"README.md": "# A\n<<<<<<< HEAD\na\n=======\nb\n>>>>>>> other\n"})
	for _, args := range [][]string{{"init", "-q"}, {"add", "README.md"}} {
		if out, err := exec.Command("git", append([]string{"-C", root}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-s", "-C", repo, "lint-tree", "TREE="+root).CombinedOutput()
	if err == nil {
		t.Fatalf("make lint-tree passed a tree with a conflict marker:\n%s", out)
	}
	if !strings.Contains(string(out), `README.md:2: merge-conflict marker "<<<<<<< HEAD"`) {
		t.Errorf("make lint-tree does not name the marker:\n%s", out)
	}
	// The same repository without the marker passes.
	if err := os.WriteFile(filepath.Join(root, "README.md"), []byte("# A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("make", "-s", "-C", repo, "lint-tree", "TREE="+root).CombinedOutput(); err != nil {
		t.Fatalf("make lint-tree on a clean tree: %v\n%s", err, out)
	}
}
