package scenario

import (
	"archive/tar"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/harness"
)

// A comparison (allot-bench -base REV, `make bench-compare`) measures
// Allot's filter as built from the working tree (bin/allot.wasm, and
// bin/liballot.so for the native variants) against the same filter built
// from a git revision, side by side: every variant twice, once per build,
// all Envoys up at once as in the interleaved section, each build's slice
// next to the other's in every round and the order reversed every other
// round. The difference of two builds is then the median of their
// per-round differences, which no drift of the VM between rounds can bias,
// with a 95% bootstrap interval: the way to tell whether a change to the
// filter made it faster, which two separate `make bench` runs on this VM
// cannot (their E alone moves by ±5 µs).

// compareRounds is the rounds of a comparison: twice make bench's, as a
// comparison runs fewer variants, no latency slices, and the differences it
// looks for are smaller.
const compareRounds = 20

// defaultCompare are the variants compared when -only names none.
const defaultCompare = "GHIJ"

// compareVariants are A and, for each Allot variant named in only (all of
// defaultCompare when empty), the variant followed by its copy on the base
// build (p.BaseWasm, or p.BaseSO for a native variant); native reports
// whether any compared variant is.
func compareVariants(only string) (vs []variant.Variant, native bool, err error) {
	if only == "" {
		only = defaultCompare
	}
	for _, v := range variant.All() {
		if v.ID == "A" {
			vs = append(vs, v)
			continue
		}
		if v.Allot == 0 || v.Authz || v.NoResponse || !strings.Contains(only, v.ID) {
			continue
		}
		b := v
		b.ID, b.Name = v.ID+report.BaseSuffix, v.Name+", base build"
		if v.Module != nil { // Allot's dynamic module: variants with Allot > 0 load no other
			native = true
			b.Module = func(p *variant.Paths) string { return p.BaseSO }
			b.Filters = func(p *variant.Paths) ([]any, error) {
				q := *p
				q.AllotSO = p.BaseSO
				return v.Filters(&q)
			}
		} else {
			b.Filters = func(p *variant.Paths) ([]any, error) {
				q := *p
				q.AllotWasm = p.BaseWasm
				return v.Filters(&q)
			}
		}
		vs = append(vs, v, b)
	}
	if len(vs) == 1 {
		return nil, false, fmt.Errorf("compare: -only %q names none of Allot's variants F–J (Wasm) or P–T (native)", only)
	}
	return vs, native, nil
}

// RunCompare builds the base revision's filter, measures every compared
// variant on both builds and writes the comparison.
func RunCompare(ctx context.Context, o variant.Options, p *variant.Paths, logf func(string, ...any)) error {
	start := time.Now()
	vs, native, err := compareVariants(o.Only)
	if err != nil {
		return err
	}
	c := &report.Comparison{Started: start, Machine: DescribeMachine(o), Base: o.Base, Commands: []string{o.Command}}
	so := ""
	if native {
		if _, err := os.Stat(p.AllotSO); err != nil {
			return fmt.Errorf("allot's native module not built (%v): run `make build-native`", err)
		}
		so = p.BaseSO
	}
	rev, cmds, err := buildBase(ctx, o, p.Raw, o.Base, p.BaseWasm, so)
	if err != nil {
		return err
	}
	c.BaseRev, c.Commands = rev, append(c.Commands, cmds...)
	c.Tree = describeTree(o.Root)
	for i, path := range []string{p.AllotWasm, p.BaseWasm} {
		if c.Modules[i], err = describeModule(path); err != nil {
			return err
		}
	}
	for i := range vs {
		if vs[i], err = variant.WithExpect(vs[i]); err != nil {
			return err
		}
		c.Variants = append(c.Variants, variant.Info{ID: vs[i].ID, Name: vs[i].Name})
	}
	rounds := cmp.Or(o.PairedRounds, compareRounds)
	logf("comparing this tree (%s) with %s (%s): %d rounds of %d requests per variant, every Envoy up at once",
		c.Tree, o.Base, rev, rounds, pairedRequests)
	if c.Paired, err = measurePaired(ctx, o, p, vs, AuthzService{}, pairedPlan{rounds: rounds, alternate: true}); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	c.Duration = time.Since(start)
	return writeOutputs(o, p.Raw, "compare.json", c, "COMPARE.md", report.RenderCompare(c), c.Duration, logf)
}

// writeOutputs writes a side run's raw data (as JSON) and its report under
// raw, and prints the report.
func writeOutputs(o variant.Options, raw, dataName string, data any, reportName, report string, took time.Duration, logf func(string, ...any)) error {
	b, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(raw, dataName), b, 0o644); err != nil {
		return err
	}
	path := filepath.Join(raw, reportName)
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Fprint(o.Log, report)
	logf("wrote %s in %v", path, took.Round(time.Second))
	return nil
}

// buildBase builds the filter of git revision rev into out from a copy of
// the revision's tree (git archive) under raw, and returns the revision's
// commit and the commands it ran.
func buildBase(ctx context.Context, o variant.Options, raw, rev, out, so string) (string, []string, error) {
	commit, err := exec.CommandContext(ctx, "git", "-C", o.Root, "rev-parse", "--verify", "--end-of-options", rev+"^{commit}").Output()
	if err != nil {
		return "", nil, fmt.Errorf("compare: base %q is not a commit of %s: %w", rev, o.Root, err)
	}
	hash := strings.TrimSpace(string(commit))
	src := filepath.Join(raw, "base-src")
	if err := os.RemoveAll(src); err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(src)
	archive := exec.CommandContext(ctx, "git", "-C", o.Root, "archive", "--format=tar", hash)
	stdout, err := archive.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := archive.Start(); err != nil {
		return "", nil, err
	}
	xerr := untar(stdout, src)
	io.Copy(io.Discard, stdout)
	if err := errors.Join(xerr, archive.Wait()); err != nil {
		return "", nil, fmt.Errorf("compare: git archive %s: %w", hash, err)
	}
	if err := goBuild(ctx, src, out, "./filter", true); err != nil {
		return "", nil, fmt.Errorf("compare: build the filter of %s: %w", rev, err)
	}
	cmds := []string{
		"git archive --format=tar " + hash + " | tar -x -C bench/raw/base-src",
		"cd bench/raw/base-src && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o ../bin/allot-base.wasm ./filter",
	}
	if so != "" {
		if err := harness.GoBuild(ctx, src, so, "./filter/native", []string{"-buildmode=c-shared", "-trimpath"}, "CGO_ENABLED=1"); err != nil {
			return "", nil, fmt.Errorf("compare: build the native module of %s: %w", rev, err)
		}
		cmds = append(cmds, "cd bench/raw/base-src && CGO_ENABLED=1 go build -buildmode=c-shared -trimpath -o ../bin/base/liballot.so ./filter/native")
	}
	return hash, cmds, nil
}

// untar extracts a tar stream's directories, regular files and symbolic
// links under dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("archive entry %q leaves the tree", h.Name)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFile(path, tr, h.FileInfo().Mode().Perm())
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.Symlink(h.Linkname, path)
			}
		}
		if err != nil {
			return err
		}
	}
}

func writeFile(path string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

// describeTree is `git describe` of the working tree at root ("" outside
// git): the revision a report's build came from, "-dirty" when edited.
func describeTree(root string) string {
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func describeModule(path string) (variant.Module, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return variant.Module{}, err
	}
	sum := sha256.Sum256(b)
	return variant.Module{Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}, nil
}
