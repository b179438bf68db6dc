// Package variant is the benchmark's catalogue: the variants by letter (All:
// A the baseline, B-D Envoy's native filters, E-M the Wasm and native
// floors, the Allot artifacts and their cost variants), each with the Envoy
// filters it configures, the header it must add (Expect) and what it
// measures; the filter configurations and bootstraps they render; the
// paths of the artifacts they load (Paths); the expected assignments
// (HashExpect, WithExpect); the sticky cookies and observed outcomes some
// variants send; and a run's Options.
//
// It is the bottom of the benchmark: it starts no process and imports no
// other bench package but floor and load (the request shapes). scenario
// runs the variants, report shows them.
package variant

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/bench/floor"
	"github.com/allotmesh/allot/control-plane/translate"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// Wire names every variant shares.
const (
	// BenchHeader is the header each variant adds (Allot: experiment key
	// "bench"); the route echoes it back as x-seen for the pre-flight check.
	BenchHeader = "x-experiment-bench"
	SeenHeader  = "x-seen"
	// DictHeader is Allot's dictionary header; the route echoes it as
	// seenDictHeader, which the lean variants are checked by.
	DictHeader     = "x-experiments"
	SeenDictHeader = "x-seen-dict"
	// PreflightHeader marks the pre-flight requests: only they take the
	// route that echoes, so timed requests pay for no echo.
	PreflightHeader = "x-preflight"
	benchSeed       = "bench"
	// WarmIDs is how many distinct user ids every variant but H cycles
	// through.
	WarmIDs = 1000
	// upstreamCluster is the cluster of the upstream the proxied variants
	// (a, p) route to.
	upstreamCluster = "upstream"
)

// RequestHeaders are sent with every request (besides x-user-id): the
// attributes the 50-experiment configuration targets.
var RequestHeaders = [][2]string{{"x-country", "US"}, {"x-platform", "ios"}, {"x-app-version", "2.3.1"}}

// Variant is one benchmarked Envoy configuration.
type Variant struct {
	// ID is the report's letter, Name its description.
	ID, Name string
	// Filters are the HTTP filters before the router (JSON objects).
	Filters func(env *Paths) ([]any, error)
	// Authz starts the ext_authz service (variant D).
	Authz bool
	// Cold sends a new user id on every request (variant H).
	Cold bool
	// Allot is the number of experiments in Allot's configuration (0: not
	// Allot); the expected header comes from the engine.
	Allot int
	// Lean configures Allot with the dictionary header only and no
	// exposure filter state; the pre-flight reads the dictionary.
	Lean bool
	// Sticky configures Allot with the bench's sticky cookie (sticky.go).
	// Its requests carry no cookie (new units: every response sets one)
	// unless returning is set: then each carries its unit's valid cookie,
	// as a browser does after its first response.
	Sticky, Returning bool
	// Pool is how many user ids a warm variant cycles through (0:
	// warmIDs).
	Pool int
	// NoResponse runs Allot's Wasm module built with -tags
	// allot_noresponse (p.noRespWasm): without the proxy_on_response_headers
	// export.
	NoResponse bool
	// Observe configures Allot with observedKeys observed (observe.go);
	// the pre-flight then checks their outcome stats too.
	Observe bool
	// Cost marks a variant of the cost tables (report.stickyRows,
	// report.observeRows), set against a baseline measured in the same
	// rounds: measured in the interleaved section only, for its CPU and
	// throughput.
	Cost bool
	// Expect is the x-seen value wanted for a user id.
	Expect func(id string) (string, error)
	// Cookie, when set, is the Cookie header the pre-flight sends for a
	// user id; setCookie the Set-Cookie its response must carry (nil:
	// none). withCookies sets them for the sticky variants.
	Cookie, SetCookie func(id string) (string, error)
	// FloorOf names the Allot variants whose writes this floor variant
	// replays (bench/floor), warm and cold. Floor variants are measured only in the
	// interleaved section, which the targets use.
	floorOf string
	// floorRef is the minimal filter a floor variant builds on, the
	// yardstick of its table row: E (the default) or N.
	floorRef string
	// nativeOf names the floor variant whose writes this variant makes
	// with Envoy's native filters instead of from a Wasm VM; measured in
	// the interleaved section only, like the floors.
	nativeOf string
	// probe marks a floor of the native host (N, O, o, b): measured in the
	// interleaved section only, for its CPU, like the Wasm floors.
	probe bool
	// diagnostic marks a variant only `make bench-floors` (-floors)
	// measures: its question is answered, and make bench's time goes to
	// the targets.
	diagnostic bool
	// Module is the Envoy dynamic module the variant loads (nil: none);
	// Envoy finds it through moduleEnv.
	Module func(*Paths) string
	// WasmTwin names the Wasm variant a dynamic-module variant does the
	// work of.
	WasmTwin string
	// GoPath runs Allot's dynamic module with its warm path off
	// (nativemod.WarmEnv=0: every request enters Go, as before #37); every
	// other variant loading bin/liballot.so runs it on (=1). moduleEnv
	// sets the variable either way, whatever Envoy's default.
	GoPath bool
	// OFREP configures Allot with the OFREP endpoint on (ofrep.go) and
	// makes every request a bulk evaluation (POST OFREPBulkPath) of the
	// unit's context instead of a header request; the pre-flight checks
	// the answer's flags against Flags.
	OFREP bool
	// Flags, for an OFREP variant, is every experiment's expected
	// variation for a unit id ("" when not in it), from the engine.
	Flags func(id string) (map[string]string, error)
	// Upstream routes the variant's requests to a local upstream
	// (bench/cmd/allot-upstream, startUpstream) instead of a
	// direct_response.
	Upstream bool
}

