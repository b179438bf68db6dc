package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/nativemod"
	"github.com/allotmesh/allot/internal/harness"
)

// The native variants load Envoy dynamic modules (ABI v0.2.0, Envoy 1.40):
// Allot's (bin/liballot.so, `make build-native`), the minimal Go module N
// (bench/mindynmod) and the C module O (bench/cdynmod), the last two built
// by the suite into bench/raw/bin.
const (
	// cModuleSource is variant O's module, relative to the repository.
	cModuleSource = "bench/cdynmod/cdynmod.c"
	// moduleSearchPathEnv is where Envoy looks for lib<name>.so.
	moduleSearchPathEnv = "ENVOY_DYNAMIC_MODULES_SEARCH_PATH"
	// allotFilterName is the filter_name Allot's module serves.
	allotFilterName = "allot"
	// metricsNamespace gives the module's counters the Wasm filter's names
	// (wasmcustom.allot.cache_hits, …).
	metricsNamespace = "wasmcustom"
)

func allotSO(p *paths) string   { return p.allotSO }
func minDynmod(p *paths) string { return p.minDynmod }
func cDynmod(p *paths) string   { return p.cDynmod }
func moduleName(so string) string {
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(so), "lib"), ".so")
}

// moduleEnv is the environment Envoy needs for v: the directory of its
// dynamic module, if it loads one, and for Allot's, the warm path's switch
// (nativemod.WarmEnv) set either way — on, unless v.goPath — so that no
// figure depends on the module's default.
func moduleEnv(v variant, p *paths) []string {
	if v.module == nil {
		return nil
	}
	so := v.module(p)
	env := []string{moduleSearchPathEnv + "=" + filepath.Dir(so)}
	if moduleName(so) == allotFilterName { // bin/liballot.so or its allotfault build
		env = append(env, nativemod.WarmEnv+"="+warmSwitch(!v.goPath))
	}
	return env
}

// allotFaultSO is Allot's dynamic module built with -tags allotfault
// (buildFaultModule), which the memory section counts C's hits with.
func allotFaultSO(p *paths) string { return p.allotFaultSO }

// faultHeader is nativemod.FaultHeader, defined in the allotfault build
// only: a request carrying it with the value "read" makes Go's header read
// panic, so that a request entering Go fails open (counted) while one the
// warm path serves in C never sees Go.
const faultHeader = "x-allot-test-fault"

// buildFaultModule builds Allot's dynamic module with -tags allotfault into
// p.allotFaultSO and returns the command, for the report.
func buildFaultModule(ctx context.Context, o Options, p *paths) (string, error) {
	if err := harness.GoBuild(ctx, o.Root, p.allotFaultSO, "./filter/native", []string{"-tags", "allotfault", "-buildmode=c-shared", "-trimpath"}, "CGO_ENABLED=1"); err != nil {
		return "", err
	}
	return "CGO_ENABLED=1 go build -tags allotfault -buildmode=c-shared -trimpath -o bench/raw/bin/allotfault/liballot.so ./filter/native", nil
}

// warmSwitch is nativemod.WarmEnv's value that turns the warm path on or
// off.
func warmSwitch(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// moduleFilter renders an http_filters entry loading the dynamic module so
// (found as lib<name>.so through moduleEnv) with filter_config cfg, a
// google.protobuf.Any's JSON (nil: none). do_not_close is mandatory for Go
// modules: a Go runtime cannot be unloaded.
func moduleFilter(so func(*paths) string, cfg map[string]any) func(*paths) ([]any, error) {
	return func(p *paths) ([]any, error) {
		name := moduleName(so(p))
		typed := map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
			"dynamic_module_config": map[string]any{
				"name": name, "do_not_close": true, "metrics_namespace": metricsNamespace,
			},
			"filter_name": name,
		}
		if cfg != nil {
			typed["filter_name"] = allotFilterName
			typed["filter_config"] = cfg
		}
		return []any{map[string]any{"name": allotFilterName, "typed_config": typed}}, nil
	}
}

// nativeAllot renders Allot's dynamic module with the FilterConfig of the
// Wasm variants with n experiments in shape s, as the JSON the control
// plane renders (translate.ConfigJSON) in the filter_config Struct.
func nativeAllot(n int, s shape) func(*paths) ([]any, error) { return nativeAllotOf(allotSO, n, s) }

// nativeAllotOf is nativeAllot with the build of Allot's module so.
func nativeAllotOf(so func(*paths) string, n int, s shape) func(*paths) ([]any, error) {
	return func(p *paths) ([]any, error) {
		cfg, err := allotConfig(n, s)
		if err != nil {
			return nil, err
		}
		js, err := translate.ConfigJSON(cfg)
		if err != nil {
			return nil, fmt.Errorf("native filter config: %w", err)
		}
		return moduleFilter(so, map[string]any{"@type": "type.googleapis.com/google.protobuf.Struct", "value": json.RawMessage(js)})(p)
	}
}

// buildModules builds variants N's and O's modules into bench/raw/bin and
// checks that Allot's is there; it returns the commands, for the report.
func buildModules(ctx context.Context, o Options, p *paths) ([]string, error) {
	if _, err := os.Stat(p.allotSO); err != nil {
		return nil, fmt.Errorf("allot's native module not built (%v): run `make build-native`", err)
	}
	if err := harness.GoBuild(ctx, o.Root, p.minDynmod, "./bench/mindynmod", []string{"-buildmode=c-shared", "-trimpath"}, "CGO_ENABLED=1"); err != nil {
		return nil, err
	}
	if err := harness.BuildCShared(ctx, o.Root, p.cDynmod, cModuleSource); err != nil {
		return nil, err
	}
	return []string{
		"CGO_ENABLED=1 go build -buildmode=c-shared -trimpath -o bench/raw/bin/libmindynmod.so ./bench/mindynmod",
		"gcc " + strings.Join(harness.CSharedFlags, " ") + " -o bench/raw/bin/libcdynmod.so " + cModuleSource,
	}, nil
}
