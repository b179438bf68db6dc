package report

// The OFREP rows (#45): what a bulk evaluation over OFREP costs each
// artifact against a header request of the same configuration and units —
// G's 50 experiments with the endpoint on, every request POST
// /ofrep/v1/evaluate/flags with the unit's context (e, f), against G and Q
// in the same interleaved rounds. Reported, not judged.
var ofrepRows = []costSpec{
	{"Wasm", "a bulk evaluation of the 50 experiments for the unit, answered by the filter from its request-body callback after Envoy's buffer filter held the body (e against G)", "e", "G"},
	{"native", "the same evaluation on the native module, answered as its body arrives, no buffer filter (f against Q)", "f", "Q"},
}

// ofrep are the OFREP rows the run measured, each against its header
// request.
func (v *reportView) ofrep() {
	for _, t := range ofrepRows {
		if c, ok := v.costRow(t); ok && c.Base != "" {
			v.OFREP = append(v.OFREP, c)
		}
	}
}