// InterleavedOnly says whether v is measured in the interleaved section
// only (the floors, their native counterpart and the stickiness variants),
// not in the rounds, and there for its CPU only (no latency slices).
func (v Variant) InterleavedOnly() bool {
	return v.floorOf != "" || v.nativeOf != "" || v.probe || v.Cost
}

// Info is what the report keeps of v.
func (v Variant) Info() Info {
	return Info{ID: v.ID, Name: v.Name, FloorOf: v.floorOf, FloorRef: v.floorRef, NativeOf: v.nativeOf, Probe: v.probe, WasmTwin: v.WasmTwin,
		Cost: v.Cost}
}

// Paths are the files and ports the filter configurations refer to.
type Paths struct {
	AllotWasm, MinWasm string
	BaseWasm           string // a comparison's base build (scenario.RunCompare)
	// BaseSO is a comparison's base build of Allot's dynamic module, named
	// liballot.so in a directory of its own (Envoy finds a module by name).
	BaseSO string
	// NoRespWasm is Allot's module built with -tags allot_noresponse
	// (variant Y), built by the suite.
	NoRespWasm string
	// AllotSO is Allot's dynamic module (make build-native); minDynmod
	// and cDynmod are variants N's and O's, built by the suite.
	AllotSO, MinDynmod, CDynmod string
	// AllotFaultSO is Allot's module built with -tags allotfault
	// (buildFaultModule), built by the suite for the memory section.
	AllotFaultSO string
	// Upstream is the proxied variants' upstream
	// (bench/cmd/allot-upstream), built by the suite.
	Upstream  string
	AuthzPort int
	Raw       string
}

// ByID is variant id of the catalogue with its expectations (WithExpect).
func ByID(id string) (Variant, error) {
	all := All()
	i := slices.IndexFunc(all, func(v Variant) bool { return v.ID == id })
	if i < 0 {
		return Variant{}, fmt.Errorf("no variant %s", id)
	}
	return WithExpect(all[i])
}

