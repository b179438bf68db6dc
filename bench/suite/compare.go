package suite

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
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/allotmesh/allot/bench/stats"
)

// A comparison (allot-bench -base REV, `make bench-compare`) measures
// Allot's filter as built from the working tree (bin/allot.wasm) against
// the same filter built from a git revision, side by side: every variant
// twice, once per build, all Envoys up at once as in the interleaved
// section, each build's slice next to the other's in every round and the
// order reversed every other round. The difference of two builds is then
// the median of their per-round differences, which no drift of the VM
// between rounds can bias, with a 95% bootstrap interval: the way to tell
// whether a change to the filter made it faster, which two separate
// `make bench` runs on this VM cannot (their E alone moves by ±5 µs).

// compareRounds is the rounds of a comparison: twice make bench's, as a
// comparison runs fewer variants, no latency slices, and the differences it
// looks for are smaller.
const compareRounds = 20

// defaultCompare are the variants compared when -only names none.
const defaultCompare = "GHIJ"

// baseSuffix marks the base build's copy of a variant.
const baseSuffix = "-base"

// comparison is what a comparison measured; it is written to
// bench/raw/compare.json and rendered as bench/raw/COMPARE.md.
type comparison struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration"`
	Machine  machine       `json:"machine"`
	Base     string        `json:"base"`        // the revision as given
	BaseRev  string        `json:"base_commit"` // its commit
	Tree     string        `json:"tree"`        // git describe of the working tree
	Modules  [2]module     `json:"modules"`     // this tree's, the base's
	Variants []variantInfo `json:"variants"`
	Paired   *paired       `json:"paired"`
	Commands []string      `json:"commands"`
}

type module struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// compareVariants are A and, for each Allot variant named in only (all of
// defaultCompare when empty), the variant followed by its copy on the base
// build (p.baseWasm).
func compareVariants(only string) ([]variant, error) {
	if only == "" {
		only = defaultCompare
	}
	var vs []variant
	for _, v := range variants() {
		if v.ID == "A" {
			vs = append(vs, v)
			continue
		}
		if v.allot == 0 || v.authz || v.module != nil || v.noResponse || !strings.Contains(only, v.ID) {
			continue
		}
		b := v
		b.ID, b.Name = v.ID+baseSuffix, v.Name+", base build"
		b.filters = func(p *paths) ([]any, error) {
			q := *p
			q.allotWasm = p.baseWasm
			return v.filters(&q)
		}
		vs = append(vs, v, b)
	}
	if len(vs) == 1 {
		return nil, fmt.Errorf("compare: -only %q names none of Allot's variants F, G, H, I, J", only)
	}
	return vs, nil
}

// runCompare builds the base revision's filter, measures every compared
// variant on both builds and writes the comparison.
func runCompare(ctx context.Context, o Options, p *paths, logf func(string, ...any)) error {
	start := time.Now()
	vs, err := compareVariants(o.Only)
	if err != nil {
		return err
	}
	c := &comparison{Started: start, Machine: describeMachine(o), Base: o.Base, Commands: []string{o.Command}}
	p.baseWasm = filepath.Join(p.raw, "bin", "allot-base.wasm")
	rev, cmds, err := buildBase(ctx, o, p.raw, o.Base, p.baseWasm)
	if err != nil {
		return err
	}
	c.BaseRev, c.Commands = rev, append(c.Commands, cmds...)
	c.Tree = describeTree(o.Root)
	for i, path := range []string{p.allotWasm, p.baseWasm} {
		if c.Modules[i], err = describeModule(path); err != nil {
			return err
		}
	}
	for i := range vs {
		if vs[i], err = withExpect(vs[i]); err != nil {
			return err
		}
		c.Variants = append(c.Variants, variantInfo{ID: vs[i].ID, Name: vs[i].Name})
	}
	rounds := cmp.Or(o.PairedRounds, compareRounds)
	logf("comparing this tree (%s) with %s (%s): %d rounds of %d requests per variant, every Envoy up at once",
		c.Tree, o.Base, rev, rounds, pairedRequests)
	if c.Paired, err = measurePaired(ctx, o, p, vs, authzService{}, pairedPlan{rounds: rounds, alternate: true}); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	c.Duration = time.Since(start)
	return writeOutputs(o, p.raw, "compare.json", c, "COMPARE.md", renderCompare(c), c.Duration, logf)
}

