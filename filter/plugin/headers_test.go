package plugin_test

import (
	"testing"

	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/wire"
)

// TestMaxHeaderBytesIsWhatTheFilterAdds: with every experiment forced to
// its longest variation (non-ASCII and quotes included, which the
// dictionary escapes), the request headers the filter adds weigh exactly
// MaxHeaderBytes, in both header modes.
func TestMaxHeaderBytesIsWhatTheFilterAdds(t *testing.T) {
	exps := `"experiments":[
		{"key":"checkout","variations":["control","tréatment \"b\""],"force":1},
		{"key":"price.v2","variations":[1.5,100000000000000000000000,"x"],"force":1},
		{"key":"flag","variations":[true,false],"force":1}]`
	for _, mode := range []string{"", `"assignmentHeaders":"ASSIGNMENT_HEADERS_DICTIONARY",`} {
		t.Run("mode "+mode, func(t *testing.T) {
			cfgJSON := `{"version":"v-0123456789abcdef",` + mode + exps + `}`
			h, p, root := start(t, cfgJSON)
			in := [][2]string{{":path", "/"}, {"x-user-id", "u1"}}
			out, err := h.Request(p, root, in)
			if err != nil {
				t.Fatal(err)
			}
			added := 0
			for _, kv := range out[len(in):] {
				added += len(kv[0]) + len(kv[1])
			}
			cfg, err := plugin.ParseConfig([]byte(cfgJSON))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.MaxHeaderBytes(); got != added || added == 0 {
				t.Errorf("MaxHeaderBytes = %d, the filter added %d bytes: %q", got, added, out[len(in):])
			}
		})
	}
}

// TestDefaultHeaderNamesAreTheWires: a configuration that names no
// header gets the names wire declares, which the control plane and the
// shipped guards are held to.
func TestDefaultHeaderNamesAreTheWires(t *testing.T) {
	cfg, err := plugin.ParseConfig([]byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HeaderPrefix != wire.DefaultHeaderPrefix || cfg.DictionaryHeader != wire.DefaultDictionaryHeader || cfg.VersionHeader != wire.DefaultVersionHeader {
		t.Errorf("defaults %q %q %q, wire's %q %q %q", cfg.HeaderPrefix, cfg.DictionaryHeader, cfg.VersionHeader,
			wire.DefaultHeaderPrefix, wire.DefaultDictionaryHeader, wire.DefaultVersionHeader)
	}
}