// All is the catalogue: every variant, in letter order.
func All() []Variant {
	return []Variant{
		{ID: "A", Name: "no filter (baseline)", Filters: func(*Paths) ([]any, error) { return nil, nil },
			Expect: func(string) (string, error) { return "", nil }},
		{ID: "B", Name: "native header_mutation, one constant header", Filters: headerMutation,
			Expect: func(string) (string, error) { return "treatment", nil }},
		{ID: "b", Name: "B widened: native header_mutation adding the headers Q adds for a typical unit (U's write script, constant values); the floor of Q's writes",
			Filters: widenedHeaderMutation(func() []byte { return FilterConfigJSON(50) }), Expect: nativeExpect, probe: true},
		{ID: "C", Name: "Lua: FNV-1a of x-user-id, one header", Filters: lua, Expect: HashExpect},
		{ID: "D", Name: "ext_authz (gRPC) to a local Go service running Allot's engine, 50 experiments", Filters: extAuthz,
			Authz: true, Allot: 50},
		{ID: "E", Name: "minimal Go Wasm filter: hash one id, add one header", Filters: MinWasm, Expect: HashExpect},
		{ID: "F", Name: "Allot, 1 running experiment", Filters: WasmAllot(MainWasm, 1, Typical), Allot: 1},
		{ID: "G", Name: "Allot, 50 experiments, warm cache (1,000 user ids)", Filters: WasmAllot(MainWasm, 50, Typical), Allot: 50},
		{ID: "H", Name: "Allot, 50 experiments, cold cache (new user id per request)", Filters: WasmAllot(MainWasm, 50, Typical), Allot: 50, Cold: true},
		{ID: "I", Name: "as G, lean: dictionary header only, no exposure filter state", Filters: WasmAllot(MainWasm, 50, lean), Allot: 50, Lean: true},
		{ID: "J", Name: "as H, lean: dictionary header only, no exposure filter state", Filters: WasmAllot(MainWasm, 50, lean), Allot: 50, Lean: true, Cold: true},
		{ID: "K", Name: "floor of G: E's read and hash, then the writes G makes for a typical unit, with the same host calls; none of Allot's work",
			Filters: floorFilter(func() []byte { return FilterConfigJSON(50) }), Expect: HashExpect, floorOf: "GH"},
		{ID: "L", Name: "floor of I: as K, with the writes I makes (the dictionary and version headers)",
			Filters: floorFilter(func() []byte { return LeanConfigJSON(50) }), Expect: HashExpect, Lean: true, floorOf: "IJ", diagnostic: true},
		{ID: "M", Name: "K's writes made natively: header_mutation adds the same headers (constant values), set_filter_state stores the exposure value; no Wasm",
			Filters: nativeFilters(func() []byte { return FilterConfigJSON(50) }), Expect: nativeExpect, nativeOf: "K", diagnostic: true},
		{ID: "N", Name: "minimal Go dynamic module (bench/mindynmod): E's work on Envoy's native host",
			Filters: ModuleFilter(MinDynmod, nil), Module: MinDynmod, Expect: HashExpect, probe: true, WasmTwin: "E"},
		{ID: "O", Name: "N's work in C (bench/cdynmod): the floor of Envoy's native host",
			Filters: ModuleFilter(cDynmod, nil), Module: cDynmod, Expect: HashExpect, probe: true},
		{ID: "o", Name: "O widened: O's read and hash, then U's write script (the headers, exposure filter state and route clear Q writes for a typical unit) with the callbacks Allot's C warm path makes them with; the floor of Q's writes through the dynamic-modules ABI",
			Filters: nativeFloorFilter(cDynmod, func() []byte { return FilterConfigJSON(50) }), Module: cDynmod, Expect: HashExpect, probe: true},
		{ID: "P", Name: "Allot native (bin/liballot.so), 1 running experiment", Filters: NativeAllot(1, Typical), Module: AllotSO,
			Allot: 1, WasmTwin: "F"},
		{ID: "Q", Name: "Allot native, 50 experiments, warm cache (1,000 user ids), warm path on", Filters: NativeAllot(50, Typical), Module: AllotSO,
			Allot: 50, WasmTwin: "G"},
		{ID: "R", Name: "Allot native, 50 experiments, cold cache (new user id per request), warm path on", Filters: NativeAllot(50, Typical), Module: AllotSO,
			Allot: 50, Cold: true, WasmTwin: "H"},
		{ID: "S", Name: "as Q, lean: dictionary header only, no exposure filter state", Filters: NativeAllot(50, lean), Module: AllotSO,
			Allot: 50, Lean: true, WasmTwin: "I"},
		{ID: "T", Name: "as R, lean: dictionary header only, no exposure filter state", Filters: NativeAllot(50, lean), Module: AllotSO,
			Allot: 50, Lean: true, Cold: true, WasmTwin: "J"},
		// The warm path's rows: Q–T with it off, each against its letter
		// measured in the same rounds (report.warmRows).
		{ID: "q", Name: "Q with the warm path off: every request enters Go", Filters: NativeAllot(50, Typical), Module: AllotSO,
			Allot: 50, GoPath: true, Cost: true},
		{ID: "r", Name: "R with the warm path off", Filters: NativeAllot(50, Typical), Module: AllotSO,
			Allot: 50, Cold: true, GoPath: true, Cost: true},
		{ID: "s", Name: "S with the warm path off", Filters: NativeAllot(50, lean), Module: AllotSO,
			Allot: 50, Lean: true, GoPath: true, Cost: true},
		{ID: "t", Name: "T with the warm path off", Filters: NativeAllot(50, lean), Module: AllotSO,
			Allot: 50, Lean: true, Cold: true, GoPath: true, Cost: true},
		// The proxied pair: A and Q routed to a local upstream instead of
		// a direct_response (report.proxiedRows).
		{ID: "a", Name: "A routed to a local upstream (bench/cmd/allot-upstream, on the load generator's CPU) instead of a direct_response",
			Filters: func(*Paths) ([]any, error) { return nil, nil }, Expect: func(string) (string, error) { return "", nil },
			Upstream: true, Cost: true},
		{ID: "p", Name: "Q routed to the same kind of upstream: Allot native, 50 experiments, warm cache, warm path on",
			Filters: NativeAllot(50, Typical), Module: AllotSO, Allot: 50, Upstream: true, Cost: true},
		{ID: "U", Name: "floor of Q: N's read and hash, then the writes Q makes for a typical unit, with the callbacks Allot native makes them with; none of Allot's work",
			Filters: nativeFloorFilter(MinDynmod, func() []byte { return FilterConfigJSON(50) }), Module: MinDynmod, Expect: HashExpect,
			floorOf: "QR", floorRef: "N"},
		// The stickiness rows: each against the baseline report.stickyRows
		// names, measured in the same interleaved rounds.
		{ID: "V", Name: "as G with a sticky cookie, returning units: every request carries its unit's valid cookie (warm cache)",
			Filters: WasmAllot(MainWasm, 50, sticky), Allot: 50, Sticky: true, Returning: true, Cost: true},
		{ID: "W", Name: "as V, cache missing: " + Thousands(StickyPool) + " units each with its valid cookie, cycled (more than the cache holds): verify, decode and sticky evaluation on every request",
			Filters: WasmAllot(MainWasm, 50, sticky), Allot: 50, Sticky: true, Returning: true, Pool: StickyPool, Cost: true},
		{ID: "X", Name: "as H with a sticky cookie, new units: no cookie, so every response sets one",
			Filters: WasmAllot(MainWasm, 50, sticky), Allot: 50, Sticky: true, Cold: true, Cost: true},
		{ID: "Y", Name: "G on allot.wasm built with -tags allot_noresponse: no proxy_on_response_headers export",
			Filters: WasmAllot(noRespWasm, 50, Typical), Allot: 50, NoResponse: true, Cost: true},
		{ID: "v", Name: "V on Allot native", Filters: NativeAllot(50, sticky), Module: AllotSO,
			Allot: 50, Sticky: true, Returning: true, Cost: true, WasmTwin: "V"},
		{ID: "w", Name: "W on Allot native", Filters: NativeAllot(50, sticky), Module: AllotSO,
			Allot: 50, Sticky: true, Returning: true, Pool: StickyPool, Cost: true, WasmTwin: "W"},
		{ID: "x", Name: "X on Allot native", Filters: NativeAllot(50, sticky), Module: AllotSO,
			Allot: 50, Sticky: true, Cold: true, Cost: true, WasmTwin: "X"},
		// The observe rows: each against G's configuration, where no
		// experiment observes (report.observeRows).
		{ID: "Z", Name: "as G with 5 of its 50 experiments `observe: true` (" + strings.Join(ObservedKeys, ", ") + "), each matching every warm unit's requests",
			Filters: WasmAllot(MainWasm, 50, observed), Allot: 50, Observe: true, Cost: true},
		{ID: "z", Name: "Z on Allot native", Filters: NativeAllot(50, observed), Module: AllotSO,
			Allot: 50, Observe: true, Cost: true, WasmTwin: "Z"},
		// The OFREP rows: a bulk evaluation against a header request of
		// the same configuration and units, G and Q (report.ofrepRows).
		// e routes /ofrep/ as envoy-configs/sidecar.yaml does, to a
		// cluster that never connects: the Wasm module gets the body only
		// once the headers went on, so a direct_response route would
		// answer before it (ofrep.go).
		{ID: "e", Name: "as G with OFREP on, each request a bulk evaluation (POST " + OFREPBulkPath + ", the unit's id and attributes as its context); Envoy's buffer filter on for /ofrep/ alone, routed to a cluster that never connects, as the sidecar routes it",
			Filters: wasmOFREP, Allot: 50, OFREP: true, Cost: true},
		{ID: "f", Name: "e on Allot native (Q's configuration with OFREP on; no buffer filter)", Filters: NativeAllot(50, ofrepShape), Module: AllotSO,
			Allot: 50, OFREP: true, Cost: true, WasmTwin: "e"},
	}
}

