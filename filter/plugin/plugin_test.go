package plugin_test

import (
	"errors"
	"fmt"
	"github.com/allotmesh/allot/filter/config"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

const twoArm = `{"version":"v1","experiments":[{"key":"checkout","variations":["control","treatment"],"weights":[0.5,0.5]}]}`

func start(t *testing.T, config string) (*fakehost.Host, *proxywasm.Handler, uint32) {
	t.Helper()
	h := fakehost.New()
	p := proxywasm.New(h)
	root, ok := h.StartPlugin(p, []byte(config))
	if !ok {
		t.Fatalf("configuration refused: %v", h.Logs)
	}
	return h, p, root
}

// values returns every value of header name (case-insensitive).
func values(headers [][2]string, name string) []string {
	var out []string
	for _, kv := range headers {
		if strings.EqualFold(kv[0], name) {
			out = append(out, kv[1])
		}
	}
	return out
}

// ownedHeaders returns the headers of the default configuration's names:
// the prefix, the dictionary and the version, any casing.
func ownedHeaders(headers [][2]string) [][2]string {
	var out [][2]string
	for _, kv := range headers {
		if n := strings.ToLower(kv[0]); strings.HasPrefix(n, "x-experiment-") || n == "x-experiments" || n == "x-experiments-version" {
			out = append(out, kv)
		}
	}
	return out
}

// expected computes the engine's own assignment for id.
func expected(t *testing.T, cfg, id string) map[string]string {
	t.Helper()
	_, set, err := config.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, a := range set.Assign(nil, engine.Attributes{"id": id}) {
		if a.InExperiment {
			out[a.Key] = a.Value
		}
	}
	return out
}

func TestAssignsEngineVariation(t *testing.T) {
	h, p, root := start(t, twoArm)
	for i := range 200 {
		id := fmt.Sprintf("user-%d", i)
		got, err := h.Request(p, root, [][2]string{{":path", "/"}, {"x-user-id", id}})
		if err != nil {
			t.Fatal(err)
		}
		want := expected(t, twoArm, id)["checkout"]
		if v := values(got, "x-experiment-checkout"); len(v) != 1 || v[0] != want {
			t.Fatalf("%s: x-experiment-checkout = %q, want exactly [%q]", id, v, want)
		}
	}
}

func TestNoUnitNoHeaders(t *testing.T) {
	h, p, root := start(t, twoArm)
	for _, hdrs := range [][][2]string{
		{{":path", "/"}},
		{{":path", "/"}, {"x-user-id", ""}},
	} {
		got, _ := h.Request(p, root, hdrs)
		if v := values(got, "x-experiment-checkout"); len(v) != 0 {
			t.Fatalf("headers %q: got assignment %q without a unit id", hdrs, v)
		}
	}
}

func TestStripsSpoofedHeaders(t *testing.T) {
	h, p, root := start(t, twoArm)
	tests := []struct {
		name    string
		headers [][2]string
	}{
		{"forged with unit", [][2]string{{"x-user-id", "alice"}, {"x-experiment-checkout", "forged"}}},
		{"odd casing and copies", [][2]string{{"x-user-id", "alice"}, {"X-Experiment-Checkout", "a"}, {"x-EXPERIMENT-checkout", "b"}, {"x-experiment-other", "c"}}},
		{"forged without unit", [][2]string{{"x-experiment-checkout", "forged"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := h.Request(p, root, tt.headers)
			if err != nil {
				t.Fatal(err)
			}
			if v := values(got, "x-experiment-other"); len(v) != 0 {
				t.Fatalf("unknown forged header survived: %q", v)
			}
			v := values(got, "x-experiment-checkout")
			want := expected(t, twoArm, "alice")["checkout"]
			if len(values(tt.headers, "x-user-id")) == 0 {
				if len(v) != 0 {
					t.Fatalf("forged header survived without unit: %q", v)
				}
				return
			}
			if len(v) != 1 || v[0] != want {
				t.Fatalf("x-experiment-checkout = %q, want exactly [%q]", v, want)
			}
		})
	}
}

func TestCustomUnitHeaderAndPrefix(t *testing.T) {
	cfg := `{"unitHeader":"x-device-id","headerPrefix":"x-ab-","experiments":[{"key":"k","variations":["on","off"],"weights":[1,0]}]}`
	h, p, root := start(t, cfg)
	got, _ := h.Request(p, root, [][2]string{{"x-device-id", "d1"}, {"x-ab-k", "forged"}, {"x-user-id", "u"}})
	if v := values(got, "x-ab-k"); len(v) != 1 || v[0] != "on" {
		t.Fatalf("x-ab-k = %q, want [on]", v)
	}
}

func TestRejectsBadConfiguration(t *testing.T) {
	tests := map[string]string{
		"not json":        `{"experiments":`,
		"engine rejects":  `{"experiments":[{"key":"k","variations":["a",{"x":1}]}]}`,
		"bad unit header": `{"unitHeader":"X User","experiments":[]}`,
		"bad prefix":      `{"headerPrefix":":bad","experiments":[]}`,
	}
	for name, cfg := range tests {
		t.Run(name, func(t *testing.T) {
			h := fakehost.New()
			p := proxywasm.New(h)
			if _, ok := h.StartPlugin(p, []byte(cfg)); ok {
				t.Fatal("on_configure accepted an invalid configuration")
			}
			if len(h.Logs) == 0 || h.Logs[len(h.Logs)-1].Level != wire.LogCritical {
				t.Fatalf("want a critical log, got %v", h.Logs)
			}
		})
	}
}

func TestRejectedReconfigurationKeepsServing(t *testing.T) {
	h, p, root := start(t, twoArm)
	if h.Configure(p, root, []byte(`{"experiments":[{"key":"BAD KEY","variations":["a"]}]}`)) {
		t.Fatal("invalid configuration accepted")
	}
	got, _ := h.Request(p, root, [][2]string{{"x-user-id", "alice"}})
	if v := values(got, "x-experiment-checkout"); len(v) != 1 {
		t.Fatalf("after a rejected configuration the previous one must keep serving, got %q", v)
	}
}

// TestFailOpen: whichever host call keeps failing, the request continues
// without a forged or assigned header, counted once. (The fault-injection
// matrix in fault_test.go tries every call of the path, failing and
// panicking.)
func TestFailOpen(t *testing.T) {
	tests := []struct {
		name     string
		failCall string
	}{
		// The map cannot be read: the configured names are removed blind.
		{"header read fails", "proxy_get_header_map_pairs"},
		{"header write fails", "proxy_add_header_map_value"},
		// The host refusing to remove the forged header: the map is set
		// without it in one call.
		{"forged header removal fails", "proxy_remove_header_map_value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, p, root := start(t, twoArm)
			h.Fail = func(call string) error {
				if call == tt.failCall {
					return errors.New("injected")
				}
				return nil
			}
			got, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}, {"x-experiment-checkout", "forged"}})
			if err != nil {
				t.Fatalf("stream not continued: %v", err)
			}
			if owned := ownedHeaders(got); len(owned) != 0 {
				t.Fatalf("after a failed evaluation the request carries %q", owned)
			}
			if p.Plugin().FailOpen(root) != 1 {
				t.Fatalf("FailOpen = %d, want 1", p.Plugin().FailOpen(root))
			}
		})
	}
}

func TestPanicInRequestPathIsRecovered(t *testing.T) {
	h, p, root := start(t, twoArm)
	h.Fail = func(call string) error {
		if call == "proxy_get_header_map_pairs" {
			panic("boom")
		}
		return nil
	}
	got, err := h.Request(p, root, [][2]string{{"x-user-id", "alice"}, {"X-Experiment-Checkout", "forged"}, {"x-experiments", `checkout="forged"`}})
	if err != nil {
		t.Fatalf("stream not continued after panic: %v", err)
	}
	if owned := ownedHeaders(got); len(owned) != 0 {
		t.Fatalf("after a panic the request carries %q", owned)
	}
	if p.Plugin().FailOpen(root) != 1 {
		t.Fatalf("FailOpen = %d, want 1", p.Plugin().FailOpen(root))
	}
}

func TestUnconfiguredRootPassesThrough(t *testing.T) {
	h := fakehost.New()
	p := proxywasm.New(h)
	p.OnContextCreate(1, 0)
	got, err := h.Request(p, 1, [][2]string{{"x-user-id", "alice"}})
	if err != nil || len(got) != 1 {
		t.Fatalf("unconfigured root changed the request: %q, %v", got, err)
	}
}
