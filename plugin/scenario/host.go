// Package scenario holds the filter's behaviour scenarios, written once and
// run against every proxy-wasm host the project tests under: plugin/wasmhost
// (wazero, in process) and plugin/envoyhost (Envoy's own wasm host library,
// proxy-wasm-cpp-host with WAMR, in a child process). A scenario only sees
// the Host interface below, so a difference between the hosts shows up as a
// scenario that passes under one and fails under the other.
package scenario

import (
	"testing"
	"time"
)

// Header is one header entry: lower-case name and value.
type Header = [2]string

// Request is one HTTP exchange.
type Request struct {
	// Headers are the downstream request headers. Missing :method, :path,
	// :authority and :scheme default to GET, /, localhost and http.
	Headers []Header
	// Properties are per-request property values by dotted path, for
	// example {"source.address": []byte("10.0.0.1:5555")}.
	Properties map[string][]byte
	// ResponseHeaders is what the upstream answers (default :status 200).
	ResponseHeaders []Header
	// ResponseTrailers, when not empty, end the upstream's response: the
	// headers go to on_response_headers without end of stream (and the
	// body chunks too), then these to on_response_trailers.
	ResponseTrailers []Header
	// ResponseBody, when not empty, is the upstream's response body in the
	// chunks (data frames) it arrives in, delivered one by one as Envoy
	// does: on_response_headers without end of stream, then
	// on_response_body(len(chunk), end_of_stream) per chunk, during which
	// the HttpResponseBody buffer holds that chunk only; end_of_stream is
	// true on the last chunk unless ResponseTrailers follow (then false on
	// every chunk). An empty chunk is delivered as is (Envoy's empty last
	// frame). Each chunk goes downstream unchanged (Response.ResponseBody).
	// The plugin must return Continue from on_response_body: anything else
	// (Envoy would buffer) is a host error. No chunk follows a local reply.
	// nil: no body, as before.
	ResponseBody [][]byte
	// ResetAfterBodyChunks, when > 0, resets the stream after that many
	// chunks of ResponseBody (at most len(ResponseBody)), all delivered
	// without end of stream: no trailers, then on_log and on_done as for
	// any reset. Status and ResponseHeaders are the upstream's (they went
	// downstream), ResponseBody the chunks delivered.
	ResetAfterBodyChunks int
	// ResetAfterRequest resets the stream after its request went upstream,
	// before any response (on_log and on_done run; Status is 0).
	ResetAfterRequest bool
	// HoldUpstream keeps the stream open after its request went upstream,
	// as an upstream still working on it does: HTTP returns with Stream set
	// (Paused false), and Stream.Complete delivers ResponseHeaders (then
	// ResponseBody and ResponseTrailers) and ends the stream, or
	// Stream.Reset ends it without a response.
	HoldUpstream bool
}

// Response is the outcome of a request.
type Response struct {
	Rejected  bool   // the plugin sent a local response
	Status    int    // status sent downstream
	LocalBody []byte // body of the local response, if any
	// LocalDetails: the response code details the local response passed
	// (white space replaced by '_', as Envoy keeps them), which access logs
	// print for %RESPONSE_CODE_DETAILS%; "" without a local response.
	LocalDetails    string
	UpstreamHeaders []Header // request headers as forwarded upstream (nil if rejected before that)
	ResponseHeaders []Header // response headers sent downstream, after on_response_headers
	Paused          bool     // on_request_headers paused and nothing resumed it within the call
	Stream          Stream   // set when Paused, or for a request that held its upstream (HoldUpstream)
	// ResponseBody is the body that went downstream: the chunks of
	// Request.ResponseBody delivered, concatenated; nil when rejected
	// before the body, or when no chunk (or none but empty ones) went. A
	// local reply sent once the response headers went downstream (during
	// on_response_body) cannot replace the response: Envoy resets the
	// stream, so Rejected and LocalBody are set while Status,
	// ResponseHeaders and ResponseBody are what went downstream before the
	// reset (the chunks before the one whose callback replied).
	ResponseBody []byte
}