// nativeVariation is the variation the native variant M writes wherever
// the floor script has floor.Var: a constant, since Envoy's native filters
// cannot hash.
const nativeVariation = "treatment"

func nativeExpect(string) (string, error) { return nativeVariation, nil }

// nativeFilters renders, for the writes Allot makes under cfg for a typical
// unit (floorWrites), the native filters that make the same writes:
// header_mutation adding the headers and set_filter_state storing each
// property as a string, with nativeVariation for the unit's variation.
func nativeFilters(cfg func() []byte) func(*Paths) ([]any, error) {
	return func(*Paths) ([]any, error) {
		muts, states, err := nativeWrites(cfg())
		if err != nil {
			return nil, err
		}
		filters := []any{headerMutationFilter(muts)}
		if len(states) > 0 {
			filters = append(filters, map[string]any{
				"name": "envoy.filters.http.set_filter_state",
				"typed_config": map[string]any{
					"@type":              "type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config",
					"on_request_headers": states,
				},
			})
		}
		return filters, nil
	}
}

// widenedHeaderMutation is variant B widened to the headers Allot adds
// under cfg for a typical unit: nativeFilters' header_mutation alone,
// without the filter state (the floor is the headers' writes).
func widenedHeaderMutation(cfg func() []byte) func(*Paths) ([]any, error) {
	return func(*Paths) ([]any, error) {
		muts, _, err := nativeWrites(cfg())
		if err != nil {
			return nil, err
		}
		return []any{headerMutationFilter(muts)}, nil
	}
}

