package filter

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/bodyscan"
)

func (p *pluginContext) NewHttpContext(contextID uint32) types.HttpContext {
	// Must never return nil (the SDK would panic): nothing here can fail.
	// HTTP contexts are recycled (see OnHttpStreamDone): one allocation less
	// per request.
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free = p.free[:n-1]
		h.recycle(p)
		h.id = contextID
		return h
	}
	return &httpContext{p: p, id: contextID}
}

// maxFreeContexts bounds the recycled HTTP contexts per root context.
const maxFreeContexts = 64

// OnHttpStreamDone is proxy_on_log, the last callback a stream's context
// receives (after it the host only calls proxy_on_done and proxy_on_delete,
// which the SDK handles without calling the context). The context is then
// free for reuse by a new stream.
func (h *httpContext) OnHttpStreamDone() {
	if h.hold.held { // reset while held (delay.go): leave the queue, refund
		h.p.cancelHold(h)
	}
	h.p.vm.fleetForget(h)   // fleet.go: no longer waits for a lease
	if len(h.charges) > 0 { // charge.go: the response never reported these
		h.chargeRemaining()
	}
	if p := h.p; len(p.free) < maxFreeContexts {
		if len(h.charges) > 0 { // clear is a runtime call (a memory.fill) even when empty
			clear(h.charges) // do not retain rules of an old configuration
		}
		if len(h.own) > 0 {
			clear(h.own)
		}
		h.recycle(p)
		p.free = append(p.free, h)
	}
}

// recycle clears h for a new stream of p, keeping its charge buffers. It
// clears in place and puts the buffers back: assigning a new httpContext
// would build it and copy it over h (in wasm a memory.copy, which Envoy's
// fast JIT runs as a call into the runtime).
func (h *httpContext) recycle(p *pluginContext) {
	charges, keys, scans, own := h.charges[:0], h.chargeKeys[:0], h.scans[:0], h.own[:0]
	*h = httpContext{}
	h.p, h.charges, h.chargeKeys, h.scans, h.own = p, charges, keys, scans, own
}

// httpContext is one HTTP stream.
type httpContext struct {
	types.DefaultHttpContext
	p       *pluginContext
	id      uint32         // the context id (to resume it from on_tick)
	local   bool           // we sent a local reply (our 429)
	allowed allowedHeaders // what on_response_headers adds (rule nil: nothing)
	hold    holdState      // delay.go
	// numHeaders is the request's header count the host reported (keys.go:
	// how its headers are read).
	numHeaders int

	// Fleet mode (fleet.go): a request paused for leases (resumed by id).
	fleetWaits   int  // asks in flight this request waits for
	fleetFetched bool // it waited once: decide again without fetching
	fleetDone    bool // the stream ended while waiting

	// Response-charged rules that admitted the request (charge.go), and
	// their bucket keys; both kept when the context is recycled.
	charges    []pendingCharge
	chargeKeys []byte
	// The numbers of the rules with fields of their own that admitted
	// the request (limit_headers.go), kept too.
	own []ownNumbers
	// The body scans of response_json rules (body.go), kept too, and
	// how many still read the body.
	scans     []bodyscan.Scanner
	bodyScans int
}

func (h *httpContext) OnHttpRequestHeaders(numHeaders int, _ bool) (action types.Action) {
	defer func() {
		if r := recover(); r != nil {
			h.p.vm.recovered("on_request_headers", r)
			h.allowed = allowedHeaders{}
			action = types.ActionContinue
			if h.local {
				action = types.ActionPause
			}
		}
	}()
	if h.p.cfg == nil {
		return types.ActionContinue
	}
	h.numHeaders = numHeaders
	return h.p.decide(h)
}

func (h *httpContext) OnHttpResponseHeaders(_ int, endOfStream bool) types.Action {
	if len(h.charges) > 0 && !h.local {
		h.chargeResponse(false, endOfStream) // charge.go: costs in response headers
	}
	// Envoy runs this callback for our own local reply too: its headers are
	// already final, leave them alone. (These checks cannot panic; the
	// recover is paid only when there is work.)
	if h.local || h.allowed.rule == nil || h.p.cfg == nil || !h.p.cfg.responseHeaders {
		return types.ActionContinue
	}
	h.setResponseHeaders()
	return types.ActionContinue
}

// OnHttpResponseTrailers charges the costs reported in response trailers
// (charge.go).
func (h *httpContext) OnHttpResponseTrailers(int) types.Action {
	if len(h.charges) > 0 && !h.local {
		h.chargeResponse(true, true)
	}
	return types.ActionContinue
}

// OnHttpResponseBody reads the body for the response_json rules that
// admitted the request (body.go); the body passes on unchanged.
func (h *httpContext) OnHttpResponseBody(bodySize int, endOfStream bool) types.Action {
	if h.bodyScans > 0 && !h.local {
		h.scanBody(bodySize, endOfStream)
	}
	return types.ActionContinue
}

func (h *httpContext) setResponseHeaders() {
	defer func() {
		if r := recover(); r != nil {
			h.p.vm.recovered("on_response_headers", r)
		}
	}()
	h.p.setAllowedHeaders(h.allowed)
	if len(h.own) > 0 {
		h.p.setOwnHeaders(h.own) // limit_headers.go
	}
	if h.hold.delayMS > 0 {
		h.p.setDelayHeader(h)
	}
}
