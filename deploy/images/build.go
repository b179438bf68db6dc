package images

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// The artifacts' file names in a build directory.
const (
	AllotdFile   = "allotd"
	AllotctlFile = "allotctl"
	WasmFile     = "allot.wasm"
	NativeFile   = "liballot.so"
)

// Build builds the four artifacts the images hold, for linux on this
// machine's architecture (the native module needs cgo, so no cross build):
// allotd and allotctl static (CGO_ENABLED=0), the Wasm module as
// `make build-filter` does, the native module as `make build-native` does,
// each with the flags that make the same sources give the same bytes in
// any checkout directory:
//   - -trimpath: no directory of this machine in the binary;
//   - -ldflags=-buildid=: no Go build ID in the binary;
//   - -buildvcs=false: no VCS stamp. The stamp would say vcs.modified=true
//     for any uncommitted file in the tree, even one the binary does not
//     build from, so one commit would give two binaries; the image's
//     org.opencontainers.image.revision label says the commit instead.
//
// allotd and allotctl are also stripped (-s -w): nothing reads their
// symbols in a container, and it saves 30% of their size (allotctl: 14.9
// to 10.3 MB). The two modules keep theirs, as `make build-filter` and
// `make build-native` do.
type Build struct {
	// Root is the repository's root, the directory of the main module.
	Root string
	// Out is the directory the artifacts are written to.
	Out string
	// Env is added to this process's environment for every go build, e.g.
	// GOCACHE=<empty dir> to rebuild every package.
	Env []string
	// Log receives the commands and the compilers' output (nil: discarded).
	Log io.Writer
}

// Run builds the artifacts into b.Out.
func (b Build) Run(ctx context.Context) error {
	if err := os.MkdirAll(b.Out, 0o755); err != nil {
		return err
	}
	out, err := filepath.Abs(b.Out)
	if err != nil {
		return err
	}
	common := []string{"-trimpath", "-buildvcs=false"}
	steps := []struct {
		env  []string
		args []string
	}{
		{
			env:  []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH},
			args: append(common, "-ldflags=-s -w -buildid=", "-o", out+"/", "./control-plane/cmd/allotd", "./control-plane/cmd/allotctl"),
		},
		{
			env:  []string{"GOOS=wasip1", "GOARCH=wasm"},
			args: append(common, "-buildmode=c-shared", "-ldflags=-buildid=", "-o", filepath.Join(out, WasmFile), "./filter"),
		},
		{
			env:  []string{"CGO_ENABLED=1", "GOOS=linux", "GOARCH=" + runtime.GOARCH},
			args: append(common, "-buildmode=c-shared", "-ldflags=-buildid=", "-o", filepath.Join(out, NativeFile), "./filter/native"),
		},
	}
	logw := b.Log
	if logw == nil {
		logw = io.Discard
	}
	for _, s := range steps {
		args := append([]string{"build"}, s.args...)
		env := append(append(os.Environ(), b.Env...), s.env...)
		fmt.Fprintf(logw, "%s go %s\n", strings.Join(append(b.Env, s.env...), " "), strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = b.Root
		cmd.Env = env
		cmd.Stdout = logw
		var stderr strings.Builder
		cmd.Stderr = io.MultiWriter(logw, &stderr)
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
		}
	}
	return nil
}
