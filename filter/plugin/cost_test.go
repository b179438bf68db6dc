package plugin_test

import (
	"fmt"
	"github.com/allotmesh/allot/filter/config"
	"strconv"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/plugin"
)

// fiveArms is five experiments every unit is in.
const fiveArms = `{"version":"v5",%s"experiments":[
 {"key":"a","variations":["x","y"]},{"key":"b","variations":["x","y"]},{"key":"c","variations":["x","y"]},
 {"key":"d","variations":["x","y"]},{"key":"e","variations":["x","y"]}]}`

func TestDictionaryOnlyMode(t *testing.T) {
	h, p, root := start(t, fmt.Sprintf(fiveArms, `"assignmentHeaders":"ASSIGNMENT_HEADERS_DICTIONARY",`))
	all, pAll, rootAll := start(t, fmt.Sprintf(fiveArms, ""))
	for i := range 50 {
		id := "u" + strconv.Itoa(i)
		in := [][2]string{{":path", "/"}, {"x-user-id", id}}
		want, _ := all.Request(pAll, rootAll, in)
		got, err := h.Request(p, root, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range got {
			if strings.HasPrefix(kv[0], config.DefaultHeaderPrefix) {
				t.Fatalf("%s: dictionary-only mode added %q", id, kv)
			}
		}
		if d := values(got, "x-experiments"); len(d) != 1 || d[0] != values(want, "x-experiments")[0] {
			t.Fatalf("%s: dictionary %q, want the default mode's %q", id, d, values(want, "x-experiments"))
		}
		if v := values(got, "x-experiments-version"); len(v) != 1 || v[0] != "v5" {
			t.Fatalf("%s: version %q", id, v)
		}
	}
	// Two headers: two single adds, never a rebuild of the whole map.
	if h.SetPairsCalls != 0 {
		t.Fatalf("%d proxy_set_header_map_pairs calls for two headers", h.SetPairsCalls)
	}
	// Forged assignment headers of either mode are still removed.
	got, _ := h.Request(p, root, [][2]string{{"x-user-id", "u"}, {"X-Experiment-a", "forged"}, {"x-experiments", `a="forged"`}})
	for _, kv := range got {
		if strings.Contains(kv[1], "forged") {
			t.Fatalf("forged header reached the service: %q", kv)
		}
	}
}

func TestRejectsUnknownAssignmentHeadersMode(t *testing.T) {
	_, err := plugin.ParseConfig([]byte(`{"assignmentHeaders":"SOME"}`))
	if err == nil || !strings.Contains(err.Error(), "assignmentHeaders") {
		t.Fatalf("err = %v, want one naming assignmentHeaders", err)
	}
}

// TestCacheByteBound: the cache holds entries up to cacheMaxBytes, evicts
// beyond it (the oldest first), and its byte count stays exact.
func TestCacheByteBound(t *testing.T) {
	h, p, root := start(t, fmt.Sprintf(fiveArms, `"cacheMaxBytes":4000,`))
	n := 0
	for i := range 200 {
		h.Request(p, root, [][2]string{{"x-user-id", "user-" + strconv.Itoa(i)}})
		var bytes int
		if bytes, n = p.Plugin().CheckCache(t, root); bytes > 4000 {
			t.Fatalf("after %d requests: %d bytes cached, bound 4000", i+1, bytes)
		}
	}
	if n < 5 || n >= 200 {
		t.Fatalf("%d entries cached under a 4000-byte bound", n)
	}
	// The most recent ids hit, the first ones were evicted.
	hits := p.Plugin().Hits(root)
	h.Request(p, root, [][2]string{{"x-user-id", "user-199"}})
	h.Request(p, root, [][2]string{{"x-user-id", "user-0"}})
	if got := p.Plugin().Hits(root); got != hits+1 {
		t.Fatalf("hits %d → %d, want exactly one hit (user-199) and one miss (user-0)", hits, got)
	}
}

func TestCacheByteBoundDefaultAndOff(t *testing.T) {
	for _, c := range []struct {
		extra string
		want  int
	}{{"", config.DefaultCacheMaxBytes}, {`"cacheMaxBytes":-1,`, 0}, {`"cacheMaxBytes":123456,`, 123456}} {
		cfg, err := plugin.ParseConfig([]byte(fmt.Sprintf(fiveArms, c.extra)))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.CacheMaxBytes != c.want {
			t.Errorf("%q: CacheMaxBytes %d, want %d", c.extra, cfg.CacheMaxBytes, c.want)
		}
	}
}

// TestOwnedHeaderPrefilter: the first-byte shortcut never lets an owned
// header through, whatever the first character of the configured names.
func TestOwnedHeaderPrefilter(t *testing.T) {
	for _, names := range [][3]string{
		{"x-experiment-", "x-experiments", "x-experiments-version"},
		{"_exp-", "9dict", "-ver"},
		{"ab.", "zz", "q"},
	} {
		cfg, err := plugin.ParseConfig([]byte(`{"headerPrefix":"` + names[0] + `","dictionaryHeader":"` + names[1] + `","versionHeader":"` + names[2] + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{names[0] + "k", names[1], names[2]} {
			for _, variant := range []string{n, strings.ToUpper(n), strings.ToUpper(n[:1]) + n[1:]} {
				if !cfg.OwnsHeader(variant) {
					t.Errorf("prefix %q: %q not recognised as owned", names[0], variant)
				}
			}
		}
		for _, n := range []string{"", ":path", "cookie", "x-user-id", names[0][:len(names[0])-1]} {
			if cfg.OwnsHeader(n) && n != names[1] && n != names[2] {
				t.Errorf("prefix %q: %q taken for owned", names[0], n)
			}
		}
	}
}
