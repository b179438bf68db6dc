package translate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	dynmodv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/dynamic_modules/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

var update = flag.Bool("update", false, "rewrite testdata/out from the current output")

type input struct {
	Cluster     string            `json:"cluster"`
	Now         time.Time         `json:"now"`
	Experiments []json.RawMessage `json:"experiments"`
}

var testMesh = Mesh{WasmPath: "/etc/envoy/allot.wasm", NativePath: "/etc/envoy/liballot.so"}

func load(t *testing.T, path string) (input, []*experimentv1.Experiment) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var in input
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var exps []*experimentv1.Experiment
	for i, raw := range in.Experiments {
		e := &experimentv1.Experiment{}
		if err := protojson.Unmarshal(raw, e); err != nil {
			t.Fatalf("%s: experiments[%d]: %v", path, i, err)
		}
		exps = append(exps, e)
	}
	return in, exps
}

// TestGolden translates testdata/in/*.json and compares each artifact's ECDS
// resource (as indented proto JSON) with its golden file: the Wasm one with
// testdata/out/*.json, the native one with testdata/out/native/*.json; with
// the configuration as a Struct (ConfigStruct) and as allotd packs it
// (ConfigAny) alike.
func TestGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/in/*.json")
	if len(files) == 0 {
		t.Fatal("no golden inputs")
	}
	artifacts := []struct {
		name, dir string
		wrap      func(proto.Message, Mesh) (*corev3.TypedExtensionConfig, error)
	}{
		{"wasm", "testdata/out", WasmExtension},
		{"native", "testdata/out/native", NativeExtension},
	}
	packs := []struct {
		name string
		pack func(*filterv1.FilterConfig) (proto.Message, error)
	}{
		{"struct", func(cfg *filterv1.FilterConfig) (proto.Message, error) { return ConfigStruct(cfg) }},
		{"any", func(cfg *filterv1.FilterConfig) (proto.Message, error) { return ConfigAny(cfg) }},
	}
	for _, path := range files {
		for _, a := range artifacts {
			for _, p := range packs {
				t.Run(a.name+"/"+p.name+"/"+filepath.Base(path), func(t *testing.T) {
					in, exps := load(t, path)
					cfg, err := FilterConfig(exps, in.Cluster, in.Now, testMesh)
					if err != nil {
						t.Fatal(err)
					}
					conf, err := p.pack(cfg)
					if err != nil {
						t.Fatal(err)
					}
					ext, err := a.wrap(conf, testMesh)
					if err != nil {
						t.Fatal(err)
					}
					golden(t, ext, filepath.Join(a.dir, filepath.Base(path)))
				})
			}
		}
	}
}

// TestConfigAnyIsTheStruct: the Struct encoding written from JSON decodes
// to the Struct protojson makes of the same JSON, for every kind of value,
// nesting, escapes and numbers; and the same JSON gives the same bytes.
func TestConfigAnyIsTheStruct(t *testing.T) {
	for _, js := range []string{
		`{}`,
		`{"a":null,"b":true,"c":false,"d":0,"e":-0,"f":1.5e300,"g":0.1,"h":-12345678901234567890,"i":5e-324}`,
		`{"s":"","t":"a\"b\\c\/d\b\f\n\r\t","u":"\u00e9\u2028\ud83d\ude00","v":"日本"}`,
		`{"l":[],"m":[null,1,"x",true,{"k":[[]]},[{"z":{}}]],"o":{"p":{"q":{"r":[1,2,3]}}}}`,
		` { "sp" : [ 1 , { } ] } `,
	} {
		want := &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(js), want); err != nil {
			t.Fatalf("%s: protojson: %v", js, err)
		}
		b, err := jsonToStruct([]byte(js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		got := &structpb.Struct{}
		if err := proto.Unmarshal(b, got); err != nil {
			t.Fatalf("%s: the encoding does not decode: %v", js, err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("%s: decodes to %v, want %v", js, got, want)
		}
		if again, _ := jsonToStruct([]byte(js)); !bytes.Equal(again, b) {
			t.Errorf("%s: two encodings differ", js)
		}
	}
	for _, bad := range []string{`[]`, `{"a":1} {}`, `{} x`, `{"a":}`, `{"a":[1,}`, `"x"`} {
		if _, err := jsonToStruct([]byte(bad)); err == nil {
			t.Errorf("%s: encoded, want an error", bad)
		}
	}
}

// golden compares ext, as indented proto JSON, with the file out (rewritten
// first with -update).
func golden(t *testing.T, ext *corev3.TypedExtensionConfig, out string) {
	t.Helper()
	got, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(ext)
	if err != nil {
		t.Fatal(err)
	}
	var norm bytes.Buffer // protojson's whitespace is unstable by design
	if err := json.Indent(&norm, got, "", "  "); err != nil {
		t.Fatal(err)
	}
	norm.WriteByte('\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, norm.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("%v (run go test ./control-plane/translate -update)", err)
	}
	if !bytes.Equal(norm.Bytes(), want) {
		t.Fatalf("%s differs from the golden file; run with -update and review the diff\n got: %s", out, norm.String())
	}
}

// TestExtensionConfigIsWasmExtension: ExtensionConfig, which allotd's
// callers outside the server use, gives the Wasm artifact's resource.
func TestExtensionConfigIsWasmExtension(t *testing.T) {
	_, exps := load(t, "testdata/in/mixed.json")
	cfg, err := FilterConfig(exps, "checkout", time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), testMesh)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := ExtensionConfig(cfg, testMesh)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, ext, "testdata/out/mixed.json")
}

func TestSelection(t *testing.T) {
	_, exps := load(t, "testdata/in/mixed.json")
	cfg, err := FilterConfig(exps, "checkout", time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), testMesh)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range cfg.Experiments {
		keys = append(keys, e.Key)
		if e.Revision != 0 || e.CreatedBy != "" || e.Owner != "" || e.Description != "" {
			t.Errorf("%s: metadata leaked into the filter config", e.Key)
		}
	}
	want := "alpha,in-window,this-service,zero-coverage,zeta"
	if strings.Join(keys, ",") != want {
		t.Fatalf("keys = %s, want %s", strings.Join(keys, ","), want)
	}
}

func TestVersionIsContentIdentity(t *testing.T) {
	_, exps := load(t, "testdata/in/mixed.json")
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	a, _ := FilterConfig(exps, "checkout", now, testMesh)
	// Reversed order and changed metadata give the same version.
	rev := make([]*experimentv1.Experiment, len(exps))
	for i, e := range exps {
		rev[len(exps)-1-i] = e
	}
	rev[0].Description, rev[0].Revision = "changed", 99
	b, _ := FilterConfig(rev, "checkout", now, testMesh)
	if a.Version != b.Version {
		t.Fatalf("same definitions gave versions %s and %s", a.Version, b.Version)
	}
	exps[0].Weights = []float64{0.4, 0.6}
	c, _ := FilterConfig(exps, "checkout", now, testMesh)
	if c.Version == a.Version {
		t.Fatal("a changed definition kept its version")
	}
	// Moving either module is a new configuration for every proxy.
	seen := map[string]string{c.Version: "testMesh"}
	for name, m := range map[string]Mesh{
		"wasm path":   {WasmPath: "/opt/allot.wasm", NativePath: testMesh.NativePath},
		"native path": {WasmPath: testMesh.WasmPath, NativePath: "/opt/liballot.so"},
		// The separator keeps a byte from moving between the two paths.
		"shifted": {WasmPath: testMesh.WasmPath + "/", NativePath: testMesh.NativePath[1:]},
	} {
		d, _ := FilterConfig(exps, "checkout", now, m)
		if other, ok := seen[d.Version]; ok {
			t.Errorf("%s: version %s, the same as %s", name, d.Version, other)
		}
		seen[d.Version] = name
	}
}

// TestFilterDecodesContract checks the contract between the proto and the
// filter: the JSON the control plane sends compiles in the filter's own
// decoder with the same experiments and settings.
func TestFilterDecodesContract(t *testing.T) {
	_, exps := load(t, "testdata/in/mixed.json")
	mesh := Mesh{WasmPath: "/x.wasm", Filter: &filterv1.FilterConfig{
		UnitHeader: "x-device-id", HeaderPrefix: "x-ab-",
		Attributes: []*filterv1.Attribute{
			{Name: "country", Source: &filterv1.Attribute_Header{Header: "x-country"}},
			{Name: "plan", Source: &filterv1.Attribute_Cookie{Cookie: "plan"}},
		},
	}}
	cfg, err := FilterConfig(exps, "checkout", time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), mesh)
	if err != nil {
		t.Fatal(err)
	}
	js, err := ConfigJSON(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// What Envoy hands to on_configure: the Struct's protobuf encoding (the
	// Any's value bytes) — and, for a StringValue configuration, plain JSON.
	ext, err := ExtensionConfig(cfg, mesh)
	if err != nil {
		t.Fatal(err)
	}
	w := &wasmv3.Wasm{}
	if err := ext.TypedConfig.UnmarshalTo(w); err != nil {
		t.Fatal(err)
	}
	// The native module's filter_config is the same Struct, which Envoy
	// hands over as JSON text.
	st, err := ConfigStruct(cfg)
	if err != nil {
		t.Fatal(err)
	}
	next, err := NativeExtension(st, mesh)
	if err != nil {
		t.Fatal(err)
	}
	n := &dynmodv3.DynamicModuleFilter{}
	if err := next.TypedConfig.UnmarshalTo(n); err != nil {
		t.Fatal(err)
	}
	nst := &structpb.Struct{}
	if err := n.FilterConfig.UnmarshalTo(nst); err != nil {
		t.Fatal(err)
	}
	njs, err := protojson.Marshal(nst)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"struct wire bytes": w.Config.Configuration.Value, "json": js, "native struct as json": njs} {
		t.Run(name, func(t *testing.T) {
			got, set, err := config.Parse(data)
			if err != nil {
				t.Fatalf("filter rejected the control plane's configuration: %v\n%s", err, js)
			}
			if got.Version != cfg.Version || got.UnitHeader != "x-device-id" || got.HeaderPrefix != "x-ab-" || set.Len() != len(cfg.Experiments) {
				t.Fatalf("filter decoded %+v from %s", got, js)
			}
		})
	}
}

// TestCompile: Compile decodes a configuration as the filter does, defaults
// applied, and reports engine errors with their field paths.
func TestCompile(t *testing.T) {
	_, exps := load(t, "testdata/in/mixed.json")
	cfg, err := FilterConfig(exps, "checkout", time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), testMesh)
	if err != nil {
		t.Fatal(err)
	}
	f, set, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != cfg.Version || f.HeaderPrefix != config.DefaultHeaderPrefix || set.Len() != len(cfg.Experiments) {
		t.Fatalf("Compile = %+v, %d experiments", f, set.Len())
	}
	bad := &filterv1.FilterConfig{UnitHeader: "X-User", Experiments: []*experimentv1.Experiment{{Key: "k"}}}
	_, _, err = Compile(bad)
	var fe *engine.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("Compile: %v, want *engine.FieldError", err)
	}
	for _, want := range []string{"unitHeader: ", "experiments[0].variations: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Compile error %q lacks %q", err, want)
		}
	}
}

// TestParseMesh: mesh settings are decoded and checked by the filter's
// decoder; every problem is named by its field path.
func TestParseMesh(t *testing.T) {
	tests := []struct {
		name, json string
		want       []string // substrings of the error; nil: valid
	}{
		{"valid", `{"unitHeader": "x-user-id", "headerPrefix": "x-ab-", "savedGroups": {"beta": ["u1"]},
			"attributes": [{"name": "country", "header": "x-country"}]}`, nil},
		{"empty", `{}`, nil},
		{"uppercase unit header", `{"unitHeader": "X-User-Id"}`, []string{"unitHeader: "}},
		{"every problem", `{"version": "v1", "experiments": [{"key": "k"}], "headerPrefix": "X",
			"attributes": [{"name": "a", "header": "x-a"}, {"name": "a", "cookie": "c"}, {"header": "x-b"}]}`,
			[]string{"version: ", "experiments: ", "headerPrefix: ", "attributes[1].name: ", "attributes[2].name: "}},
		{"not a FilterConfig", `{"unitHeader": 3}`, []string{"unitHeader"}},
		{"ofrep", `{"ofrep": {"enabled": true, "maxBodyBytes": 4096, "corsAllowOrigins": ["http://127.0.0.1:8080"]}}`, nil},
		{"ofrep bounds", `{"ofrep": {"enabled": true, "maxBodyBytes": 70000, "corsAllowOrigins": ["*"]}}`,
			[]string{"ofrep.maxBodyBytes: ", "ofrep.corsAllowOrigins[0]: "}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseMesh([]byte(tc.json))
			if tc.want == nil {
				if err != nil || cfg == nil {
					t.Fatalf("ParseMesh: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("ParseMesh accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestStickyKeys: the key file's keys reach every proxy's configuration in
// order, a new key is a new version, and the mesh settings may not carry
// keys of their own.
func TestStickyKeys(t *testing.T) {
	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("s"), 32))
	keys, err := ParseStickyKeys([]byte(`{"keys": [{"id": "new", "secret": "` + secret + `"}, {"id": "old", "secret": "` + secret + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	settings, err := ParseMesh([]byte(`{"stickyCookie": {"name": "allot_sb", "sameSite": "Strict"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(settings.StickyCookie.Keys); n != 0 {
		t.Fatalf("ParseMesh kept %d stand-in keys", n)
	}
	exps := []*experimentv1.Experiment{{Key: "k", Variations: []*structpb.Value{structpb.NewStringValue("a"), structpb.NewStringValue("b")}}}
	cfg, err := FilterConfig(exps, "c", time.Now(), Mesh{Filter: settings, StickyKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.StickyCookie.GetKeys(); len(got) != 2 || got[0].Id != "new" || got[1].Id != "old" {
		t.Fatalf("keys %v, want new then old", got)
	}
	f, _, err := Compile(cfg)
	if err != nil {
		t.Fatalf("the filter refuses the configuration: %v", err)
	}
	if f.StickyCookie.Name != "allot_sb" || f.StickyCookie.SameSite != "Strict" || len(f.StickyCookie.Keys[0].Secret) != 32 {
		t.Errorf("decoded %+v", f.StickyCookie)
	}
	rotated, _ := FilterConfig(exps, "c", time.Now(), Mesh{Filter: settings, StickyKeys: keys[1:]})
	if rotated.Version == cfg.Version {
		t.Error("another key set gave the same version")
	}
	if _, err := ParseMesh([]byte(`{"stickyCookie": {"name": "sb", "keys": [{"id": "k", "secret": "` + secret + `"}]}}`)); err == nil || !strings.Contains(err.Error(), "stickyCookie.keys: come from allotd -sticky-keys") {
		t.Errorf("keys in the mesh settings: %v", err)
	}
}

// TestNativeExtension states what a golden -update must never drop from the
// native resource: the module is never closed (a Go runtime cannot be
// unloaded), its stats keep the Wasm artifact's names, and Envoy finds it
// at mesh.NativePath under the names the bootstraps and the module expect.
func TestNativeExtension(t *testing.T) {
	st, err := structpb.NewStruct(map[string]any{"unitHeader": "x-user-id"})
	if err != nil {
		t.Fatal(err)
	}
	ext, err := NativeExtension(st, testMesh)
	if err != nil {
		t.Fatal(err)
	}
	if ext.GetName() != "allot" || ext.GetTypedConfig().GetTypeUrl() != "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter" {
		t.Fatalf("resource %q of type %s", ext.GetName(), ext.GetTypedConfig().GetTypeUrl())
	}
	f := &dynmodv3.DynamicModuleFilter{}
	if err := ext.GetTypedConfig().UnmarshalTo(f); err != nil {
		t.Fatal(err)
	}
	if err := f.ValidateAll(); err != nil {
		t.Errorf("Envoy's proto validation: %v", err)
	}
	mc := f.GetDynamicModuleConfig()
	if !mc.GetDoNotClose() {
		t.Error("do_not_close is false: Envoy would dlclose a module running a Go runtime")
	}
	if mc.GetMetricsNamespace() != "wasmcustom" {
		t.Errorf("metrics_namespace %q, want wasmcustom (the Wasm artifact's stat names)", mc.GetMetricsNamespace())
	}
	if got := mc.GetModule().GetLocal().GetFilename(); got != testMesh.NativePath || mc.GetName() != "" {
		t.Errorf("module.local.filename %q name %q, want %q and no name", got, mc.GetName(), testMesh.NativePath)
	}
	got := &structpb.Struct{}
	if err := f.GetFilterConfig().UnmarshalTo(got); err != nil || f.GetFilterName() != "allot" || f.GetTerminalFilter() {
		t.Fatalf("filter_name %q, filter_config %v (%v), terminal %v", f.GetFilterName(), f.GetFilterConfig(), err, f.GetTerminalFilter())
	}
	if got.GetFields()["unitHeader"].GetStringValue() != "x-user-id" {
		t.Errorf("filter_config %v", got)
	}
}

// TestObserveReachesFilter: an experiment's observe field reaches the
// filter's configuration, and the filter's decoder reads it.
func TestObserveReachesFilter(t *testing.T) {
	v := func(s string) *structpb.Value { return structpb.NewStringValue(s) }
	exps := []*experimentv1.Experiment{
		{Key: "watched", Variations: []*structpb.Value{v("a"), v("b")}, Observe: true},
		{Key: "plain", Variations: []*structpb.Value{v("a"), v("b")}},
	}
	cfg, err := FilterConfig(exps, "checkout", time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), testMesh)
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range f.Experiments {
		got[e.Key] = e.Observe
	}
	if !got["watched"] || got["plain"] {
		t.Errorf("observe in the filter's configuration: %v, want watched only", got)
	}
}

// TestOfrepReachesFilter: the mesh settings' ofrep reaches every proxy's
// filter configuration, and the filter's decoder reads it.
func TestOfrepReachesFilter(t *testing.T) {
	settings, err := ParseMesh([]byte(`{"ofrep": {"enabled": true, "maxBodyBytes": 4096, "corsAllowOrigins": ["http://127.0.0.1:8080"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := FilterConfig(nil, "checkout", time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), Mesh{Filter: settings})
	if err != nil {
		t.Fatal(err)
	}
	f, _, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o := f.Ofrep; o == nil || !o.Enabled || o.MaxBodyBytes != 4096 || len(o.CorsAllowOrigins) != 1 || o.CorsAllowOrigins[0] != "http://127.0.0.1:8080" {
		t.Errorf("ofrep in the filter's configuration: %+v", o)
	}
}
