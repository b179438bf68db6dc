package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The repository's root, seen from deploy/images.
const repoRoot = "../.."

var testOptions = Options{
	Version:  "test",
	Revision: "0123456789abcdef0123456789abcdef01234567",
	Source:   DefaultSource,
	Created:  time.Unix(1700000000, 0),
}

// tmpRoot holds what the tests build; TestMain removes it.
var tmpRoot string

// registrySrv is an in-memory registry on loopback for every test; the
// pulled images read their blobs from it lazily, so it lives as long as
// the tests.
var registrySrv *httptest.Server

func TestMain(m *testing.M) {
	var err error
	if tmpRoot, err = os.MkdirTemp("", "allot-images-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	registrySrv = httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	code := m.Run()
	registrySrv.Close()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

var first struct {
	once sync.Once
	bin  string
	err  error

	pushOnce sync.Once
	written  []Written
	pulled   map[string]v1.Image
}

// artifacts builds the artifacts once, with the Go build cache this
// machine has, and returns their directory. A build that fails fails the
// test: the images cannot be checked without it.
func artifacts(t *testing.T) string {
	t.Helper()
	first.once.Do(func() {
		first.bin = filepath.Join(tmpRoot, "bin1")
		start := time.Now()
		first.err = Build{Root: repoRoot, Out: first.bin}.Run(context.Background())
		t.Logf("build: %s", time.Since(start).Round(time.Second))
	})
	if first.err != nil {
		t.Fatalf("build the artifacts: %v", first.err)
	}
	return first.bin
}

// pulledImages builds the artifacts and the images once, pushes them to a
// registry on loopback and pulls them back (pushPull).
func pulledImages(t *testing.T) (bin string, written []Written, pulled map[string]v1.Image) {
	t.Helper()
	bin = artifacts(t)
	first.pushOnce.Do(func() {
		w := build(t, bin)
		first.pulled = pushPull(t, w)
		first.written = w
	})
	if first.pulled == nil {
		t.Fatal("push and pull failed in an earlier test")
	}
	return bin, first.written, first.pulled
}

// build assembles the images from the artifacts in bin and writes their
// layouts into a temporary directory.
func build(t *testing.T, bin string) []Written {
	t.Helper()
	o := testOptions
	o.Bin = bin
	imgs, err := Images(o)
	if err != nil {
		t.Fatal(err)
	}
	w, err := WriteLayouts(t.TempDir(), o.Version, imgs)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// pushPull pushes the one image of each layout to an in-memory registry
// on loopback (registrySrv), pulls it back by tag and by digest, checks that every way
// gives the layout's digest and manifest, and returns the pulled images.
func pushPull(t *testing.T, written []Written) map[string]v1.Image {
	t.Helper()
	host := strings.TrimPrefix(registrySrv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("registry at %s, want loopback", host)
	}
	pulled := map[string]v1.Image{}
	for _, w := range written {
		p, err := layout.FromPath(w.Dir)
		if err != nil {
			t.Fatal(err)
		}
		idx, err := p.ImageIndex()
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 {
			t.Fatalf("%s: %d manifests in the layout, want 1", w.Name, len(im.Manifests))
		}
		d := im.Manifests[0]
		if d.Digest != w.Digest || d.MediaType != types.OCIManifestSchema1 {
			t.Fatalf("%s: layout has %s %s, want %s %s", w.Name, d.MediaType, d.Digest, types.OCIManifestSchema1, w.Digest)
		}
		if tag := d.Annotations["org.opencontainers.image.ref.name"]; tag != testOptions.Version {
			t.Errorf("%s: layout tag %q, want %q", w.Name, tag, testOptions.Version)
		}
		img, err := p.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := img.RawManifest()
		if err != nil {
			t.Fatal(err)
		}

		tag, err := name.NewTag(host+"/allot/"+w.Name+":"+testOptions.Version, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(tag, img); err != nil {
			t.Fatalf("push %s: %v", tag, err)
		}
		byDigest := tag.Context().Digest(w.Digest.String())
		for _, ref := range []name.Reference{tag, byDigest} {
			got, err := remote.Image(ref)
			if err != nil {
				t.Fatalf("pull %s: %v", ref, err)
			}
			gd, err := got.Digest()
			if err != nil {
				t.Fatal(err)
			}
			graw, err := got.RawManifest()
			if err != nil {
				t.Fatal(err)
			}
			if gd != w.Digest || !bytes.Equal(graw, raw) {
				t.Fatalf("pull %s: digest %s, want %s (manifests equal: %v)", ref, gd, w.Digest, bytes.Equal(graw, raw))
			}
			pulled[w.Name] = got
		}
	}
	return pulled
}

// entry is a file of an image's flattened file system.
type entry struct {
	hdr  *tar.Header
	body []byte
}

// files flattens img's layers as a container runtime would.
func files(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	out := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out["/"+strings.TrimSuffix(h.Name, "/")] = entry{hdr: h, body: body}
	}
}

func TestImages(t *testing.T) {
	bin, _, pulled := pulledImages(t)
	artifact := func(f string) []byte {
		b, err := os.ReadFile(filepath.Join(bin, f))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	nonRoot := fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	glibc, err := minGlibc(artifact(NativeFile))
	if err != nil || !strings.HasPrefix(glibc, "2.") {
		t.Fatalf("the native module's glibc: %q, %v", glibc, err)
	}
	tests := []struct {
		image      string
		platform   string
		user       string
		entrypoint []string
		workdir    string
		ports      []string
		path       string // the artifact's path in the image
		artifact   string
		mode       int64
		static     bool // the artifact is an ELF without an interpreter
		base       bool // the nonroot user, its home and /tmp
		caCerts    bool
		labels     map[string]string
	}{
		{
			image: AllotdImage, platform: "linux/" + runtime.GOARCH, user: nonRoot, entrypoint: []string{"/allotd"}, workdir: "/var/lib/allot",
			ports: []string{"18000/tcp", "8080/tcp"}, path: "/allotd", artifact: AllotdFile, mode: 0o755, static: true, base: true,
		},
		{
			image: AllotctlImage, platform: "linux/" + runtime.GOARCH, user: nonRoot, entrypoint: []string{"/allotctl"}, workdir: "/",
			path: "/allotctl", artifact: AllotctlFile, mode: 0o755, static: true, base: true, caCerts: true,
		},
		{image: WasmImage, platform: "wasip1/wasm", path: "/plugin.wasm", artifact: WasmFile, mode: 0o644},
		{
			image: NativeImage, platform: "linux/" + runtime.GOARCH, path: "/usr/local/lib/envoy/dynamic_modules/liballot.so",
			artifact: NativeFile, mode: 0o755,
			labels: map[string]string{LabelEnvoy: "1.40", LabelModuleABI: "v0.2.0", LabelSearchPath: "/usr/local/lib/envoy/dynamic_modules", LabelGlibc: glibc},
		},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			img := pulled[tt.image]
			if img == nil {
				t.Fatalf("no image %s", tt.image)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if got := cf.Platform().String(); got != tt.platform {
				t.Errorf("platform %s, want %s", got, tt.platform)
			}
			c := cf.Config
			if c.User != tt.user || !slices.Equal(c.Entrypoint, tt.entrypoint) || len(c.Cmd) != 0 {
				t.Errorf("user %q entrypoint %q cmd %q, want %q %q none", c.User, c.Entrypoint, c.Cmd, tt.user, tt.entrypoint)
			}
			var ports []string
			for p := range c.ExposedPorts {
				ports = append(ports, p)
			}
			slices.Sort(ports)
			if !slices.Equal(ports, tt.ports) {
				t.Errorf("exposed ports %q, want %q", ports, tt.ports)
			}
			want := map[string]string{
				LabelSource: DefaultSource, LabelRevision: testOptions.Revision, LabelVersion: "test",
				LabelCreated: "2023-11-14T22:13:20Z", LabelTitle: tt.image,
			}
			for k, v := range tt.labels {
				want[k] = v
			}
			for k, v := range want {
				if c.Labels[k] != v {
					t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
				}
			}
			if len(c.Labels) != len(want) {
				t.Errorf("labels %v, want %v", c.Labels, want)
			}
			if !cf.Created.Time.Equal(testOptions.Created) {
				t.Errorf("created %s, want %s", cf.Created.Time, testOptions.Created)
			}

			tree := files(t, img)
			f, ok := tree[tt.path]
			if !ok {
				t.Fatalf("no %s in the image", tt.path)
			}
			if f.hdr.Mode != tt.mode || f.hdr.Uid != 0 || f.hdr.Gid != 0 || !f.hdr.ModTime.Equal(testOptions.Created) {
				t.Errorf("%s: mode %o uid %d gid %d mtime %s, want %o 0 0 %s", tt.path, f.hdr.Mode, f.hdr.Uid, f.hdr.Gid, f.hdr.ModTime, tt.mode, testOptions.Created)
			}
			if !bytes.Equal(f.body, artifact(tt.artifact)) {
				t.Errorf("%s differs from the built %s", tt.path, tt.artifact)
			}
			if tt.static {
				e, err := elf.NewFile(bytes.NewReader(f.body))
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range e.Progs {
					if p.Type == elf.PT_INTERP {
						t.Errorf("%s has an ELF interpreter: not static", tt.path)
					}
				}
			}
			if c.WorkingDir != tt.workdir {
				t.Errorf("working directory %q, want %q", c.WorkingDir, tt.workdir)
			}
			if tt.workdir != "/" && tt.workdir != "" {
				if h := tree[tt.workdir].hdr; h == nil || h.Typeflag != tar.TypeDir || h.Uid != NonRoot || h.Mode != 0o700 {
					t.Errorf("%s: %+v, want a directory of mode 0700 owned by 65532", tt.workdir, h)
				}
			}
			if tt.base {
				if !strings.Contains(string(tree["/etc/passwd"].body), "\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n") {
					t.Errorf("/etc/passwd has no nonroot 65532:\n%s", tree["/etc/passwd"].body)
				}
				if !strings.Contains(string(tree["/etc/group"].body), "\nnonroot:x:65532:\n") {
					t.Errorf("/etc/group has no nonroot 65532:\n%s", tree["/etc/group"].body)
				}
				if h := tree["/tmp"].hdr; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
					t.Errorf("/tmp: %+v, want a directory of mode 1777", h)
				}
				if h := tree["/home/nonroot"].hdr; h == nil || h.Typeflag != tar.TypeDir || h.Uid != NonRoot || h.Gid != NonRoot {
					t.Errorf("/home/nonroot: %+v, want a directory owned by 65532", h)
				}
			}
			certs, hasCerts := tree[CACertsPath]
			if hasCerts != tt.caCerts {
				t.Errorf("%s in the image: %v, want %v", CACertsPath, hasCerts, tt.caCerts)
			}
			if hasCerts {
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(certs.body) || strings.Count(string(certs.body), "BEGIN CERTIFICATE") < 100 {
					t.Errorf("%s: not a PEM bundle of 100 roots or more", CACertsPath)
				}
			}
			var names []string
			for n := range tree {
				names = append(names, n)
			}
			slices.Sort(names)
			t.Logf("files: %s", strings.Join(names, " "))
		})
	}
}

// TestWasmImageFetchers reads the pushed and pulled Wasm image the way
// Istio's and Envoy Gateway's image fetchers do (fetchWasm), and a single
// layer of the *oci* variant's media type the way they refuse it.
func TestWasmImageFetchers(t *testing.T) {
	bin, _, pulled := pulledImages(t)
	got, err := fetchWasm(pulled[WasmImage])
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(bin, WasmFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || !bytes.HasPrefix(got, []byte("\x00asm")) {
		t.Fatalf("fetched %d bytes (Wasm magic: %v), want the built %s's %d", len(got), bytes.HasPrefix(got, []byte("\x00asm")), WasmFile, len(want))
	}

	raw := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	raw, err = mutate.Append(raw, mutate.Addendum{Layer: static.NewLayer(want, wasmLayerType)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetchWasm(raw); err == nil || !strings.Contains(err.Error(), "number of layers must be 2 but got 1") {
		t.Fatalf("one layer of %s: error %v, want the fetchers' refusal", wasmLayerType, err)
	}
}

// wasmLayerType is the Wasm layer's media type of the *oci* variant.
const wasmLayerType types.MediaType = "application/vnd.module.wasm.content.layer.v1+wasm"

// fetchWasm is the fetchers' binaryFetcher, shortened: istio.io/istio
// pkg/wasm/imagefetcher.go and github.com/envoyproxy/gateway v1.9.1
// internal/wasm/imagefetcher.go (the same code, internal: not importable).
// A Docker schema 2 manifest must have a Docker layer last; any other
// manifest is tried as the *compat* variant (the last layer
// application/vnd.oci.image.layer.v1.tar+gzip, holding a file whose base
// name is plugin.wasm), then as the *oci* variant (exactly two layers, one
// of them wasmLayerType, read raw).
func fetchWasm(img v1.Image) ([]byte, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	compat := func(want types.MediaType) ([]byte, error) {
		if len(layers) == 0 {
			return nil, errors.New("number of layers must be greater than zero")
		}
		l := layers[len(layers)-1]
		if mt, err := l.MediaType(); err != nil || mt != want {
			return nil, fmt.Errorf("invalid media type %s (expect %s)", mt, want)
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return extractPluginWasm(rc)
	}
	if m.MediaType == types.DockerManifestSchema2 {
		return compat(types.DockerLayer)
	}
	b, errCompat := compat(types.OCILayer)
	if errCompat == nil {
		return b, nil
	}
	if len(layers) != 2 {
		return nil, errors.Join(errCompat, fmt.Errorf("number of layers must be 2 but got %d", len(layers)))
	}
	for _, l := range layers {
		if mt, err := l.MediaType(); err == nil && mt == wasmLayerType {
			rc, err := l.Compressed()
			if err != nil {
				return nil, err
			}
			defer rc.Close()
			return io.ReadAll(rc)
		}
	}
	return nil, errors.Join(errCompat, fmt.Errorf("could not find the layer of type %s", wasmLayerType))
}

// extractPluginWasm is the fetchers' extractWasmPluginBinary: gunzip, then
// the first tar entry whose base name is plugin.wasm.
func extractPluginWasm(r io.Reader) ([]byte, error) {
	gr, err := gzip.NewReader(r)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("plugin.wasm not found in the archive")
		}
		if err != nil {
			return nil, err
		}
		if filepath.Base(h.Name) == "plugin.wasm" {
			return io.ReadAll(tr)
		}
	}
}

// TestReproducible rebuilds every artifact from a copy of the tree in
// another directory with an empty Go build cache, so that no compiled
// package of the first build is reused and no path of the first checkout
// can leak in, and wants the same bytes and the same image digests.
func TestReproducible(t *testing.T) {
	bin1, w1, _ := pulledImages(t)

	src := filepath.Join(tmpRoot, "elsewhere", "allot")
	copyTree(t, repoRoot, src)
	bin2 := filepath.Join(tmpRoot, "bin2")
	start := time.Now()
	b := Build{Root: src, Out: bin2, Env: []string{"GOCACHE=" + filepath.Join(tmpRoot, "gocache")}}
	if err := b.Run(context.Background()); err != nil {
		t.Fatalf("rebuild with an empty build cache: %v", err)
	}
	t.Logf("rebuild in %s with an empty build cache: %s", src, time.Since(start).Round(time.Second))
	for _, f := range []string{AllotdFile, AllotctlFile, WasmFile, NativeFile} {
		a, b := fileSum(t, filepath.Join(bin1, f)), fileSum(t, filepath.Join(bin2, f))
		if a != b {
			t.Errorf("%s: sha256 %s, then %s", f, a, b)
		}
	}
	w2 := build(t, bin2)
	for i := range w1 {
		if w1[i].Name != w2[i].Name || w1[i].Digest != w2[i].Digest {
			t.Errorf("%s %s, then %s %s", w1[i].Name, w1[i].Digest, w2[i].Name, w2[i].Digest)
		}
		t.Logf("%-13s %s", w1[i].Name, w1[i].Digest)
	}
}

// copyTree copies the files of the working tree at root that git tracks or
// would track (uncommitted changes included) to dst.
func copyTree(t *testing.T, root, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestModuleABI holds DynamicModuleABI to filter/dynmod.ABIVersion, read
// from the source: importing filter/dynmod would link its cgo exports,
// whose host callbacks only Envoy provides.
func TestModuleABI(t *testing.T) {
	src := filepath.Join(repoRoot, "filter", "dynmod", "dynmod.go")
	f, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	obj := f.Scope.Lookup("ABIVersion")
	if obj == nil || obj.Kind != ast.Con {
		t.Fatalf("%s: no constant ABIVersion", src)
	}
	lit, ok := obj.Decl.(*ast.ValueSpec).Values[0].(*ast.BasicLit)
	if !ok {
		t.Fatalf("%s: ABIVersion is not a literal", src)
	}
	if v, err := strconv.Unquote(lit.Value); err != nil || v != DynamicModuleABI {
		t.Fatalf("filter/dynmod.ABIVersion %s, DynamicModuleABI %q", lit.Value, DynamicModuleABI)
	}
}
