package scenario

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
)

// floorsDefault are the variants `make bench-floors` measures when -only
// names none: the Wasm floors K and L, K's native counterpart M, and the
// variants they explain.
const floorsDefault = "EGHIJKLM"

// RunFloors is the floors diagnostic (`make bench-floors`, -floors): the
// interleaved measurement alone, without latency slices, of the floor
// variants and the variants they explain; it writes bench/raw/FLOORS.md.
// make bench keeps K, which its targets use; L and M answered their
// question (bench/README.md) and live here.
func RunFloors(ctx context.Context, o variant.Options, p *variant.Paths, logf func(string, ...any)) error {
	start := time.Now()
	vs, err := variant.SelectVariants(cmp.Or(o.Only, floorsDefault), true)
	if err != nil {
		return err
	}
	res := &report.Results{Started: start, Options: o, Machine: DescribeMachine(o), Commands: []string{o.Command}, LoadBefore: Loadavg()}
	for _, v := range vs {
		res.Variants = append(res.Variants, v.Info())
	}
	cmd := "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o bench/raw/bin/minwasm.wasm ./bench/minwasm"
	if err := goBuild(ctx, o.Root, p.MinWasm, "./bench/minwasm", true); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	res.Commands = append(res.Commands, cmd)
	cmds, err := buildFor(ctx, o, p, vs)
	if err != nil {
		return err
	}
	res.Commands = append(res.Commands, cmds...)
	rounds := cmp.Or(o.PairedRounds, pairedRounds)
	logf("floors: %d rounds of %d requests per variant, every Envoy up at once", rounds, pairedRequests)
	if res.Paired, err = measurePaired(ctx, o, p, vs, AuthzService{}, pairedPlan{rounds: rounds, alternate: true}); err != nil {
		return fmt.Errorf("floors: %w", err)
	}
	res.LoadAfter = Loadavg()
	res.Duration = time.Since(start)
	report, err := report.RenderFloors(res)
	if err != nil {
		return err
	}
	return writeOutputs(o, p.Raw, "floors.json", res, "FLOORS.md", report, res.Duration, logf)
}
