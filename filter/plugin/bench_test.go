package plugin_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

// benchHost is the cheapest possible abi.Host: it serves one fixed header
// map and discards every write, so a benchmark measures the plugin alone.
type benchHost struct {
	pairs [][2]string
}

func (*benchHost) Log(wire.LogLevel, string)                          {}
func (*benchHost) GetBuffer(abi.BufferType, int, int) ([]byte, error) { return nil, nil }
func (h *benchHost) GetHeaderMapPairs(abi.MapType) ([][2]string, error) {
	return h.pairs, nil
}
func (*benchHost) AddHeaderMapValue(abi.MapType, string, string) error           { return nil }
func (*benchHost) RemoveHeaderMapValue(abi.MapType, string) error                { return nil }
func (*benchHost) SetHeaderMapPairs(abi.MapType, []byte) error                   { return nil }
func (*benchHost) GetProperty(...string) ([]byte, error)                         { return nil, abi.ErrNotFound }
func (*benchHost) SetProperty(string, []byte) error                              { return nil }
func (*benchHost) DefineMetric(abi.MetricType, string) (uint32, error)           { return 1, nil }
func (*benchHost) IncrementMetric(uint32, int64) error                           { return nil }
func (*benchHost) GetHeaderMapValue(abi.MapType, string) (string, error)         { return "200", nil }
func (*benchHost) RecordMetric(uint32, uint64) error                             { return nil }
func (*benchHost) CurrentTimeNanos() (int64, error)                              { return 0, nil }
func (*benchHost) SetTickPeriod(uint32) error                                    { return nil }
func (*benchHost) SendLocalResponse(uint32, string, []byte, []byte, int32) error { return nil }

// benchConfig is n experiments targeting country, platform and version,
// about a third of which match benchRequest: the shape of make bench's
// variants F–H.
func benchConfig(n int, extra string) string {
	var sb strings.Builder
	sb.WriteString(`{"version":"bench",` + extra + `"attributes":[{"name":"country","header":"x-country"},` +
		`{"name":"platform","header":"x-platform"},{"name":"version","header":"x-app-version"}],"experiments":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		platform := "ios"
		if i%2 == 1 {
			platform = "android"
		}
		fmt.Fprintf(&sb, `{"key":"exp-%04d","variations":["control","treatment","alt"],"coverage":0.9,`+
			`"condition":{"country":{"$in":["US","CA","GB"]},"platform":{"$eq":%q},"version":{"$vgte":"2.%d.0"}}}`,
			i, platform, i%3)
	}
	sb.WriteString(`]}`)
	return sb.String()
}

// benchmarkRequest runs the whole request path (context create, request
// headers, delete) against benchHost; ids distinct user ids cycle (ids < 0:
// a new id on every request, so every request misses the cache).
func benchmarkRequest(b *testing.B, n, ids int, extra string) {
	h := &benchHost{}
	p := proxywasm.New(h)
	p.OnContextCreate(1, 0)
	if !p.OnConfigure(1, 0) { // size 0: empty configuration first
		b.Fatal("empty configuration refused")
	}
	cfg, err := plugin.ParseConfig([]byte(benchConfig(n, extra)))
	if err != nil {
		b.Fatal(err)
	}
	p.Plugin().SetConfig(1, cfg, false)
	users := make([]string, max(ids, 1))
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	h.pairs = [][2]string{{":authority", "bench"}, {":path", "/"}, {":method", "GET"}, {":scheme", "http"},
		{"user-agent", "bench"}, {"x-user-id", ""}, {"x-country", "US"}, {"x-platform", "ios"}, {"x-app-version", "2.3.1"}}
	// Warm up: every id once.
	for i := range users {
		h.pairs[5][1] = users[i]
		p.OnContextCreate(2, 1)
		p.OnRequestHeaders(2, len(h.pairs), true)
		p.OnDelete(2)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if ids < 0 {
			h.pairs[5][1] = "cold-" + strconv.Itoa(i)
		} else {
			h.pairs[5][1] = users[i%ids]
		}
		id := uint32(2 + i%8)
		p.OnContextCreate(id, 1)
		p.OnRequestHeaders(id, len(h.pairs), true)
		p.OnDelete(id)
	}
}

func BenchmarkRequestWarm1(b *testing.B)  { benchmarkRequest(b, 1, 1000, "") }
func BenchmarkRequestWarm50(b *testing.B) { benchmarkRequest(b, 50, 1000, "") }
func BenchmarkRequestWarm50Dictionary(b *testing.B) {
	benchmarkRequest(b, 50, 1000, `"assignmentHeaders":"ASSIGNMENT_HEADERS_DICTIONARY",`)
}
func BenchmarkRequestCold50(b *testing.B) { benchmarkRequest(b, 50, -1, "") }

// TestRequestPathAllocatesNothing: in steady state neither a cache hit nor
// a miss allocates. On Wasm every byte of garbage between two collections
// is VM memory for good (linear memory never shrinks).
func TestRequestPathAllocatesNothing(t *testing.T) {
	h := &benchHost{}
	p := proxywasm.New(h)
	p.OnContextCreate(1, 0)
	if !p.OnConfigure(1, 0) {
		t.Fatal("empty configuration refused")
	}
	cfg, err := plugin.ParseConfig([]byte(benchConfig(50, `"cacheMaxBytes":65536,`)))
	if err != nil {
		t.Fatal(err)
	}
	p.Plugin().SetConfig(1, cfg, true)
	ids := make([]string, 20000)
	for i := range ids {
		ids[i] = "user-" + strconv.Itoa(i)
	}
	h.pairs = [][2]string{{":path", "/"}, {"x-user-id", ""}, {"x-country", "US"}, {"x-platform", "ios"}, {"x-app-version", "2.3.1"}}
	for _, c := range []struct {
		name   string
		ids    int
		forged bool
	}{{"hits", 100, false}, {"misses", len(ids), false}, {"hits with forged headers", 100, true}} {
		h.pairs = h.pairs[:5]
		if c.forged { // removed one host call each: no allocation either
			h.pairs = append(h.pairs, [2]string{"X-Experiment-Exp-1", "forged"}, [2]string{"x-experiments", "forged"})
		}
		i := 0
		request := func() {
			h.pairs[1][1] = ids[i%c.ids]
			i++
			p.OnContextCreate(2, 1)
			p.OnRequestHeaders(2, len(h.pairs), true)
			p.OnDelete(2)
		}
		for range 200 { // warm up: buffers grown, the arena made
			request()
		}
		misses := p.Plugin().Misses(1)
		if allocs := testing.AllocsPerRun(5000, request); allocs != 0 {
			t.Errorf("%s: %v allocations per request", c.name, allocs)
		}
		if got := p.Plugin().Misses(1) - misses; (c.ids == len(ids)) != (got > 4000) {
			t.Errorf("%s: %d cache misses in 5001 requests", c.name, got)
		}
	}
}
