// Package wasmhost runs proxy-wasm modules (ABI 0.2.x, as built from Go with
// GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared) the way Envoy does,
// on wazero, in native Go. It is the test and development host of Sluice:
// the plugin's tests, the benchmarks and the development gateway run the
// real .wasm through it, so that what passes here behaves the same in Envoy.
//
// # Model
//
// A Host compiles the module once (wazero's compiler engine; the compilation
// is cached in memory for the process, or on disk with Config.CacheDir) and
// instantiates Config.VMs copies of it, like the VMs of Envoy's worker
// threads. All VMs of a Host share one SharedData, one set of metrics (by
// name), one set of shared queues and one Clock. Each VM runs one callback at
// a time: synchronous calls run the guest on the caller's goroutine while
// holding the VM; asynchronous events (HTTP call answers, queue
// notifications, background ticks) are queued to the VM's own goroutine.
// (Handing every request to the VM goroutine instead cost about 0.5-1 µs per
// stream in BenchmarkEmptyStream, for no observable difference to the guest.)
//
// # Emulated faithfully (following proxy-wasm-cpp-host and Envoy)
//
//   - Start-up of each VM: _initialize (the Go runtime and package init),
//     proxy_on_context_create(root, 0), proxy_on_vm_start, proxy_on_configure;
//     a false return or a trap fails New with the VM id and the guest's logs.
//   - Config-only updates (Host.Reconfigure): a new root context per VM,
//     shared data and VM memory kept; rejected as a whole if any VM (or the
//     canary, with Config.Canary) returns false; an old root context stays
//     alive (ticks, callouts) until the streams created on it end, then gets
//     on_done, then on_delete (after proxy_done if on_done returned false),
//     and its pending callouts are cancelled.
//   - Shared data: see SharedData (one lock, one global CAS counter from 1
//     skipping 0, no create-if-absent, cas 0 overwrites, no delete). Fault
//     injection (SharedData.InjectFaults) on the guest's calls.
//   - Clocks: the WASI realtime and monotonic clocks (what Go's time.Now
//     reads) come from Config.Clock, shared by all VMs; ManualClock freezes,
//     advances and steps realtime backwards (monotonic never goes back). A
//     guest sleep advances a ManualClock instead of blocking.
//   - Buffers through proxy_get_buffer_bytes (plugin configuration only
//     during on_configure, VM configuration, the HTTP call response body
//     during on_http_call_response, the response body: the current chunk
//     during on_response_body, else empty as in Envoy), the range clipped
//     to the buffer as proxy-wasm-cpp-host does (reading nothing is Ok
//     with a null pointer, which the Go SDK reports as NotFound); values
//     returned to the guest are
//     allocated in it with its malloc export if it has one, else with
//     proxy_on_memory_allocate (Envoy's order); empty values come back
//     as a null pointer without allocating.
//   - Header maps: names lower-cased; get returns the first value; replace
//     updates the first entry (or adds); remove removes every entry; get/set
//     pairs. A map that does not exist at that point (the response headers
//     during the request phase, any stream map outside a stream) gives
//     BadArgument; maps are read-only in on_log.
//   - send_local_response: takes effect after the current callback returns,
//     one per stream (a second gives BadArgument); the reply (":status", the
//     plugin's headers, content-length and content-type text/plain for a
//     non-empty body) then runs through the plugin's own
//     on_response_headers, as it does in Envoy. A reply sent during
//     on_response_headers replaces the response.
//   - continue_stream also takes effect after the callback; a paused request
//     can be resumed or answered from on_tick or on_http_call_response via
//     proxy_set_effective_context.
//   - Stream order: context create, on_request_headers, on_response_headers,
//     on_response_body per chunk of the response body, on_response_trailers,
//     on_log, on_done, on_delete (Reset: on_log, on_done, on_delete too,
//     also mid-body: Request.ResetAfterBodyChunks).
//   - The response body (Request.ResponseBody, Stream.ResponseBody): the
//     headers without end of stream, then on_response_body(len(chunk),
//     end_of_stream) per chunk, end_of_stream on the last unless trailers
//     follow; each chunk goes downstream unchanged. A local reply once the
//     response headers went downstream resets the stream, as in Envoy.
//   - dispatch_http_call: needs :method, :path, :authority and a cluster
//     (Config.Clusters, if set, lists the known ones) else BadArgument; the
//     answer reaches on_http_call_response on the dispatching root context,
//     on its VM's goroutine. A timeout (per the Clock, checked by Tick)
//     delivers Envoy's 504 "upstream request timeout"; HTTPCall.Fail
//     delivers the failure callback (no headers).
//   - Ticks: proxy_set_tick_period_milliseconds per root context; on_tick
//     when due per the monotonic clock, without catch-up (Host.Tick, or
//     StartTicker in the background).
//   - Metrics: counters, gauges, histograms shared by name across VMs like
//     Envoy stats; a counter increment <= 0 is BadArgument; get on a
//     histogram is BadArgument.
//   - Shared queues: register, resolve by (vm_id, name), enqueue (notifies
//     the last registrant's root context with on_queue_ready, on its VM),
//     dequeue (Empty when empty).
//   - Properties: per-request Properties, Config.Properties, then built-ins:
//     plugin_name, plugin_root_id, plugin_vm_id, node.id, request.path,
//     url_path, host, scheme, method, referer, useragent, id, protocol,
//     time (int64 Unix ns), headers, response.code, response.headers,
//     source.port and destination.port (derived from the addresses);
//     values set with proxy_set_property. Path elements are NUL-separated;
//     one element containing a dot is not split (as in Envoy).
//   - Traps: a wasm trap, a Go guest panic (which aborts the guest) or a
//     host function panic returns a *TrapError naming the VM and the
//     callback, with the guest's stderr, and breaks the VM: later calls
//     return an error naming it. Other VMs go on.
//   - Anything else the module imports from "env" answers Unimplemented
//     (proxy_close_stream too); proxy_call_foreign_function answers from
//     Config.ForeignFunctions, else NotFound.
//
// # Not emulated
//
//   - No network: HTTP calls are answered by Config.HTTPCalls or by the
//     caller through Host.PendingCalls (package netcall is an HTTPCalls
//     that answers over the network: http, https and h2c clusters, with
//     response trailers, e.g. a gRPC rate limit service).
//   - No request body, and no trailers but the response's: requests carry
//     headers only (on_request_headers gets end_of_stream true), the
//     request body buffer is absent (NotFound), on_request_body and
//     on_request_trailers are never called. Response trailers
//     (Request.ResponseTrailers) are readable, not writable, in
//     on_response_trailers. The response body is readable, not writable
//     (set_buffer_bytes: Unimplemented), and on_response_body must return
//     Continue: buffering (StopIterationAndBuffer, ...) fails the call as
//     not supported. A response-phase Pause from on_response_headers is
//     reported but not otherwise modelled.
//   - No L4 (TCP) filters, no gRPC calls or streams, no WASI filesystem or
//     sockets (stdout and stderr are captured; stderr is echoed to
//     Config.LogWriter).
//   - No canary VM unless Config.Canary is set; shared queues and shared
//     data are per Host (Envoy: per process and vm_id; pass
//     Config.SharedData to share a store between Hosts).
//   - Envoy's own request headers (x-request-id, x-forwarded-*, date,
//     server) are not added; only missing pseudo-headers get defaults.
//   - A callback is not interrupted when a context ends: ctx bounds the wait
//     for the VM, not the guest's run time.
//   - The Go runtime bug golang/go#78513 (an errno from Envoy's poll_oneoff
//     treated as fatal during GC) cannot be reproduced here.
package wasmhost