// writeOutputs writes a side run's raw data (as JSON) and its report under
// raw, and prints the report.
func writeOutputs(o Options, raw, dataName string, data any, reportName, report string, took time.Duration, logf func(string, ...any)) error {
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
func buildBase(ctx context.Context, o Options, raw, rev, out string) (string, []string, error) {
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
	return hash, []string{
		"git archive --format=tar " + hash + " | tar -x -C bench/raw/base-src",
		"cd bench/raw/base-src && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o ../bin/allot-base.wasm ./filter",
	}, nil
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

func describeModule(path string) (module, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return module{}, err
	}
	sum := sha256.Sum256(b)
	return module{Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}, nil
}

// renderCompare is the comparison's report.
func renderCompare(c *comparison) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	pr := c.Paired
	p("# Allot: this tree against %s\n\n", c.Base)
	p("Generated by `make bench-compare` (bench/cmd/allot-bench -base) on %s in %v. Raw data: `bench/raw/compare.json`.\n\n",
		c.Started.UTC().Format(time.RFC3339), c.Duration.Round(time.Second))
	p("| | this tree | base |\n|---|---|---|\n| revision | %s | %s (%s) |\n", c.Tree, c.Base, c.BaseRev)
	p("| module | %d bytes, sha256 %.12s | %d bytes, sha256 %.12s |\n\n", c.Modules[0].Bytes, c.Modules[0].SHA256,
		c.Modules[1].Bytes, c.Modules[1].SHA256)
	if c.Modules[0].SHA256 == c.Modules[1].SHA256 {
		p("The two modules are identical: every difference below is this run's noise.\n\n")
	}
	p("Machine: %d CPUs, %s, kernel %s, Envoy %s, %s.\n\n", c.Machine.NProc, c.Machine.CPU, c.Machine.Kernel, c.Machine.Envoy, c.Machine.Go)
	p("Every Envoy runs at once, pinned to one CPU, the load generator to the other; each variant runs on both builds, "+
		"and in each of %d rounds every Envoy gets %d requests closed loop (after %d to warm up), each build's slice next to the other's, "+
		"the order reversed every other round. CPU is the Envoy process's run time over its slice, per request. A difference "+
		"is the median of the per-round differences of this tree's slice to the base's, with a 95%% bootstrap interval "+
		"(%d resamples of the rounds); a difference whose interval includes 0 is one this run cannot tell from noise.\n\n",
		pr.Rounds, pr.Requests, pairedWarmup, stats.Resamples)
	p("| variant | this tree adds vs A (µs) | base adds vs A (µs) | this tree − base (µs) | 95%% interval | result |\n|---|---:|---:|---:|---:|---|\n")
	for _, v := range c.Variants {
		id, ok := strings.CutSuffix(v.ID, baseSuffix)
		if ok || id == "A" {
			continue
		}
		d, ok := pr.between(id, id+baseSuffix)
		if !ok {
			continue
		}
		x, _ := pr.add(id)
		y, _ := pr.add(id + baseSuffix)
		lo, hi := stats.BootstrapMedian(d)
		med := stats.Median(d)
		share := ""
		if y > 0 {
			share = fmt.Sprintf(" (%.0f%% of the base's addition)", 100*math.Abs(med)/y)
		}
		result := stats.Unresolved
		switch dir := stats.Direction(lo, hi); dir {
		case "faster":
			result = fmt.Sprintf("**faster** by %.1f µs%s", -med, share)
		case "slower":
			result = fmt.Sprintf("**slower** by %.1f µs%s", med, share)
		}
		p("| %s: %s | %+.1f | %+.1f | %+.1f | %+.1f … %+.1f | %s |\n", id, v.Name, x, y, med, lo, hi, result)
	}
	p("\n## Commands\n\n```sh\n")
	for _, cmd := range c.Commands {
		p("%s\n", cmd)
	}
	p("```\n")
	return b.String()
}
