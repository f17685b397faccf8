package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// HTTPCall is one proxy_http_call (dispatch_http_call) made by the guest.
// There is no network: the call is answered by Config.HTTPCalls, or by
// whoever takes it from Host.PendingCalls, through Respond or Fail. The
// answer is delivered to proxy_on_http_call_response on the root context
// that dispatched it, on its VM's goroutine, with the response headers,
// body and trailers readable by the guest during that callback.
type HTTPCall struct {
	VM       int
	Cluster  string
	Headers  []Header
	Body     []byte
	Trailers []Header
	Timeout  time.Duration // 0: none

	// Added beyond the contract.
	ID      uint32 // the callout id returned to the guest
	Context uint32 // the root context that will receive the response

	vm       *VM
	root     *rootContext
	deadline int64 // monotonic nanos; 0 = none

	state atomic.Uint32 // 0 pending, 1 answered/cancelled
	mu    sync.Mutex
	done  chan struct{}
	err   error
}

// HTTPCallHandler answers dispatched calls, e.g. a real HTTP client in a
// gateway. HandleHTTPCall is called after the callback that dispatched the
// call returned (never while the VM runs), on the goroutine that ran the
// callback, so it must not block: answer at once or from another goroutine
// (Respond and Fail are goroutine-safe and do not block).
type HTTPCallHandler interface{ HandleHTTPCall(call *HTTPCall) }

// HTTPCallHandlerFunc adapts a function to HTTPCallHandler.
type HTTPCallHandlerFunc func(call *HTTPCall)

// HandleHTTPCall calls f(call).
func (f HTTPCallHandlerFunc) HandleHTTPCall(call *HTTPCall) { f(call) }

type callResponse struct {
	headers  []Header
	body     []byte
	trailers []Header
}

var errAnswered = errors.New("wasmhost: HTTP call already answered, failed, timed out or cancelled")

// Respond answers the call; the VM delivers proxy_on_http_call_response
// asynchronously (use Wait to wait for it). Header names are lower-cased.
func (c *HTTPCall) Respond(headers []Header, body []byte) error {
	return c.RespondWithTrailers(headers, body, nil)
}

// RespondWithTrailers is Respond with response trailers.
func (c *HTTPCall) RespondWithTrailers(headers []Header, body []byte, trailers []Header) error {
	if !c.claim() {
		return c.answeredErr()
	}
	resp := &callResponse{
		headers:  copyHeaders(headers, false),
		body:     append([]byte(nil), body...),
		trailers: copyHeaders(trailers, false),
	}
	c.post(resp)
	return nil
}

// Fail delivers the failure callback (proxy_on_http_call_response with no
// headers, body or trailers), as Envoy does when the call fails or times
// out.
func (c *HTTPCall) Fail() error {
	if !c.claim() {
		return c.answeredErr()
	}
	c.post(nil)
	return nil
}

// Done returns a channel closed once the answer was delivered to the guest
// (or the call was cancelled).
func (c *HTTPCall) Done() <-chan struct{} { return c.done }

// Wait waits until the answer was delivered and returns the delivery's
// error (e.g. a TrapError if the guest trapped in on_http_call_response).
func (c *HTTPCall) Wait(ctx context.Context) error {
	select {
	case <-c.done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.err
	case <-ctx.Done():
		return fmt.Errorf("wasmhost: HTTP call %d not delivered: %w", c.ID, ctx.Err())
	}
}

// Header returns the first value of the request header name.
func (c *HTTPCall) Header(name string) string {
	for _, kv := range c.Headers {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

func (c *HTTPCall) claim() bool { return c.state.CompareAndSwap(0, 1) }

func (c *HTTPCall) answeredErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return errAnswered
}

func (c *HTTPCall) post(resp *callResponse) {
	vm := c.vm
	vm.h.calls.remove(c)
	vm.post(func() {
		if err := vm.enter(context.Background()); err != nil {
			c.finish(err)
			return
		}
		if vm.calls[c.ID] != c { // cancelled meanwhile
			vm.leave()
			c.finish(c.answeredErr())
			return
		}
		delete(vm.calls, c.ID)
		err := vm.deliverCall(c, resp)
		vm.updateDue()
		vm.leave()
		_ = err // recorded by deliverCall
	})
}

// cancel fails the call without delivering anything (its root context or
// VM is gone). vm.sem held or VM closing.
func (c *HTTPCall) cancel(err error) {
	c.state.Store(1)
	c.vm.h.calls.remove(c)
	c.finish(err)
}

func (c *HTTPCall) finish(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return
	default:
	}
	c.err = err
	close(c.done)
}

// deliverCall runs proxy_on_http_call_response for c. resp nil = failure.
// vm.sem held; c already removed from vm.calls.
func (vm *VM) deliverCall(c *HTTPCall, resp *callResponse) error {
	if c.root.deleted || vm.fn.httpCallResponse == nil {
		c.finish(errCallCancelled)
		return nil
	}
	var nh, nb, nt int
	if resp != nil {
		nh, nb, nt = len(resp.headers), len(resp.body), len(resp.trailers)
	}
	vm.stack[0], vm.stack[1], vm.stack[2], vm.stack[3], vm.stack[4] =
		uint64(c.root.id), uint64(c.ID), uint64(nh), uint64(nb), uint64(nt)
	vm.beginCallback(c.root, nil, c.root.id)
	vm.cur.callResp = resp // nil on failure: the response maps do not exist then
	err := vm.call(vm.fn.httpCallResponse, "proxy_on_http_call_response", 5)
	if err == nil {
		err = vm.endCallback()
	} else {
		vm.cur = callState{}
	}
	c.finish(err)
	return err
}

// timeoutResponse is what Envoy's async client delivers when a call times
// out: the router's local reply, as a successful response.
func timeoutResponse() *callResponse {
	body := []byte("upstream request timeout")
	return &callResponse{
		headers: []Header{{":status", "504"}, {"content-length", "24"}, {"content-type", "text/plain"}},
		body:    body,
	}
}

// callRegistry lists the unanswered calls of a Host.
type callRegistry struct {
	mu    sync.Mutex
	calls []*HTTPCall
}

func (r *callRegistry) add(c *HTTPCall) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *callRegistry) remove(c *HTTPCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range r.calls {
		if x == c {
			r.calls = append(r.calls[:i], r.calls[i+1:]...)
			return
		}
	}
}

func (r *callRegistry) pending() []*HTTPCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*HTTPCall(nil), r.calls...)
}

func (r *callRegistry) cancelAll() {
	for _, c := range r.pending() {
		c.cancel(ErrClosed)
	}
}
