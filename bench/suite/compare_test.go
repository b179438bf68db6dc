package suite

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareVariants: a comparison runs A and each named Allot variant
// twice, next to each other, the copy on the base build; variants that are
// not Allot's are never compared.
func TestCompareVariants(t *testing.T) {
	vs, err := compareVariants("")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	if got := strings.Join(ids, " "); got != "A G G-base H H-base I I-base J J-base" {
		t.Errorf("variants %q", got)
	}
	p := &paths{allotWasm: "/tree/allot.wasm", baseWasm: "/base/allot.wasm", minWasm: "/x/min.wasm"}
	for _, v := range vs[1:3] {
		f, err := v.filters(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		want, other := "/tree/allot.wasm", "/base/allot.wasm"
		if strings.HasSuffix(v.ID, baseSuffix) {
			want, other = other, want
		}
		if !strings.Contains(string(b), want) || strings.Contains(string(b), other) {
			t.Errorf("%s's filter does not load %s alone: %s", v.ID, want, b)
		}
	}
	if p.allotWasm != "/tree/allot.wasm" {
		t.Errorf("the base variant changed the shared paths: %+v", p)
	}
	if vs, err := compareVariants("EJ"); err != nil || len(vs) != 3 || vs[1].ID != "J" || vs[2].ID != "J-base" {
		t.Errorf(`compareVariants("EJ") = %v, %v; want A J J-base`, vs, err)
	}
	if _, err := compareVariants("BDE"); err == nil || !strings.Contains(err.Error(), "names none of Allot's variants") {
		t.Errorf(`compareVariants("BDE") error %v`, err)
	}
}

// TestCompareReport: each variant's difference is called faster or slower
// only when its whole interval lies on one side of 0, and identical
// modules are flagged as such.
func TestCompareReport(t *testing.T) {
	rounds := func(vals ...float64) []float64 { return vals }
	c := &comparison{Base: "HEAD~1", BaseRev: "abc", Tree: "def-dirty",
		Modules: [2]module{{Bytes: 10, SHA256: "aaaaaaaaaaaaaaaa"}, {Bytes: 11, SHA256: "bbbbbbbbbbbbbbbb"}},
		Variants: []variantInfo{{ID: "A"}, {ID: "G", Name: "g"}, {ID: "G-base"}, {ID: "H", Name: "h"}, {ID: "H-base"},
			{ID: "J", Name: "j"}, {ID: "J-base"}},
		Paired: &paired{Rounds: 6, Requests: 100, CPU: map[string][]float64{
			"A":      rounds(20, 20, 20, 20, 20, 20),
			"G":      rounds(40, 41, 39, 40, 42, 40),
			"G-base": rounds(50, 50, 50, 50, 50, 50),
			"H":      rounds(60, 61, 59, 60, 62, 60),
			"H-base": rounds(50, 50, 50, 50, 50, 50),
			"J":      rounds(45, 55, 40, 60, 50, 52),
			"J-base": rounds(50, 50, 50, 50, 50, 50),
		}},
	}
	out := renderCompare(c)
	contains(t, "comparison", out,
		"| G: g | +20.0 | +30.0 | -10.0 | ",
		"| **faster** by 10.0 µs (33% of the base's addition) |",
		"| H: h | +40.0 | +30.0 | +10.0 | ",
		"| **slower** by 10.0 µs (33% of the base's addition) |",
		"| J: j | +31.0 | +30.0 | +1.0 | ",
		"| no difference this run resolves |",
		"| revision | def-dirty | HEAD~1 (abc) |",
	)
	if strings.Contains(out, "identical") {
		t.Errorf("different modules reported identical:\n%s", out)
	}
	c.Modules[1] = c.Modules[0]
	contains(t, "comparison", renderCompare(c), "The two modules are identical")
}

// TestUntar: the base revision's tree is extracted with its files, modes
// and links, and an entry that would land outside it is refused.
func TestUntar(t *testing.T) {
	archive := func(hs ...*tar.Header) *bytes.Buffer {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				tw.Write([]byte(h.Name))
			}
		}
		tw.Close()
		return &b
	}
	dir := t.TempDir()
	err := untar(archive(
		&tar.Header{Name: "filter/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "filter/main.go", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len("filter/main.go"))},
		&tar.Header{Name: "scripts/run.sh", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len("scripts/run.sh"))},
		&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "filter/main.go"},
	), dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "link")); err != nil || string(b) != "filter/main.go" {
		t.Errorf("link reads %q, %v", b, err)
	}
	if st, err := os.Stat(filepath.Join(dir, "scripts/run.sh")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("scripts/run.sh: %v, %v", st, err)
	}
	err = untar(archive(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len("../escape"))}), dir)
	if err == nil || !strings.Contains(err.Error(), "leaves the tree") {
		t.Errorf("../escape extracted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
		t.Error("../escape written outside the tree")
	}
}
