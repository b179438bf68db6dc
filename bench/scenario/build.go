package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/harness"
)

// CheckTools fails unless Envoy (o.Envoy) runs and taskset is installed.
func CheckTools(o variant.Options) error {
	if _, err := os.Stat(o.Envoy); err != nil {
		return fmt.Errorf("envoy not found at %s (%v): run `make envoy` or set ENVOY_BIN", o.Envoy, err)
	}
	if out, err := exec.Command(o.Envoy, "--version").CombinedOutput(); err != nil {
		return fmt.Errorf("%s --version: %w\n%s", o.Envoy, err, out)
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return errors.New("taskset not found (util-linux): it pins Envoy and the load generator to separate CPUs")
	}
	return nil
}

// buildFor builds what the variants vs load besides bin/allot.wasm and
// the minimal Wasm filter: the dynamic modules (buildModules), the
// proxied variants' upstream and Y's module (buildNoResponse). It returns the commands, for the report.
func buildFor(ctx context.Context, o variant.Options, p *variant.Paths, vs []variant.Variant) ([]string, error) {
	var cmds []string
	if slices.ContainsFunc(vs, func(v variant.Variant) bool { return v.Module != nil }) {
		c, err := buildModules(ctx, o, p)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, c...)
	}
	if slices.ContainsFunc(vs, func(v variant.Variant) bool { return v.Upstream }) {
		cmd := "go build -trimpath -o bench/raw/bin/allot-upstream ./bench/cmd/allot-upstream"
		if err := goBuild(ctx, o.Root, p.Upstream, "./bench/cmd/allot-upstream", false); err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		cmds = append(cmds, cmd)
	}
	if slices.ContainsFunc(vs, func(v variant.Variant) bool { return v.NoResponse }) {
		c, err := buildNoResponse(ctx, o, p)
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return cmds, nil
}

// goBuild builds package pkg of the module in dir into out; with wasm, as
// a proxy-wasm module (wasip1, c-shared), the way `make build-filter` does.
func goBuild(ctx context.Context, dir, out, pkg string, wasm bool) error {
	if wasm {
		return harness.GoBuild(ctx, dir, out, pkg, []string{"-buildmode=c-shared", "-trimpath"}, "GOOS=wasip1", "GOARCH=wasm")
	}
	return harness.GoBuild(ctx, dir, out, pkg, []string{"-trimpath"})
}

const (
	// cModuleSource is variant O's module, relative to the repository.
	cModuleSource = "bench/cdynmod/cdynmod.c"
)

// buildFaultModule builds Allot's dynamic module with -tags allotfault into
// p.allotFaultSO and returns the command, for the report.
func buildFaultModule(ctx context.Context, o variant.Options, p *variant.Paths) (string, error) {
	if err := harness.GoBuild(ctx, o.Root, p.AllotFaultSO, "./filter/native", []string{"-tags", "allotfault", "-buildmode=c-shared", "-trimpath"}, "CGO_ENABLED=1"); err != nil {
		return "", err
	}
	return "CGO_ENABLED=1 go build -tags allotfault -buildmode=c-shared -trimpath -o bench/raw/bin/allotfault/liballot.so ./filter/native", nil
}

// buildModules builds variants N's and O's modules into bench/raw/bin and
// checks that Allot's is there; it returns the commands, for the report.
func buildModules(ctx context.Context, o variant.Options, p *variant.Paths) ([]string, error) {
	if _, err := os.Stat(p.AllotSO); err != nil {
		return nil, fmt.Errorf("allot's native module not built (%v): run `make build-native`", err)
	}
	if err := harness.GoBuild(ctx, o.Root, p.MinDynmod, "./bench/mindynmod", []string{"-buildmode=c-shared", "-trimpath"}, "CGO_ENABLED=1"); err != nil {
		return nil, err
	}
	if err := harness.BuildCShared(ctx, o.Root, p.CDynmod, cModuleSource); err != nil {
		return nil, err
	}
	return []string{
		"CGO_ENABLED=1 go build -buildmode=c-shared -trimpath -o bench/raw/bin/libmindynmod.so ./bench/mindynmod",
		"gcc " + strings.Join(harness.CSharedFlags, " ") + " -o bench/raw/bin/libcdynmod.so " + cModuleSource,
	}, nil
}