// Stream is a paused request, or one whose upstream has not answered.
type Stream interface {
	// Settled reports whether the plugin has resumed the request
	// (continue_stream) or answered it with a local response.
	Settled() bool
	// Complete finishes a settled stream as Host.HTTP would have (the
	// upstream's answer of the Request: on_response_headers, the body
	// chunks, trailers; then on_log, on_done, on_delete).
	Complete() (Response, error)
	// Reset ends the stream as a downstream reset does in Envoy (on_log,
	// on_done, on_delete without a response).
	Reset() error
}

// Call is a dispatch_http_call made by the plugin and not answered yet.
type Call struct {
	ID      uint32 // unique within the host, across VMs (not necessarily the guest's callout id)
	VM      int
	Cluster string
	Headers []Header
	Body    []byte
}

// Options start a host.
type Options struct {
	WasmPath string            // the compiled module
	Config   []byte            // the plugin configuration (proxy_on_configure)
	VMs      int               // worker VMs sharing one shared-data store (default 1)
	Env      map[string]string // VM environment variables (vm_config.environment_variables)
	Start    time.Time         // the clock's start; the clock moves only with Advance
	NodeID   string            // the node.id property (default: the host's own)
	Clusters []string          // clusters dispatch_http_call may name (nil: any)
}

// Host is what a scenario needs from a proxy-wasm host. Calls on different
// VMs may run concurrently; calls on one VM are serialized by the caller.
type Host interface {
	Name() string
	// HTTP runs one full stream on VM vm.
	HTTP(vm int, r Request) (Response, error)
	// HTTPMany runs the streams one after another on VM vm (a host may
	// pipeline them); it stops at the first host error.
	HTTPMany(vm int, rs []Request) ([]Response, error)
	// Advance moves the realtime and monotonic clocks forward by d.
	Advance(d time.Duration)
	// Tick runs proxy_on_tick on every root context whose tick is due and
	// times out the calls whose timeout passed: VM 0 first, then VM 1, and
	// so on, each VM's in the order they fell due (a timeout first at the
	// same instant).
	Tick() error
	// Reconfigure applies a new plugin configuration to every VM, keeping
	// shared data, as Envoy does on a configuration-only update; it fails
	// if any VM rejects it.
	Reconfigure(config []byte) error
	// Metric returns the counter or gauge the plugin defined under name.
	Metric(name string) (uint64, bool)
	// Logs returns the plugin's log lines, oldest first.
	Logs() []string
	// SharedDataSize returns the number of shared-data keys and the sum of
	// len(key)+len(value) over them.
	SharedDataSize() (keys, bytes int, err error)
	// SharedGet returns a shared-data value.
	SharedGet(key string) (value []byte, ok bool, err error)
	// PendingCalls returns the dispatched calls not answered yet.
	PendingCalls() ([]Call, error)
	// Respond answers a pending call; the plugin's on_http_call_response
	// has run when Respond returns.
	Respond(id uint32, headers []Header, body []byte) error
	// FailCall delivers the failure callback of a pending call (Envoy's
	// on_http_call_response with no headers, body or trailers); like
	// Respond, it returns once the plugin's callback has run.
	FailCall(id uint32) error
	// Close stops the host.
	Close() error
}

// Starter starts a host; it returns an error, not a test failure, when the
// plugin rejects the configuration, so that scenarios can check refusals.
type Starter func(tb testing.TB, opts Options) (Host, error)

// Case is one scenario: Run drives hosts it starts with start and fails t
// when the plugin under that host misbehaves.
type Case struct {
	Name string
	Run  func(t *testing.T, start Starter)
}

var cases []Case

// register adds a scenario; each scenario file registers its cases in init.
func register(c ...Case) { cases = append(cases, c...) }

// Cases returns every registered scenario, in registration order.
func Cases() []Case { return append([]Case(nil), cases...) }

// Run runs every scenario as a subtest of t against the host start makes.
func Run(t *testing.T, start Starter) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, start) })
	}
}
