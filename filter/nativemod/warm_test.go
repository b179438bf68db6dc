//go:build cgo

package nativemod

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/dynmod"
)

// TestWarmSwitch: the warm path is on unless WarmEnv is "0"; on, the
// module is a dynmod.WarmHandler (the C request hook reads its handles),
// off it is not (the C hook calls Go at once and reads no handle); a
// value other than "", "0" and "1" leaves it on with a warning, bounded.
func TestWarmSwitch(t *testing.T) {
	for _, tc := range []struct {
		value   string
		set     bool
		on      bool
		warning string
	}{
		{"", false, true, ""},
		{"", true, true, ""},
		{"1", true, true, ""},
		{"0", true, false, ""},
		{"yes", true, true, `ALLOT_NATIVE_WARM="yes": want 0 (off) or 1 (on)`},
		{strings.Repeat("x", 100), true, true, `="` + strings.Repeat("x", warmValueMax) + `…"`},
	} {
		t.Run(fmt.Sprintf("%q set %v", tc.value, tc.set), func(t *testing.T) {
			if tc.set {
				t.Setenv(WarmEnv, tc.value)
			} else {
				t.Setenv(WarmEnv, "") // restored after the test
				os.Unsetenv(WarmEnv)
			}
			h := New()
			_, warm := h.(dynmod.WarmHandler)
			var m *module
			switch v := h.(type) {
			case warmModule:
				m = v.module
			case *module:
				m = v
			}
			if warm != tc.on || m == nil || m.warm != tc.on {
				t.Errorf("New() = %T (a WarmHandler: %v), want the warm path on: %v", h, warm, tc.on)
			}
			if m != nil && (tc.warning == "") != (m.warning == "") || !strings.Contains(m.warning, tc.warning) {
				t.Errorf("warning %q, want one containing %q", m.warning, tc.warning)
			}
		})
	}
}

// warmFuzzConfig reads only request headers (two attributes from one
// header, a pseudo-header), so the warm path serves it.
const warmFuzzConfig = `{"version":"f1","attributes":[{"name":"country","header":"x-country"},` +
	`{"name":"d1","header":"x-dup"},{"name":"d2","header":"x-dup"},{"name":"method","property":"request.method"}],` +
	`"experiments":[{"key":"split","variations":["a","b"],"weights":[0.5,0.5]},` +
	`{"key":"fr","variations":["off","on"],"weights":[0.5,0.5],"condition":{"country":"fr","d1":{"$exists":true}}},` +
	`{"key":"get","variations":["no","yes"],"weights":[0,1],"condition":{"method":"GET","d2":{"$ne":"x"}}}]}`

// TestWarmSideFollowsSwitch: with the warm path on, a configuration the
// path serves gets a C cache per worker, and a request Go served leaves
// its assignment there (the next one is a C hit); with it off, the
// configuration has no cache and the workers' plugins keep no result.
func TestWarmSideFollowsSwitch(t *testing.T) {
	for _, on := range []bool{true, false} {
		f := newFakeModule(0)
		f.warm = on
		f.ProgramInit(2)
		h := f.ConfigNew(0, FilterName, []byte(warmFuzzConfig))
		e := (*f.configs.Load())[h]
		if e == nil {
			t.Fatal("configuration refused")
		}
		req := [][2]string{{"x-user-id", "alice"}, {"x-country", "fr"}, {"x-dup", "1"}}
		f.request(1, h, req)
		c := e.side.Worker(1)
		if !on {
			if c != nil {
				t.Error("the warm path off: the configuration has a warm cache")
			}
			if _, _, _, ok := f.worker(1).plugin.WarmResult(); ok {
				t.Error("the warm path off: the plugin kept a warm result")
			}
			continue
		}
		if c == nil {
			t.Fatal("the warm path on: no warm cache for worker 1")
		}
		if v, _ := c.Probe(req); v != dynmod.WarmHit {
			t.Errorf("the warm path on: the request's next lookup is %d, want a hit", v)
		}
		f.ConfigDestroy(h)
	}
}