// nativeWrites are the writes Allot makes under cfg for a typical unit
// (floorWrites) as Envoy's native filters make them: header_mutation's
// mutations and set_filter_state's entries, with nativeVariation for the
// unit's variation.
func nativeWrites(cfg []byte) (muts, states []any, err error) {
	sc, _, _, err := FloorWrites(cfg)
	if err != nil {
		return nil, nil, err
	}
	value := func(w floor.Write) (string, error) {
		v := strings.Replace(w.Value, floor.Var, nativeVariation, 1)
		// Both filters read their values as substitution format
		// strings; Allot's values carry no command.
		if strings.Contains(v, "%") {
			return "", fmt.Errorf("native writes: value of %s has a %%: %q", w.Name, v)
		}
		return v, nil
	}
	for _, h := range sc.Headers {
		v, err := value(h)
		if err != nil {
			return nil, nil, err
		}
		muts = append(muts, setHeader(h.Name, v))
	}
	for _, pr := range sc.Props {
		v, err := value(pr)
		if err != nil {
			return nil, nil, err
		}
		states = append(states, map[string]any{
			"object_key":    pr.Name,
			"factory_key":   "envoy.string",
			"format_string": map[string]any{"text_format_source": map[string]any{"inline_string": v}},
		})
	}
	return muts, states, nil
}

func headerMutation(*Paths) ([]any, error) {
	return []any{headerMutationFilter([]any{setHeader(BenchHeader, "treatment")})}, nil
}

// headerMutationFilter is a header_mutation filter making the request
// mutations muts.
func headerMutationFilter(muts []any) map[string]any {
	return map[string]any{
		"name": "envoy.filters.http.header_mutation",
		"typed_config": map[string]any{
			"@type":     "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
			"mutations": map[string]any{"request_mutations": muts},
		},
	}
}

// setHeader is a header_mutation mutation that sets header key to value.
func setHeader(key, value string) map[string]any {
	return map[string]any{"append": map[string]any{
		"header":        map[string]any{"key": key, "value": value},
		"append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
	}}
}

// luaScript is what a mesh admin might write by hand: GrowthBook's hash v1
// (FNV-1a 32 of id..seed, modulo 1000) in LuaJIT's 32-bit bit operations.
// x * 16777619 mod 2^32 is computed as x*403 + (x << 24) to stay exact in
// doubles.
const luaScript = `
local bit = require("bit")
function envoy_on_request(handle)
  local headers = handle:headers()
  local id = headers:get("x-user-id")
  if id == nil or id == "" then return end
  local s = id .. "` + benchSeed + `"
  local x = 2166136261
  for i = 1, #s do
    x = bit.bxor(x, s:byte(i)) % 4294967296
    x = (x * 403 + bit.lshift(x, 24)) % 4294967296
  end
  if x % 1000 < 500 then
    headers:add("` + BenchHeader + `", "control")
  else
    headers:add("` + BenchHeader + `", "treatment")
  end
end
`

