package variant

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allotmesh/allot/bench/floor"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

// FloorWrites runs Allot natively on the fake host with the configuration
// cfg over the warm user ids and returns the writes it makes for a typical
// unit — the id whose number of added headers is the median — as a floor
// script: the same headers and exposure property, written with the same
// host call, with the "bench" experiment's variation left as floor.Var so
// that the floor filter computes it per request like E. It also returns that
// unit's id and Allot's output headers for it (for tests).
func FloorWrites(cfg []byte) (sc *floor.Script, id string, out [][2]string, err error) {
	host := fakehost.New()
	p := proxywasm.New(host)
	root, ok := host.StartPlugin(p, cfg)
	if !ok {
		return nil, "", nil, fmt.Errorf("floor: configuration refused: %v", host.Logs)
	}
	type unit struct {
		id    string
		added int
	}
	units := make([]unit, WarmIDs)
	for i := range units {
		u := "user-" + strconv.Itoa(i)
		in := BenchRequest(u)
		o, err := host.Request(p, root, in)
		if err != nil {
			return nil, "", nil, err
		}
		units[i] = unit{u, len(o) - len(in)}
	}
	slices.SortStableFunc(units, func(a, b unit) int { return a.added - b.added })
	id = units[len(units)/2].id

	in := BenchRequest(id)
	pairs := host.SetPairsCalls
	clear(host.Properties)
	out, err = host.Request(p, root, in)
	if err != nil {
		return nil, "", nil, err
	}
	if len(out) < len(in) || !slices.Equal(out[:len(in)], in) {
		return nil, "", nil, fmt.Errorf("floor: Allot changed the request's own headers for %s: %q", id, out)
	}
	v, err := HashExpect(id)
	if err != nil {
		return nil, "", nil, err
	}
	sc = &floor.Script{Rewrite: host.SetPairsCalls > pairs}
	for _, h := range out[len(in):] {
		val := h[1]
		switch h[0] {
		case BenchHeader:
			val = floor.Var
		case DictHeader:
			if val, err = benchMemberVar(val, v); err != nil {
				return nil, "", nil, err
			}
		}
		sc.Headers = append(sc.Headers, floor.Write{Name: h[0], Value: val})
	}
	if st, ok := host.Properties[wire.ExposureProperty]; ok {
		val, err := benchMemberVar(string(st), v)
		if err != nil {
			return nil, "", nil, fmt.Errorf("exposure property: %w", err)
		}
		sc.Props = append(sc.Props, floor.Write{Name: wire.ExposureProperty, Value: val})
	}
	return sc, id, out, nil
}

// benchMemberVar replaces the value of the dictionary member bench (v) with
// floor.Var.
func benchMemberVar(dict, v string) (string, error) {
	members := strings.Split(dict, ", ")
	i := slices.Index(members, "bench="+strconv.Quote(v))
	if i < 0 {
		return "", fmt.Errorf("floor: no member bench=%q in %q", v, dict)
	}
	members[i] = "bench=" + strconv.Quote(floor.Var)
	return strings.Join(members, ", "), nil
}

// BenchRequest is the request the benchmark sends for id, as the filter
// sees it (the native runs on the fake host use it).
func BenchRequest(id string) [][2]string {
	in := [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "bench"}, {"x-user-id", id}}
	return append(in, RequestHeaders...)
}

// floorFilter renders the minimal filter configured to replay the writes
// Allot makes under cfg.
func floorFilter(cfg func() []byte) func(*Paths) ([]any, error) {
	return func(p *Paths) ([]any, error) {
		sc, _, _, err := FloorWrites(cfg())
		if err != nil {
			return nil, err
		}
		ext, err := translate.WasmExtension(wrapperspb.String(sc.String()), translate.Mesh{WasmPath: p.MinWasm})
		if err != nil {
			return nil, err
		}
		return typedFilter(ext)
	}
}

// nativeFloorFilter is floorFilter's native counterpart: the dynamic
// module so replays the same write script, given as a
// google.protobuf.StringValue filter_config — the minimal Go module
// (bench/mindynmod, U) with the callbacks Allot's native module makes those
// writes with from Go, the C module (bench/cdynmod, o) with those its C
// warm path makes them with.
func nativeFloorFilter(so func(*Paths) string, cfg func() []byte) func(*Paths) ([]any, error) {
	return func(p *Paths) ([]any, error) {
		sc, _, _, err := FloorWrites(cfg())
		if err != nil {
			return nil, err
		}
		return ModuleFilter(so, map[string]any{
			"@type": "type.googleapis.com/google.protobuf.StringValue", "value": sc.String()})(p)
	}
}
