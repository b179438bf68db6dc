//go:build cgo

package nativemod

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/proxywasm"
)

// FuzzWarmKeyAgainstPlugin: for arbitrary request headers, the key C's
// lookup builds (dynmod.WarmCache.Probe over the plan ConfigNew hands C)
// is the key the plugin itself used (plugin.Plugin.WarmResult, over a fake
// host), and C sends to Go exactly the requests it must: any carrying a
// header the filter owns (plugin.Config.OwnsHeader), a non-ASCII name
// (which C does not fold), more than dynmod.WarmMaxHeaders headers or a
// key longer than dynmod.WarmMaxKey; and once Go's result is inserted,
// C's next lookup of the same headers is a hit. Input: one header a line,
// name=value.
func FuzzWarmKeyAgainstPlugin(f *testing.F) {
	long := strings.Repeat("v", 200)
	var many strings.Builder
	for i := range dynmod.WarmMaxHeaders {
		fmt.Fprintf(&many, "x-h%d=%d\n", i, i)
	}
	many.WriteString("x-user-id=many")
	for _, seed := range []string{
		"x-user-id=alice",
		"x-user-id=alice\nx-country=fr\nx-dup=1\n:method=GET",
		"x-user-id=" + long + "\nx-country=" + long, // two-byte uvarint lengths
		"x-user-id=" + strings.Repeat("k", dynmod.WarmMaxKey),
		"x-ñ=1\nx-user-id=bob",
		"X-Ñ=1",
		many.String(),
		many.String()[strings.Index(many.String(), "\n")+1:], // exactly the bound
		"x-user-id=\nx-user-id=carol\nx-country=\nx-country=de",
		"x-dup=\nx-dup=1\nx-dup=2\nx-user-id=dan",
		"=v\nx-user-id=erin",
		"X-Experiment-Split=forged\nx-user-id=alice",
		"x-user-id=alice\nX-EXPERIMENTS=x",
		"x-experiments-version=f0\nx-user-id=alice",
		"X-User-Id=alice\nx-country=fr",
		"",
	} {
		f.Add(seed)
	}
	var (
		once sync.Once
		mu   sync.Mutex
		c    *dynmod.WarmCache
		host *fakehost.Batcher
		a    *proxywasm.Handler
		p    *plugin.Plugin
		cfg  *plugin.Config
		root uint32
	)
	f.Fuzz(func(t *testing.T, data string) {
		once.Do(func() {
			m := newFakeModule(0)
			m.warm = true
			m.ProgramInit(1)
			h := m.ConfigNew(0, FilterName, []byte(warmFuzzConfig))
			e := (*m.configs.Load())[h]
			if e == nil || e.side.Worker(0) == nil {
				return
			}
			c, cfg = e.side.Worker(0), e.cfg
			host = fakehost.NewBatcher()
			a = proxywasm.New(host)
			p = a.Plugin()
			p.KeepWarmResults()
			var ok bool
			if root, ok = host.StartPlugin(a, []byte(warmFuzzConfig)); !ok {
				c = nil
				return
			}
			// A cache builds keys only once it holds an entry (before, every
			// lookup is a miss): give it one, as Go does after a first miss.
			if _, err := host.Request(a, root, [][2]string{{"x-user-id", "first"}}); err != nil {
				c = nil
				return
			}
			if key, items, _, ok := p.WarmResult(); !ok || !c.Insert(key, items) {
				c = nil
			}
		})
		if c == nil {
			t.Fatal("no warm cache for the configuration, the plugin refused it, or its first result")
		}
		mu.Lock()
		defer mu.Unlock()
		var pairs [][2]string
		if data != "" {
			for line := range strings.SplitSeq(data, "\n") {
				name, value, _ := strings.Cut(line, "=")
				pairs = append(pairs, [2]string{name, value})
			}
		}
		verdict, key := c.Probe(pairs)
		if _, err := host.Request(a, root, pairs); err != nil {
			t.Fatal(err)
		}
		goKey, items, _, ok := p.WarmResult()
		if !ok {
			t.Fatalf("%q: the plugin has no warm result", pairs)
		}
		owned, folds := false, true
		for _, kv := range pairs {
			owned = owned || cfg.OwnsHeader(kv[0])
			folds = folds && !strings.ContainsFunc(kv[0], func(r rune) bool { return r >= 0x80 })
		}
		var want []dynmod.WarmVerdict
		switch {
		case len(pairs) > dynmod.WarmMaxHeaders:
			want = []dynmod.WarmVerdict{dynmod.WarmTooMany}
		case owned || !folds:
			want = []dynmod.WarmVerdict{dynmod.WarmOwned}
		case len(goKey) > dynmod.WarmMaxKey:
			want = []dynmod.WarmVerdict{dynmod.WarmTooLong}
		default:
			want = []dynmod.WarmVerdict{dynmod.WarmHit, dynmod.WarmMiss}
		}
		if !slices.Contains(want, verdict) {
			t.Fatalf("%q: C's verdict %d, want one of %v (owned by Go's rule: %v, every name ASCII: %v, Go's key %d bytes)",
				pairs, verdict, want, owned, folds, len(goKey))
		}
		if verdict != dynmod.WarmHit && verdict != dynmod.WarmMiss {
			return
		}
		if key != string(goKey) {
			t.Fatalf("%q: C's key %q, the plugin's %q", pairs, key, goKey)
		}
		if !c.Insert(goKey, items) {
			t.Fatalf("%q: C refused the plugin's result (%d key bytes, %d items)", pairs, len(goKey), len(items))
		}
		if v, k := c.Probe(pairs); v != dynmod.WarmHit || k != string(goKey) {
			t.Fatalf("%q: after Go's result was inserted C's verdict is %d with key %q, want a hit", pairs, v, k)
		}
	})
}
