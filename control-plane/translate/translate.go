// Package translate turns experiments and mesh settings into the resources
// Envoy receives: the Allot filter configuration and the ECDS
// TypedExtensionConfig that carries it, inside Envoy's Wasm filter
// (WasmExtension) or its dynamic module filter (NativeExtension). Compile
// decodes and compiles a filter configuration with the filter's own
// decoder (filter/config) and engine, so every control-plane reader of a
// definition — admin validation and preview, allotctl eval, allotd's check
// of its mesh settings — accepts exactly what a proxy accepts; Validate is
// the check of one experiment every writer of a definition runs (the admin
// API on every write, allotctl offline); MeshHeaders counts the request
// headers the filter adds, for the admin API's per-service budget.
//
// It is pure: no I/O, no clock (callers pass the time), no store, xDS
// server or transport; what is true of one experiment alone (its
// lifecycle, its bounds) is package experiment's.
package translate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	dynmodextv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/dynamic_modules/v3"
	dynmodv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_modules/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	wasmextv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/wire"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// Wire names shared with the bootstraps in envoy-configs/.
const (
	// FilterName is the ECDS resource name the bootstraps subscribe to, the
	// Wasm plugin's name (it prefixes the filter's stats and filter state)
	// and the native module's filter_name.
	FilterName = "allot"
	// VMID is the Wasm VM id; proxies share a VM across configurations of
	// the same code.
	VMID = "allot"
	// WasmRuntime is the Wasm runtime Envoy runs the filter in.
	WasmRuntime = "envoy.wasm.runtime.v8"
	// NativeMetricsNamespace is the native module's metrics namespace
	// (wire.NativeNamespace): the namespace Envoy gives a Wasm plugin's
	// metrics, so both artifacts emit the same stat names.
	NativeMetricsNamespace = wire.NativeNamespace
)

// Mesh holds the mesh admin's settings that shape what each proxy receives.
type Mesh struct {
	// WasmPath is the Wasm filter module's path as the proxies see it.
	WasmPath string
	// NativePath is the native filter module's (the Envoy dynamic module's)
	// path as the proxies see it.
	NativePath string
	// Filter holds the filter settings every proxy receives (unit header,
	// header names, attribute sources, saved groups, cache size); its
	// version and experiments must be empty. Nil means the filter's
	// defaults. ParseMesh builds it from a mesh settings file.
	Filter *filterv1.FilterConfig
	// StickyKeys sign the sticky cookie (Filter.StickyCookie), the first
	// signing, every one verifying; ParseStickyKeys reads them from
	// allotd's -sticky-keys file. They are not mesh settings: the settings
	// file may be shared and versioned, a key file is a secret.
	StickyKeys []*filterv1.SigningKey
}

