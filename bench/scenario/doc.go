// Package scenario holds the benchmark's runners: each starts the processes
// it measures (Envoy, allotd, etcd, the upstream and load generators, via
// internal/harness), pinned to CPUs, and fills in report's results —
// the rounds of every variant (Prepare, MeasureRounds), the interleaved
// rounds (MeasureInterleaved), the extras (micro-benchmarks, load time,
// memory and RSS, the native module's C hits), propagation, the replicas
// and outcomes load (MeasureReplicas), and the sections run alone: a
// comparison of two builds (RunCompare), the VM benchmark (RunVM), the
// floors (RunFloors) and the replicas section (RunReplicas), which write
// their own outputs.
//
// It imports variant (what to run) and report (where results go); suite
// orchestrates make bench on top of it.
package scenario