func lua(*Paths) ([]any, error) {
	return []any{map[string]any{
		"name": "envoy.filters.http.lua",
		"typed_config": map[string]any{
			"@type":               "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua",
			"default_source_code": map[string]any{"inline_string": luaScript},
		},
	}}, nil
}

func extAuthz(p *Paths) ([]any, error) {
	return []any{map[string]any{
		"name": "envoy.filters.http.ext_authz",
		"typed_config": map[string]any{
			"@type":                 "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
			"transport_api_version": "V3",
			"grpc_service": map[string]any{
				"envoy_grpc": map[string]any{"cluster_name": "authz"},
				"timeout":    "2s",
			},
		},
	}}, nil
}

// wasmFilter renders an http_filters entry for a Wasm module with the
// FilterConfig cfg (nil: an empty Struct), built by the control plane's own
// translate.WasmExtension, exactly as allotd would push it over ECDS.
func wasmFilter(wasm string, cfg *filterv1.FilterConfig) ([]any, error) {
	if cfg == nil {
		cfg = &filterv1.FilterConfig{}
	}
	ext, err := translate.ExtensionConfig(cfg, translate.Mesh{WasmPath: wasm})
	if err != nil {
		return nil, err
	}
	return typedFilter(ext)
}

// typedFilter renders an http_filters entry for an extension configuration.
func typedFilter(ext *corev3.TypedExtensionConfig) ([]any, error) {
	typed, err := protojson.Marshal(ext.GetTypedConfig())
	if err != nil {
		return nil, fmt.Errorf("marshal wasm filter: %w", err)
	}
	return []any{map[string]any{"name": ext.GetName(), "typed_config": json.RawMessage(typed)}}, nil
}

// MinWasm is variant E's filter: the minimal Go Wasm module.
func MinWasm(p *Paths) ([]any, error) { return wasmFilter(p.MinWasm, nil) }

// MainWasm is Allot's Wasm module (bin/allot.wasm).
func MainWasm(p *Paths) string { return p.AllotWasm }

func noRespWasm(p *Paths) string { return p.NoRespWasm }

// WasmAllot renders Allot's Wasm module wasm(p) with the n-experiment
// FilterConfig in shape s.
func WasmAllot(wasm func(*Paths) string, n int, s shape) func(*Paths) ([]any, error) {
	return func(p *Paths) ([]any, error) {
		cfg, err := allotConfig(n, s)
		if err != nil {
			return nil, err
		}
		return wasmFilter(wasm(p), cfg)
	}
}

// shape is how a variant's FilterConfig departs from the typical one.
type shape int

const (
	// Typical is filterConfigJSON's configuration.
	Typical shape = iota
	// lean switches off the two per-request costs a mesh admin can: one
	// header per assignment (only the dictionary is added) and the
	// exposure filter state (the access log reads the dictionary header).
	lean
	// sticky adds the bench's sticky cookie (sticky.go).
	sticky
	// observed marks observedKeys `observe: true` (observe.go).
	observed
	// ofrepShape turns the OFREP endpoint on (ofrep.go).
	ofrepShape
)

// allotConfig is the n-experiment FilterConfig in shape s.
func allotConfig(n int, s shape) (*filterv1.FilterConfig, error) {
	cfg, err := filterConfig(n)
	if err != nil {
		return nil, err
	}
	switch s {
	case lean:
		cfg.AssignmentHeaders = filterv1.AssignmentHeaders_ASSIGNMENT_HEADERS_DICTIONARY
		cfg.DisableExposureState = true
	case sticky:
		cfg.StickyCookie = stickyCookie()
	case observed:
		if err := observe(cfg); err != nil {
			return nil, err
		}
	case ofrepShape:
		withOFREP(cfg)
	}
	return cfg, nil
}