// ParseMesh decodes a mesh settings file (allotd -mesh, allotctl eval
// --mesh): a FilterConfig without version or experiments. It is decoded
// and checked by the filter's own decoder (config.Decode and Check), then
// by ValidateMesh; every problem is reported at once, each with its field
// path. The proto form is protojson of the same bytes once the decoder
// accepted them.
func ParseMesh(data []byte) (*filterv1.FilterConfig, error) {
	f, err := config.Decode(data)
	if err != nil {
		return nil, err
	}
	var errs []error
	if c := f.StickyCookie; c != nil {
		// The keys come from allotd's key file; the rest of the cookie's
		// settings are checked with a stand-in key.
		if len(c.Keys) > 0 {
			errs = append(errs, &engine.FieldError{Path: "stickyCookie.keys", Message: "come from allotd -sticky-keys (a secret), must be empty in the mesh settings"})
		}
		c.Keys = []config.SigningKey{{ID: "settings", Secret: make([]byte, config.MinSigningKeyBytes)}}
	}
	errs = append(errs, f.Check())
	cfg := &filterv1.FilterConfig{}
	if err := protojson.Unmarshal(data, cfg); err != nil {
		errs = append(errs, fmt.Errorf("decode as allot.filter.v1.FilterConfig: %w", err))
	} else {
		errs = append(errs, ValidateMesh(Mesh{Filter: cfg}))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParseStickyKeys decodes a sticky cookie key file (allotd -sticky-keys):
//
//	{"keys": [{"id": "2026-11", "secret": "<base64, at least 32 bytes>"}, ...]}
//
// The first key signs every cookie the proxies set, every key verifies:
// to rotate, add the new key second (every proxy then accepts its cookies),
// then move it first, then drop the old one once its cookies have expired.
// Every problem is reported at once, each with its field path.
func ParseStickyKeys(data []byte) ([]*filterv1.SigningKey, error) {
	var file struct {
		Keys []struct {
			ID     string `json:"id"`
			Secret []byte `json:"secret"`
		} `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("decode sticky keys: %w", err)
	}
	if len(file.Keys) == 0 {
		return nil, &engine.FieldError{Path: "keys", Message: "at least one key is required"}
	}
	keys := make([]config.SigningKey, len(file.Keys))
	out := make([]*filterv1.SigningKey, len(file.Keys))
	for i, k := range file.Keys {
		keys[i] = config.SigningKey{ID: k.ID, Secret: k.Secret}
		out[i] = &filterv1.SigningKey{Id: k.ID, Secret: k.Secret}
	}
	if err := config.CheckKeys("keys", keys); err != nil {
		return nil, err
	}
	return out, nil
}

// ValidateMesh checks what only the control plane requires of the mesh
// admin's filter settings: version and experiments are empty (the settings
// themselves are checked by the filter's decoder, see ParseMesh).
func ValidateMesh(m Mesh) error {
	f := m.Filter
	if f == nil {
		return nil
	}
	var errs []error
	if f.Version != "" {
		errs = append(errs, &engine.FieldError{Path: "version", Message: "set by the control plane, must be empty"})
	}
	if len(f.Experiments) > 0 {
		errs = append(errs, &engine.FieldError{Path: "experiments", Message: "come from the store, must be empty"})
	}
	return errors.Join(errs...)
}

// FilterConfig selects the experiments running at now that apply to proxies
// of cluster and builds their filter configuration: the mesh settings and
// each experiment's Definition, sorted by key. Its version is a digest of
// the content and both filter modules' paths, so the same definitions always
// give the same version, and a proxy of either artifact is reconfigured when
// its module moves. Both artifacts receive this configuration.
func FilterConfig(exps []*experimentv1.Experiment, cluster string, now time.Time, mesh Mesh) (*filterv1.FilterConfig, error) {
	cfg := &filterv1.FilterConfig{}
	if mesh.Filter != nil {
		cfg = proto.Clone(mesh.Filter).(*filterv1.FilterConfig)
		cfg.Version, cfg.Experiments = "", nil
		if cfg.StickyCookie != nil {
			cfg.StickyCookie.Keys = mesh.StickyKeys // part of the version: a new key reaches every proxy
		}
	}
	for _, e := range exps {
		if !experiment.Running(e, now) || !experiment.AppliesTo(e, cluster) {
			continue
		}
		cfg.Experiments = append(cfg.Experiments, experiment.Definition(e))
	}
	slices.SortFunc(cfg.Experiments, func(a, b *experimentv1.Experiment) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("marshal filter config: %w", err)
	}
	h := sha256.New()
	h.Write(b)
	h.Write([]byte{0})
	h.Write([]byte(mesh.WasmPath)) // a new filter module is a new configuration too
	h.Write([]byte{0})
	h.Write([]byte(mesh.NativePath))
	cfg.Version = hex.EncodeToString(h.Sum(nil)[:8])
	return cfg, nil
}

// ConfigJSON is the filter configuration's proto3 JSON form.
func ConfigJSON(cfg *filterv1.FilterConfig) ([]byte, error) {
	return protojson.MarshalOptions{}.Marshal(cfg)
}

// Compile is what a proxy does with cfg before its first request: it
// decodes cfg's proto3 JSON with the filter's decoder, fills the defaults,
// checks the settings and compiles the experiments (config.Parse). Errors
// are the decoder's and the engine's, each with its field path (an
// *engine.FieldError where the engine or Check reports it).
func Compile(cfg *filterv1.FilterConfig) (*config.Filter, *engine.Set, error) {
	js, err := ConfigJSON(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("filter config to json: %w", err)
	}
	return config.Parse(js)
}

// ExtensionConfig wraps a filter configuration into the ECDS resource for
// the Wasm artifact: a TypedExtensionConfig named FilterName carrying an
// envoy.extensions.filters.http.wasm.v3.Wasm whose plugin configuration is
// cfg as a google.protobuf.Struct (see ConfigStruct and WasmExtension).
func ExtensionConfig(cfg *filterv1.FilterConfig, mesh Mesh) (*corev3.TypedExtensionConfig, error) {
	st, err := ConfigStruct(cfg)
	if err != nil {
		return nil, err
	}
	return WasmExtension(st, mesh)
}

// ConfigStruct is cfg's proto3 JSON as a google.protobuf.Struct: the form
// both artifacts receive it in, readable in Envoy's /config_dump. Envoy
// hands the Wasm plugin the Struct's protobuf encoding and the native
// module the Struct as JSON text; filter/config decodes both.
func ConfigStruct(cfg *filterv1.FilterConfig) (*structpb.Struct, error) {
	js, err := ConfigJSON(cfg)
	if err != nil {
		return nil, fmt.Errorf("filter config to json: %w", err)
	}
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(js, st); err != nil {
		return nil, fmt.Errorf("filter config to struct: %w", err)
	}
	return st, nil
}

// WasmExtension builds the Wasm artifact's ECDS resource around an
// arbitrary plugin configuration (the default_config in the Wasm bootstraps
// has the same shape), packed in an Any unless it is one (ConfigAny).
func WasmExtension(configuration proto.Message, mesh Mesh) (*corev3.TypedExtensionConfig, error) {
	conf, err := pack(configuration)
	if err != nil {
		return nil, fmt.Errorf("pack plugin configuration: %w", err)
	}
	w := &wasmv3.Wasm{Config: &wasmextv3.PluginConfig{
		Name:   FilterName,
		RootId: FilterName,
		Vm: &wasmextv3.PluginConfig_VmConfig{VmConfig: &wasmextv3.VmConfig{
			VmId:    VMID,
			Runtime: WasmRuntime,
			Code: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{
				Local: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: mesh.WasmPath}},
			}},
		}},
		Configuration: conf,
		// A VM that crashes must not take traffic down; see
		// docs/mesh-admins.md, "failure_policy", for the trade-off.
		FailurePolicy: wasmextv3.FailurePolicy_FAIL_OPEN,
	}}
	typed, err := anypb.New(w)
	if err != nil {
		return nil, fmt.Errorf("pack wasm filter: %w", err)
	}
	return &corev3.TypedExtensionConfig{Name: FilterName, TypedConfig: typed}, nil
}

// NativeExtension builds the native artifact's ECDS resource around an
// arbitrary filter configuration: a TypedExtensionConfig named FilterName
// carrying an envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter
// that loads mesh.NativePath (module.local.filename), with filter_name
// FilterName and configuration as its filter_config (the default_config in
// the native bootstraps has the same shape), packed in an Any unless it is
// one (ConfigAny).
//
// do_not_close is always set: the module carries a Go runtime, which cannot
// be unloaded (dlclose) once started. The metrics namespace is
// NativeMetricsNamespace, so the stats keep the Wasm artifact's names.
func NativeExtension(configuration proto.Message, mesh Mesh) (*corev3.TypedExtensionConfig, error) {
	conf, err := pack(configuration)
	if err != nil {
		return nil, fmt.Errorf("pack filter configuration: %w", err)
	}
	f := &dynmodv3.DynamicModuleFilter{
		DynamicModuleConfig: &dynmodextv3.DynamicModuleConfig{
			Module: &corev3.AsyncDataSource{Specifier: &corev3.AsyncDataSource_Local{
				Local: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: mesh.NativePath}},
			}},
			DoNotClose:       true,
			MetricsNamespace: NativeMetricsNamespace,
		},
		FilterName:   FilterName,
		FilterConfig: conf,
	}
	typed, err := anypb.New(f)
	if err != nil {
		return nil, fmt.Errorf("pack dynamic module filter: %w", err)
	}
	return &corev3.TypedExtensionConfig{Name: FilterName, TypedConfig: typed}, nil
}

// pack is m in an Any, or m if it is one already (ConfigAny packs once
// for both artifacts).
func pack(m proto.Message) (*anypb.Any, error) {
	if a, ok := m.(*anypb.Any); ok {
		return a, nil
	}
	return anypb.New(m)
}
