// Package telemetry is the admin's side of the plugin's telemetry reports
// (docs/telemetry.md): it decodes and validates a report (Decode), keeps
// the recent history in memory (State) and exports it to Prometheus
// (Collector) and to the dashboard (State.Overview, State.Search).
//
// The model. Each worker VM of each Envoy node POSTs a report about once a
// second with CUMULATIVE counters since the VM started (per rule: allowed,
// rejected, shadow-rejected, fail-open) and the state of its hottest
// buckets. The admin turns the counters into per-second deltas per
// (node, VM): a new vm_start_ms, or a counter going down, is a restart and
// counts from zero; a report whose seq is not above the last one of that VM
// is a duplicate and is ignored. Deltas are added, at the second the report
// arrived, to a ring per rule (all nodes merged) and a ring per (rule, node),
// each holding the last History (15 minutes by default) one second per
// slot. Bucket states are kept per (rule, node, identity), the most recently
// refilled state winning when several VMs of a node report the same bucket
// (they share it), with their rejects summed; at most MaxBuckets are kept,
// the least recently reported evicted first.
//
// Everything is bounded (nodes, VMs per node, rules, series, buckets, and
// the estimated bytes of all but the buckets: Options.MaxBytes, budget.go);
// past a bound a new item is refused unless an idle one can go, so what
// reports keeps updating. Everything is guarded by one mutex: ingesting a report costs a few microseconds plus
// about a hundred nanoseconds per bucket, so one core ingests thousands of
// reports a second (docs/benchmarks.md).
//
// Nothing here reads the clock: every method takes now, so tests drive time
// explicitly.
package telemetry
