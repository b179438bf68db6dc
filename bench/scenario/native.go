package scenario

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/harness"
)

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
