// Package images builds Allot's OCI images without a container daemon and
// without pulling a base image: allotd and allotctl on a minimal base made
// here (a non-root user, /tmp, and for allotctl the Mozilla CA roots), the
// Wasm module in the layout Istio's and Envoy Gateway's Wasm fetchers read,
// and the native Envoy dynamic module for `COPY --from=` into an Envoy
// image. The same artifacts and Options give the same digests. It writes
// OCI image layouts; pushing them is crane's or any registry client's job.
package images

import (
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The images' names: the directory of each layout and the repository
// name to push it to.
const (
	AllotdImage   = "allotd"
	AllotctlImage = "allotctl"
	WasmImage     = "allot-wasm"
	NativeImage   = "allot-native"
)

// Where the artifacts stand inside the images.
const (
	AllotdPath   = "/allotd"
	AllotctlPath = "/allotctl"
	// AllotdDataDir is allotd's working directory, owned by NonRoot: the
	// default -db, allot.db, is created there.
	AllotdDataDir = "/var/lib/allot"
	// WasmPath is the name Istio's and Envoy Gateway's fetchers look for
	// in the image's last layer (the "compat" variant of the Wasm image
	// specification, github.com/solo-io/wasm spec/spec-compat.md).
	WasmPath = "/plugin.wasm"
	// NativeDir is the directory to set ENVOY_DYNAMIC_MODULES_SEARCH_PATH
	// to: Envoy loads the module named "allot" from lib<name>.so there.
	// A directory for every dynamic module of the Envoy image, not one of
	// Allot's own, so that one search path serves all of them.
	NativeDir  = "/usr/local/lib/envoy/dynamic_modules"
	NativePath = NativeDir + "/" + NativeFile
	// CACertsPath is where Go's crypto/x509 looks first on Linux.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
)

// NonRoot is the user and group allotd and allotctl run as, distroless's
// "nonroot".
const NonRoot = 65532

// What the native module was built against, in its image's labels.
const (
	EnvoyVersion     = "1.40"
	DynamicModuleABI = "v0.2.0" // filter/dynmod.ABIVersion (TestModuleABI)
)

// Label keys: the OCI annotations' and Allot's own.
const (
	LabelSource      = "org.opencontainers.image.source"
	LabelRevision    = "org.opencontainers.image.revision"
	LabelVersion     = "org.opencontainers.image.version"
	LabelCreated     = "org.opencontainers.image.created"
	LabelTitle       = "org.opencontainers.image.title"
	LabelEnvoy       = "io.github.allotmesh.allot.envoy.version"
	LabelModuleABI   = "io.github.allotmesh.allot.envoy.dynamic-module-abi"
	LabelSearchPath  = "io.github.allotmesh.allot.envoy.dynamic-modules-search-path"
	LabelGlibc       = "io.github.allotmesh.allot.glibc.min"
	DefaultSource    = "https://github.com/allotmesh/allot"
	allotdAdminPort  = "8080/tcp"  // allotd -admin-addr's default port
	allotdXDSPort    = "18000/tcp" // allotd -xds-addr's default port
	imageHistoryNote = "allot-images"
)

// Options are what the images say of themselves besides the artifacts.
type Options struct {
	// Bin is the directory holding the artifacts (Build's Out).
	Bin string
	// Version, Revision and Source become the OCI labels; Version is also
	// the tag in the layouts.
	Version  string
	Revision string
	Source   string
	// Created is every timestamp in the images: the layers' files, the
	// configs and their history. SOURCE_DATE_EPOCH, the commit's time.
	Created time.Time
}

// Image is one image and its name.
type Image struct {
	Name  string
	Image v1.Image
}

// Images assembles the four images from the artifacts in o.Bin.
func Images(o Options) ([]Image, error) {
	if o.Version == "" {
		return nil, fmt.Errorf("images: no version")
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	art, err := readArtifacts(o.Bin)
	if err != nil {
		return nil, err
	}
	allotd, allotctl, wasm, native := art[AllotdFile], art[AllotctlFile], art[WasmFile], art[NativeFile]

	base, err := layer(o.Created, baseFiles())
	if err != nil {
		return nil, err
	}
	certs, err := caCerts()
	if err != nil {
		return nil, err
	}
	certsLayer, err := layer(o.Created, []file{{name: CACertsPath[1:], mode: 0o644, body: certs}})
	if err != nil {
		return nil, err
	}
	var out []Image
	add := func(name string, cfg v1.Config, platform v1.Platform, layers ...v1.Layer) error {
		img, err := labelled(o, name, cfg, platform, layers)
		if err != nil {
			return err
		}
		out = append(out, img)
		return nil
	}
	linux := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	nonRoot := fmt.Sprintf("%d:%d", NonRoot, NonRoot)

	// allotd's working directory is its own and writable, so that the
	// default -db (allot.db) works; mount a volume there to keep it.
	l, err := layer(o.Created, []file{
		{name: AllotdPath[1:], mode: 0o755, body: allotd},
		{name: AllotdDataDir[1:], mode: 0o700, uid: NonRoot},
	})
	if err != nil {
		return nil, err
	}
	if err := add(AllotdImage, v1.Config{
		User:         nonRoot,
		Entrypoint:   []string{AllotdPath},
		WorkingDir:   AllotdDataDir,
		ExposedPorts: map[string]struct{}{allotdAdminPort: {}, allotdXDSPort: {}},
	}, linux, base, l); err != nil {
		return nil, err
	}

	if l, err = layer(o.Created, []file{{name: AllotctlPath[1:], mode: 0o755, body: allotctl}}); err != nil {
		return nil, err
	}
	if err := add(AllotctlImage, v1.Config{
		User:       nonRoot,
		Entrypoint: []string{AllotctlPath},
		WorkingDir: "/",
		// allotctl reads $HOME/.config/allot/config.json; a runtime that
		// does not set HOME from /etc/passwd would leave it unset.
		Env: []string{"HOME=/home/nonroot"},
	}, linux, base, certsLayer, l); err != nil {
		return nil, err
	}

	if l, err = layer(o.Created, []file{{name: WasmPath[1:], mode: 0o644, body: wasm}}); err != nil {
		return nil, err
	}
	if err := add(WasmImage, v1.Config{}, v1.Platform{OS: "wasip1", Architecture: "wasm"}, l); err != nil {
		return nil, err
	}

	if l, err = layer(o.Created, []file{{name: NativePath[1:], mode: 0o755, body: native}}); err != nil {
		return nil, err
	}
	glibc, err := minGlibc(native)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", NativeFile, err)
	}
	if err := add(NativeImage, v1.Config{Labels: map[string]string{
		LabelEnvoy:      EnvoyVersion,
		LabelModuleABI:  DynamicModuleABI,
		LabelSearchPath: NativeDir,
		LabelGlibc:      glibc,
	}}, linux, l); err != nil {
		return nil, err
	}
	return out, nil
}

// readArtifacts reads the four artifacts in bin, by file name.
func readArtifacts(bin string) (map[string][]byte, error) {
	art := map[string][]byte{}
	for _, f := range []string{AllotdFile, AllotctlFile, WasmFile, NativeFile} {
		b, err := os.ReadFile(filepath.Join(bin, f))
		if err != nil {
			return nil, err
		}
		art[f] = b
	}
	return art, nil
}

// labelled assembles the image name of layers, its config cfg with the
// labels every image carries (source, revision, version, created, title)
// added to cfg's own.
func labelled(o Options, name string, cfg v1.Config, platform v1.Platform, layers []v1.Layer) (Image, error) {
	cfg.Labels = maps.Clone(cfg.Labels)
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	cfg.Labels[LabelSource] = o.Source
	cfg.Labels[LabelRevision] = o.Revision
	cfg.Labels[LabelVersion] = o.Version
	cfg.Labels[LabelCreated] = o.Created.UTC().Format(time.RFC3339)
	cfg.Labels[LabelTitle] = name
	img, err := assemble(o.Created, cfg, platform, layers)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	return Image{Name: name, Image: img}, nil
}

// assemble makes an OCI image (OCI manifest and config media types: Istio's
// and Envoy Gateway's fetchers take a Docker manifest for a Docker image
// and want Docker layer types in it) of the layers and the config.
func assemble(created time.Time, cfg v1.Config, platform v1.Platform, layers []v1.Layer) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Created:      v1.Time{Time: created.UTC()},
		Config:       cfg,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, len(layers))
	for i, l := range layers {
		adds[i] = mutate.Addendum{Layer: l, History: v1.History{
			Created:   v1.Time{Time: created.UTC()},
			CreatedBy: imageHistoryNote,
		}}
	}
	return mutate.Append(img, adds...)
}