// experimentsJSON returns n experiments with typical targeting. Experiment 0
// is "bench": two variations 50/50, hash v1, every US/iOS/≥2.1 unit — the
// same split the Lua and minimal Wasm filters compute. The others have three
// variations, 90 % coverage and conditions of which about a third match the
// benchmark's requests (country $in a list, platform $eq, version $vgte).
func experimentsJSON(n int) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		if i == 0 {
			sb.WriteString(`{"key":"bench","variations":["control","treatment"],"weights":[0.5,0.5],"hashVersion":1,
				"condition":{"country":{"$in":["US","CA","GB"]},"platform":{"$eq":"ios"},"version":{"$vgte":"2.1.0"}}}`)
			continue
		}
		countries := `["US","CA","GB","DE","FR","BR"]`
		if i%3 == 2 {
			countries = `["DE","FR","NL"]`
		}
		platform := "ios"
		if i%2 == 1 {
			platform = "android"
		}
		fmt.Fprintf(&sb, `{"key":"exp-%04d","variations":["control","treatment","alt"],"weights":[0.5,0.25,0.25],
			"hashVersion":%d,"coverage":0.9,
			"condition":{"country":{"$in":%s},"platform":{"$eq":%q},"version":{"$vgte":"2.%d.0"}}}`,
			i, 1+i%2, countries, platform, i%3)
	}
	sb.WriteByte(']')
	return sb.String()
}

// FilterConfigJSON is Allot's FilterConfig (proto3 JSON) with n experiments
// and the attributes mapped from headers.
func FilterConfigJSON(n int) []byte {
	return fmt.Appendf(nil, `{"version":"bench-%d","attributes":[
		{"name":"country","header":"x-country"},{"name":"platform","header":"x-platform"},
		{"name":"version","header":"x-app-version"}],"experiments":%s}`, n, experimentsJSON(n))
}

// LeanConfigJSON is filterConfigJSON(n) in the lean shape.
func LeanConfigJSON(n int) []byte {
	return append([]byte(`{"assignmentHeaders":"ASSIGNMENT_HEADERS_DICTIONARY","disableExposureState":true,`), FilterConfigJSON(n)[1:]...)
}

func filterConfig(n int) (*filterv1.FilterConfig, error) {
	cfg := &filterv1.FilterConfig{}
	if err := protojson.Unmarshal(FilterConfigJSON(n), cfg); err != nil {
		return nil, fmt.Errorf("filter config with %d experiments: %w", n, err)
	}
	return cfg, nil
}

// WriteBootstrap renders the bootstrap of filters (with the ext_authz
// cluster on authzPort and the upstream on upstreamPort, each when not 0)
// into p.raw/name.json and returns its path.
func WriteBootstrap(p *Paths, name string, filters func(*Paths) ([]any, error), authzPort, upstreamPort int) (string, error) {
	f, err := filters(p)
	if err != nil {
		return "", err
	}
	b, err := bootstrap(f, authzPort, upstreamPort)
	if err != nil {
		return "", err
	}
	path := filepath.Join(p.Raw, name+".json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// bootstrap renders Envoy's bootstrap (JSON) for a variant: one listener on
// 127.0.0.1 (port chosen by the kernel), the variant's filters, and two
// direct_response routes: pre-flight requests (x-preflight) get
// x-experiment-bench and x-experiments echoed as x-seen and x-seen-dict,
// timed requests take the plain one. With Envoy's buffer filter among
// filters (variant e) a third route, first, turns it on for OFREP's paths
// and routes them to a cluster that never connects, as envoy-configs'
// bootstraps do (ofrepRoute). With upstreamPort not 0 both routes
// go to the upstream on that port instead (HTTP/1.1), the pre-flight's
// still echoing the two headers.
func bootstrap(filters []any, authzPort, upstreamPort int) ([]byte, error) {
	filters = append(filters, map[string]any{
		"name":         "envoy.filters.http.router",
		"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
	})
	local := func(port int) map[string]any {
		return map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": port}}
	}
	// action is how both routes answer: directly, or from the upstream.
	action, answer := "direct_response", any(map[string]any{"status": 200, "body": map[string]any{"inline_string": "ok"}})
	if upstreamPort > 0 {
		action, answer = "route", map[string]any{"cluster": upstreamCluster}
	}
	echo := map[string]any{
		"match": map[string]any{"prefix": "/", "headers": []any{map[string]any{
			"name": PreflightHeader, "present_match": true,
		}}},
		action: answer,
		"response_headers_to_add": []any{map[string]any{
			"header":        map[string]any{"key": SeenHeader, "value": "%REQ(" + BenchHeader + ")%"},
			"append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
		}, map[string]any{
			"header":        map[string]any{"key": SeenDictHeader, "value": "%REQ(" + DictHeader + ")%"},
			"append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
		}},
	}
	route := map[string]any{"match": map[string]any{"prefix": "/"}, action: answer}
	routes := []any{echo, route}
	ofrep := ofrepRoute(filters)
	if ofrep != nil {
		routes = append([]any{ofrep}, routes...)
	}
	hcm := map[string]any{
		"@type":       "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix": "bench",
		"route_config": map[string]any{"name": "bench", "virtual_hosts": []any{map[string]any{
			"name": "bench", "domains": []any{"*"}, "routes": routes,
		}}},
		"http_filters": filters,
	}
	var clusters []any
	if authzPort > 0 {
		clusters = append(clusters, map[string]any{
			"name": "authz", "type": "STATIC", "connect_timeout": "1s",
			"typed_extension_protocol_options": map[string]any{
				"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
					"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
					"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}},
				},
			},
			"load_assignment": map[string]any{"cluster_name": "authz", "endpoints": []any{map[string]any{
				"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": local(authzPort)}}},
			}}},
		})
	}
	if ofrep != nil {
		clusters = append(clusters, ofrepNoneCluster())
	}
	if upstreamPort > 0 {
		clusters = append(clusters, map[string]any{
			"name": upstreamCluster, "type": "STATIC", "connect_timeout": "1s",
			"load_assignment": map[string]any{"cluster_name": upstreamCluster, "endpoints": []any{map[string]any{
				"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": local(upstreamPort)}}},
			}}},
		})
	}
	b := map[string]any{
		"admin": map[string]any{"address": local(0)},
		// As envoy-configs/ recommends: hand memory freed by the allocator
		// (V8's compilation of a Wasm module leaves tens of MiB) back to
		// the OS. The same for every variant.
		"memory_allocator_manager": map[string]any{"bytes_to_release": "67108864", "memory_release_interval": "1s"},
		"static_resources": map[string]any{
			"listeners": []any{map[string]any{
				"name": "bench", "address": local(0),
				"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
					"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm,
				}}}},
			}},
			"clusters": clusters,
		},
	}
	return json.MarshalIndent(b, "", " ")
}

