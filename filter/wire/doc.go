// Package wire is the Allot filter's wire contract: every string and number
// the filter puts on the wire and something else reads back. It holds the
// assignment header names and which names the filter owns, the rendering
// of the dictionary header (x-experiments) and the header bytes an
// assignment adds, the stat names (the counters, the outcome stats by
// experiment, assignment revision, variation and response class, with the
// one function that builds an outcome stat's name and the one that parses
// it back), the latency histogram's bounds, the stats namespace Envoy
// prefixes them with and the filter state the access log reads; and the
// filter's one log-level type, as Envoy numbers levels for both ABIs.
//
// Both sides import it: the filter (filter/plugin, filter/nativemod)
// writes these names, and the control plane (translate's header budget,
// outcomes' aggregation, the load generator), bench, e2e and deploy's
// tests read them. It imports only the standard library, and only what
// the Wasm module links anyway (strconv, strings): no fmt, os,
// encoding/json, time, regexp or net.
package wire