// baseFiles are the base layer of allotd's and allotctl's images: the
// nonroot user and group (the runtime maps User to them, and Go's os/user
// finds a name and a home), its home, and /tmp (os.TempDir).
func baseFiles() []file {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := "root:x:0:\n" + fmt.Sprintf("nonroot:x:%d:\n", NonRoot)
	return []file{
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "home/nonroot", mode: 0o700, uid: NonRoot},
		{name: "tmp", mode: 0o1777},
	}
}

// caCerts is a PEM bundle of the Mozilla roots that golang.org/x/crypto's
// x509roots/fallback/bundle carries, at the version deploy/go.mod pins:
// a bundle fixed by a module version, not by the building machine. The
// roots with a constraint PEM cannot carry (distrust after a date) are
// left out, as the stricter choice.
func caCerts() ([]byte, error) {
	var out []byte
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		c, err := x509.ParseCertificate(r.Certificate)
		if err != nil {
			return nil, fmt.Errorf("ca bundle: %w", err)
		}
		out = append(out, "# "+c.Subject.String()+"\n"...)
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ca bundle: no roots")
	}
	return out, nil
}

// minGlibc is the newest glibc symbol version the shared object so imports:
// the oldest glibc the Envoy image may have to load it.
func minGlibc(so []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(so))
	if err != nil {
		return "", err
	}
	syms, err := f.ImportedSymbols()
	if err != nil {
		return "", err
	}
	var newest []int
	for _, s := range syms {
		v, ok := strings.CutPrefix(s.Version, "GLIBC_")
		if !ok {
			continue
		}
		var parts []int
		for p := range strings.SplitSeq(v, ".") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return "", fmt.Errorf("symbol %s: version %s", s.Name, s.Version)
			}
			parts = append(parts, n)
		}
		if slices.Compare(parts, newest) > 0 {
			newest = parts
		}
	}
	if newest == nil {
		return "", fmt.Errorf("imports no glibc symbol")
	}
	out := make([]string, len(newest))
	for i, n := range newest {
		out[i] = strconv.Itoa(n)
	}
	return strings.Join(out, "."), nil
}

// Written is an image written to a layout.
type Written struct {
	Name   string
	Dir    string
	Digest v1.Hash
}

// WriteLayouts writes each image to an OCI image layout of its own,
// dir/<name>, replacing what was there, tagged tag (the
// org.opencontainers.image.ref.name annotation crane and skopeo read).
func WriteLayouts(dir, tag string, imgs []Image) ([]Written, error) {
	var out []Written
	for _, im := range imgs {
		d := filepath.Join(dir, im.Name)
		if err := os.RemoveAll(d); err != nil {
			return nil, err
		}
		p, err := layout.Write(d, empty.Index)
		if err != nil {
			return nil, fmt.Errorf("layout %s: %w", d, err)
		}
		if err := p.AppendImage(im.Image, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": tag,
		})); err != nil {
			return nil, fmt.Errorf("layout %s: %w", d, err)
		}
		h, err := im.Image.Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, Written{Name: im.Name, Dir: d, Digest: h})
	}
	return out, nil
}