// SelectVariants are A and the variants only names (all when empty), each
// with its pre-flight expectation. The diagnostic variants (L, M) are left
// out unless only names them or diagnostic is set.
func SelectVariants(only string, diagnostic bool) ([]Variant, error) {
	var vs []Variant
	for _, v := range All() {
		named := only != "" && strings.Contains(only, v.ID)
		if v.ID != "A" && (only != "" && !named || v.diagnostic && !named && !diagnostic) {
			continue
		}
		v, err := WithExpect(v)
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// WithExpect gives an Allot variant the pre-flight's expectation: the
// engine's assignment of each id and, with a sticky cookie, the cookies
// sent and set (withCookies).
func WithExpect(v Variant) (Variant, error) {
	if v.Allot > 0 {
		exp, err := engineExpect(v.Allot)
		if err != nil {
			return v, err
		}
		v.Expect = exp
	}
	if v.OFREP {
		flags, err := ofrepFlags(v.Allot)
		if err != nil {
			return v, err
		}
		v.Flags = flags
	}
	return withCookies(v)
}

// ids returns the x-user-id generator: warm variants cycle through units
// ids (unitID); cold ones never repeat one (seq makes them unique per run).
func ids(cold bool, units int, seq uint64) func([]byte, uint64) []byte {
	if cold {
		return func(dst []byte, i uint64) []byte {
			dst = append(dst, "cold-"...)
			dst = strconv.AppendUint(dst, seq, 10)
			dst = append(dst, '-')
			return strconv.AppendUint(dst, i, 10)
		}
	}
	n := uint64(units)
	return func(dst []byte, i uint64) []byte { return appendUnitID(dst, i%n) }
}

// appendUnitID appends warm unit n's id, user-<n>.
func appendUnitID(dst []byte, n uint64) []byte {
	return strconv.AppendUint(append(dst, "user-"...), n, 10)
}

// unitID is warm unit n's id.
func unitID(n uint64) string { return string(appendUnitID(nil, n)) }

// CheckIDs are the pre-flight's user ids: n of the warm ids (every
// stride-th) and, for a cold variant, n fresh ones named prefix-seq-i.
func CheckIDs(v Variant, n, stride int, prefix string, seq uint64) []string {
	var ids []string
	for i := range n {
		ids = append(ids, "user-"+strconv.Itoa(i*stride))
		if v.Cold {
			ids = append(ids, fmt.Sprintf("%s-%d-%d", prefix, seq, i))
		}
	}
	return ids
}
