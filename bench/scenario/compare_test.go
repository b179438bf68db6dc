package scenario

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
)

// TestCompareVariants: a comparison runs A and each named Allot variant
// twice, next to each other, the copy on the base build; variants that are
// not Allot's are never compared.
func TestCompareVariants(t *testing.T) {
	vs, native, err := compareVariants("")
	if err != nil || native {
		t.Fatal(err, native)
	}
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	if got := strings.Join(ids, " "); got != "A G G-base H H-base I I-base J J-base" {
		t.Errorf("variants %q", got)
	}
	p := &variant.Paths{AllotWasm: "/tree/allot.wasm", BaseWasm: "/base/allot.wasm", MinWasm: "/x/min.wasm"}
	for _, v := range vs[1:3] {
		f, err := v.Filters(p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		want, other := "/tree/allot.wasm", "/base/allot.wasm"
		if strings.HasSuffix(v.ID, report.BaseSuffix) {
			want, other = other, want
		}
		if !strings.Contains(string(b), want) || strings.Contains(string(b), other) {
			t.Errorf("%s's filter does not load %s alone: %s", v.ID, want, b)
		}
	}
	if p.AllotWasm != "/tree/allot.wasm" {
		t.Errorf("the base variant changed the shared paths: %+v", p)
	}
	if vs, _, err := compareVariants("EJ"); err != nil || len(vs) != 3 || vs[1].ID != "J" || vs[2].ID != "J-base" {
		t.Errorf(`compareVariants("EJ") = %v, %v; want A J J-base`, vs, err)
	}
	if _, _, err := compareVariants("BDEN"); err == nil || !strings.Contains(err.Error(), "names none of Allot's variants") {
		t.Errorf(`compareVariants("BDEN") error %v`, err)
	}
}

// TestCompareNativeVariants: a native Allot variant's copy loads the base
// build of the dynamic module, from its own directory, and the tree's
// variant the tree's.
func TestCompareNativeVariants(t *testing.T) {
	vs, native, err := compareVariants("Q")
	if err != nil || !native || len(vs) != 3 || vs[1].ID != "Q" || vs[2].ID != "Q-base" {
		t.Fatalf(`compareVariants("Q") = %v, %v, %v; want A Q Q-base, native`, vs, native, err)
	}
	p := &variant.Paths{AllotSO: "/tree/liballot.so", BaseSO: "/raw/base/liballot.so"}
	for _, v := range vs[1:] {
		want, other := "/tree", "/raw/base"
		if strings.HasSuffix(v.ID, report.BaseSuffix) {
			want, other = other, want
		}
		if got := v.Module(p); got != want+"/liballot.so" {
			t.Errorf("%s loads %s, want %s/liballot.so", v.ID, got, want)
		}
		env := strings.Join(variant.ModuleEnv(v, p), " ")
		if !strings.Contains(env, "="+want+" ") && !strings.HasSuffix(env, "="+want) || strings.Contains(env, other) {
			t.Errorf("%s's environment %q does not point at %s alone", v.ID, env, want)
		}
		f, err := v.Filters(p)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(f); strings.Contains(string(b), other) {
			t.Errorf("%s's filter names %s: %s", v.ID, other, b)
		}
	}
	if p.AllotSO != "/tree/liballot.so" {
		t.Errorf("the base variant changed the shared paths: %+v", p)
	}
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
