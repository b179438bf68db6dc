package variant

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/nativemod"
)

// The native variants load Envoy dynamic modules (ABI v0.2.0, Envoy 1.40):
// Allot's (bin/liballot.so, `make build-native`), the minimal Go module N
// (bench/mindynmod) and the C module O (bench/cdynmod), the last two built
// by the suite into bench/raw/bin.
const (
	// ModuleSearchPathEnv is where Envoy looks for lib<name>.so.
	ModuleSearchPathEnv = "ENVOY_DYNAMIC_MODULES_SEARCH_PATH"
	// allotFilterName is the filter_name Allot's module serves.
	allotFilterName = "allot"
	// MetricsNamespace gives the module's counters the Wasm filter's names
	// (wasmcustom.allot.cache_hits, …).
	MetricsNamespace = "wasmcustom"
)

// AllotSO is Allot's dynamic module (bin/liballot.so).
func AllotSO(p *Paths) string { return p.AllotSO }

// MinDynmod is variant N's module, the minimal Go dynamic module.
func MinDynmod(p *Paths) string { return p.MinDynmod }

func cDynmod(p *Paths) string { return p.CDynmod }

func moduleName(so string) string {
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(so), "lib"), ".so")
}

// ModuleEnv is the environment Envoy needs for v: the directory of its
// dynamic module, if it loads one, and for Allot's, the warm path's switch
// (nativemod.WarmEnv) set either way — on, unless v.goPath — so that no
// figure depends on the module's default.
func ModuleEnv(v Variant, p *Paths) []string {
	if v.Module == nil {
		return nil
	}
	so := v.Module(p)
	env := []string{ModuleSearchPathEnv + "=" + filepath.Dir(so)}
	if moduleName(so) == allotFilterName { // bin/liballot.so or its allotfault build
		env = append(env, nativemod.WarmEnv+"="+warmSwitch(!v.GoPath))
	}
	return env
}

// AllotFaultSO is Allot's dynamic module built with -tags allotfault
// (buildFaultModule), which the memory section counts C's hits with.
func AllotFaultSO(p *Paths) string { return p.AllotFaultSO }

// FaultHeader is nativemod.FaultHeader, defined in the allotfault build
// only: a request carrying it with the value "read" makes Go's header read
// panic, so that a request entering Go fails open (counted) while one the
// warm path serves in C never sees Go.
const FaultHeader = "x-allot-test-fault"

// warmSwitch is nativemod.WarmEnv's value that turns the warm path on or
// off.
func warmSwitch(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// ModuleFilter renders an http_filters entry loading the dynamic module so
// (found as lib<name>.so through moduleEnv) with filter_config cfg, a
// google.protobuf.Any's JSON (nil: none). do_not_close is mandatory for Go
// modules: a Go runtime cannot be unloaded.
func ModuleFilter(so func(*Paths) string, cfg map[string]any) func(*Paths) ([]any, error) {
	return func(p *Paths) ([]any, error) {
		name := moduleName(so(p))
		typed := map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
			"dynamic_module_config": map[string]any{
				"name": name, "do_not_close": true, "metrics_namespace": MetricsNamespace,
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

// NativeAllot renders Allot's dynamic module with the FilterConfig of the
// Wasm variants with n experiments in shape s, as the JSON the control
// plane renders (translate.ConfigJSON) in the filter_config Struct.
func NativeAllot(n int, s shape) func(*Paths) ([]any, error) { return NativeAllotOf(AllotSO, n, s) }

// NativeAllotOf is nativeAllot with the build of Allot's module so.
func NativeAllotOf(so func(*Paths) string, n int, s shape) func(*Paths) ([]any, error) {
	return func(p *Paths) ([]any, error) {
		cfg, err := allotConfig(n, s)
		if err != nil {
			return nil, err
		}
		js, err := translate.ConfigJSON(cfg)
		if err != nil {
			return nil, fmt.Errorf("native filter config: %w", err)
		}
		return ModuleFilter(so, map[string]any{"@type": "type.googleapis.com/google.protobuf.Struct", "value": json.RawMessage(js)})(p)
	}
}
