package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Properties are property values keyed by dotted path ("source.address",
// "request.time"). Values are raw bytes in Envoy's encoding: strings as
// is, integers and timestamps as 8-byte little-endian int64 (timestamps in
// Unix nanoseconds), maps as serialized header maps.
type Properties map[string][]byte

// Header is one header entry: name (lower-case) and value.
type Header = [2]string

// Request is one HTTP exchange for VM.HTTP.
type Request struct {
	// Headers are the downstream request headers. Missing :method, :path,
	// :authority and :scheme default to GET, /, localhost and http.
	// Names are lower-cased.
	Headers []Header
	// Properties are per-request properties, e.g.
	// {"source.address": []byte("10.0.0.1:5555")}.
	Properties Properties
	// ResponseHeaders is what the upstream answers (default [[":status","200"]]).
	ResponseHeaders []Header
	// ResponseTrailers, when not empty, follow the response headers (and
	// body): the headers are delivered with end_of_stream false, then
	// proxy_on_response_trailers runs with these trailers.
	ResponseTrailers []Header
	// ResponseBody, when not empty, is the upstream's response body in the
	// chunks (data frames) it arrives in, delivered one by one as Envoy
	// does: the headers with end_of_stream false, then
	// proxy_on_response_body(len(chunk), end_of_stream) per chunk, during
	// which proxy_get_buffer_bytes(HttpResponseBody) reads that chunk only.
	// end_of_stream is true on the last chunk, unless trailers follow (then
	// false on every chunk, and on_response_trailers ends the stream). An
	// empty chunk is delivered as such (Envoy sends an empty last frame
	// with end_of_stream when the body ended without data). Each chunk then
	// goes downstream unchanged (Result.ResponseBody). A callback that
	// returns anything but Continue (StopIterationAndBuffer, ...) fails the
	// call: buffering is not supported by this host. No chunk is delivered
	// after a local reply.
	ResponseBody [][]byte
	// ResetAfterBodyChunks, when > 0, resets the stream after that many
	// chunks of ResponseBody (at most len(ResponseBody)) were delivered, all
	// without end of stream (an upstream or downstream reset mid-body):
	// no trailers, then on_log, on_done and on_delete as for any reset.
	// Status and ResponseHeaders are the upstream's (they went
	// downstream), ResponseBody the chunks delivered.
	ResetAfterBodyChunks int
	// ResetAfterRequest: the stream is reset after the request headers
	// went upstream and before any response (a downstream disconnect or an
	// upstream reset): on_log, on_done and on_delete run without a
	// response. Status is 0.
	ResetAfterRequest bool
	// HoldUpstream: the upstream has not answered when HTTP returns: the
	// stream stays open after the request headers (Result.Stream, Paused
	// false) until Stream.Complete delivers a response or Stream.Reset
	// ends it.
	HoldUpstream bool
}

// Result is the outcome of VM.HTTP.
type Result struct {
	Rejected        bool           // the plugin sent a local response
	Status          int            // status sent downstream (the local response's, or the upstream's)
	Local           *LocalResponse // what the plugin passed to send_local_response
	UpstreamHeaders []Header       // request headers as forwarded upstream (nil if rejected before that)
	ResponseHeaders []Header       // final response headers sent downstream (after on_response_headers)
	Paused          bool           // on_request_headers returned Pause and nothing resumed it within the call
	Stream          *Stream        // for a paused request (continue it with Stream.Complete, or Wait, ...) or one holding its upstream
	// ResponseBody is the response body that went downstream: the chunks
	// of Request.ResponseBody delivered, concatenated (nil when there were
	// none, or none but empty ones, or the plugin replied locally before
	// the body). A local reply sent once the response headers went
	// downstream (from on_response_body, say) cannot replace the response:
	// Envoy resets the stream; Rejected and Local are then set, while
	// Status, ResponseHeaders and ResponseBody are what went downstream
	// before the reset (the chunks before the one whose callback replied).
	ResponseBody []byte
}

// LocalResponse is what the plugin passed to proxy_send_local_response.
type LocalResponse struct {
	Status int
	// Details: the response code details, with white space replaced by
	// '_' as Envoy does; what access logs print for %RESPONSE_CODE_DETAILS%.
	Details    string
	Headers    []Header
	Body       []byte
	GRPCStatus int32 // -1: none
	// GRPC: the request was a gRPC call, so the reply Envoy sends is
	// trailers-only (grpc_reply.go): HTTP 200, no body, the body in
	// grpc-message.
	GRPC bool
}

// StreamResult is the outcome of one stream callback.
type StreamResult struct {
	Action  Action         // what the callback returned (Continue when the guest resumed during it)
	Local   *LocalResponse // non-nil: a local reply was sent (it took effect after the callback)
	Headers []Header       // the header map the callback ran on, after the callback

	// ResponseHeaders (added) are, for a local reply, the reply's headers
	// after on_response_headers ran on them: what goes downstream.
	ResponseHeaders []Header
}

type streamState uint8

const (
	stCreated   streamState = iota // context created, no headers yet
	stRequest                      // request headers delivered
	stResponse                     // response headers delivered (or a local reply)
	stFinishing                    // on_log / on_done / on_delete running
	stFinished                     // deleted
)

type settleKind uint8

const (
	settleNone settleKind = iota
	settleContinue
	settleLocal
	settleError
)

// Stream is one HTTP context on one VM (the phased API, for a gateway).
// Methods are goroutine-safe; callbacks run on the VM like any other work.
//
// Typical use: NewStream, RequestHeaders; if paused, Wait (or select on
// Resumed) until the guest resumes it or replies locally; then, unless a
// local reply was sent, ResponseHeaders with what the upstream answered,
// ResponseBody per chunk of its body as it arrives and ResponseTrailers;
// finally Finish (or Reset if the downstream or the upstream went away, or
// the plugin replied locally during the body).
type Stream struct {
	vm      *VM
	id      uint32
	root    *rootContext
	props   Properties
	created int64 // request.time, Unix nanoseconds

	// Guarded by vm.sem.
	state        streamState
	req          []Header
	hasReq       bool
	resp         []Header
	hasResp      bool
	trailers     []Header // response trailers (hasTrailers: delivered)
	hasTrailers  bool
	local        *LocalResponse
	localPending bool
	localInResp  bool // the pending local reply was sent during the response phase
	localInBody  bool // the local reply was sent once the response headers went downstream: the stream is reset
	respSent     bool // on_response_headers returned with the response going downstream: body chunks may follow
	respEnded    bool // the response's end of stream was delivered (with its headers or a body chunk)
	inBody       bool // proxy_on_response_body is running: chunk is the HttpResponseBody buffer
	chunk        []byte
	localFinal   []Header
	paused       bool
	continueReq  bool
	touched      bool
	setProps     map[string][]byte
	upstream     []Header // request headers when the request continued upstream
	reqShared    bool     // s.req was handed out: copy before modifying
	respShared   bool     // s.resp was handed out: copy before modifying

	mu      sync.Mutex // guards the fields below
	settled settleKind
	err     error
	resumed chan struct{}
	resDone bool
	settleC chan struct{}
}

var (
	errStreamDone  = errors.New("wasmhost: stream already finished")
	errStreamReset = errors.New("wasmhost: stream was reset")
	// errCallCancelled is returned by Respond/Fail/Wait on a call whose
	// root context was deleted (Envoy cancels its callouts).
	errCallCancelled = errors.New("wasmhost: HTTP call cancelled: its root context was deleted")
)

// NewStream creates an HTTP context (proxy_on_context_create) on the VM's
// current root context.
func (vm *VM) NewStream(ctx context.Context, props Properties) (*Stream, error) {
	if err := vm.enter(ctx); err != nil {
		return nil, err
	}
	defer vm.leave()
	return vm.newStream(props)
}

func (vm *VM) newStream(props Properties) (*Stream, error) {
	s := vm.spare
	if s != nil {
		vm.spare = nil
		*s = Stream{}
	} else {
		s = new(Stream)
	}
	s.vm, s.root, s.props, s.created = vm, vm.root, props, vm.h.clock.Now().UnixNano()
	s.id = vm.newContextID()
	vm.streams[s.id] = s
	s.root.streams++
	vm.stack[0], vm.stack[1] = uint64(s.id), uint64(s.root.id)
	if err := vm.callStream(s, vm.fn.contextCreate, "proxy_on_context_create", 2); err != nil {
		return nil, err
	}
	return s, nil
}

// ID returns the stream's context id.
func (s *Stream) ID() uint32 { return s.id }

// RequestHeaders delivers the request headers (proxy_on_request_headers).
// A local reply sent during the callback is then sent downstream through
// on_response_headers, as in Envoy (StreamResult.ResponseHeaders).
func (s *Stream) RequestHeaders(h []Header, endOfStream bool) (StreamResult, error) {
	vm := s.vm
	if err := vm.enter(context.Background()); err != nil {
		return StreamResult{}, err
	}
	defer vm.leave()
	if s.state != stCreated {
		return StreamResult{}, fmt.Errorf("wasmhost: stream %d: request headers already delivered", s.id)
	}
	s.req = copyHeaders(h, false)
	return s.requestHeaders(endOfStream)
}

func (s *Stream) requestHeaders(endOfStream bool) (StreamResult, error) {
	vm := s.vm
	s.state = stRequest
	s.hasReq = true
	if vm.fn.requestHeaders == nil {
		s.upstream, s.reqShared = s.req, true
		s.settle(settleContinue, nil)
		return StreamResult{Action: ActionContinue, Headers: s.req}, nil
	}
	vm.stack[0], vm.stack[1], vm.stack[2] = uint64(s.id), uint64(len(s.req)), b2u(endOfStream)
	vm.beginCallback(s.root, s, s.id)
	if err := vm.call(vm.fn.requestHeaders, "proxy_on_request_headers", 3); err != nil {
		vm.cur = callState{}
		return StreamResult{}, err
	}
	act := Action(uint32(vm.stack[0]))
	if act != ActionContinue {
		s.paused = true
	}
	vm.touch(s) // apply the returned action together with deferred actions
	if err := vm.endCallback(); err != nil {
		return StreamResult{}, err
	}
	s.reqShared = true
	r := StreamResult{Action: act, Headers: s.req}
	if s.local != nil {
		r.Local = s.local
		r.ResponseHeaders = s.localFinal
	} else if !s.paused {
		r.Action = ActionContinue
	}
	return r, nil
}

// ResponseHeaders delivers the upstream's response headers
// (proxy_on_response_headers). A local reply sent during the callback
// replaces the response (StreamResult.Local; Headers are its headers).
func (s *Stream) ResponseHeaders(h []Header, endOfStream bool) (StreamResult, error) {
	vm := s.vm
	if err := vm.enter(context.Background()); err != nil {
		return StreamResult{}, err
	}
	defer vm.leave()
	switch {
	case s.state == stCreated:
		return StreamResult{}, fmt.Errorf("wasmhost: stream %d: response headers before request headers", s.id)
	case s.local != nil:
		return StreamResult{}, fmt.Errorf("wasmhost: stream %d: a local reply was already sent downstream", s.id)
	case s.paused:
		return StreamResult{}, fmt.Errorf("wasmhost: stream %d: the request is paused; wait for the plugin to resume it", s.id)
	case s.state != stRequest:
		return StreamResult{}, fmt.Errorf("wasmhost: stream %d: response headers already delivered or stream finished", s.id)
	}
	s.resp = copyHeaders(h, true)
	return s.responseHeaders(endOfStream)
}

func (s *Stream) responseHeaders(endOfStream bool) (StreamResult, error) {
	vm := s.vm
	s.state = stResponse
	s.hasResp = true
	s.respEnded = endOfStream
	if vm.fn.responseHeaders == nil {
		s.respShared = true
		s.respSent = s.local == nil
		return StreamResult{Action: ActionContinue, Headers: s.resp}, nil
	}
	vm.stack[0], vm.stack[1], vm.stack[2] = uint64(s.id), uint64(len(s.resp)), b2u(endOfStream)
	if err := vm.callStream(s, vm.fn.responseHeaders, "proxy_on_response_headers", 3); err != nil {
		return StreamResult{}, err
	}
	s.respShared = true
	r := StreamResult{Action: Action(uint32(vm.stack[0])), Headers: s.resp}
	if s.local != nil {
		r.Local = s.local
		r.ResponseHeaders = s.resp
	} else {
		s.respSent = true
	}
	return r, nil
}

// ResponseTrailers delivers the upstream's response trailers
// (proxy_on_response_trailers), after ResponseHeaders delivered the headers
// without end of stream. The plugin may read them, not change them.
func (s *Stream) ResponseTrailers(h []Header) error {
	vm := s.vm
	if err := vm.enter(context.Background()); err != nil {
		return err
	}
	defer vm.leave()
	if s.state != stResponse || s.local != nil || s.hasTrailers || s.respEnded {
		return fmt.Errorf("wasmhost: stream %d: trailers need response headers delivered without end of stream, "+
			"no local reply, no body chunk with end of stream and no trailers yet", s.id)
	}
	return s.responseTrailers(h)
}

// ResponseBody delivers one chunk (data frame) of the upstream's response
// body, after ResponseHeaders delivered the headers without end of stream:
// proxy_on_response_body(len(chunk), endOfStream), during which
// proxy_get_buffer_bytes(HttpResponseBody) reads this chunk (and only it).
// endOfStream is true on the last chunk unless trailers follow
// (ResponseTrailers then ends the stream); an empty chunk is legal. The
// chunk then goes downstream unchanged: the plugin may read it, not change
// it. A callback returning anything but Continue is an error (buffering
// the body is not supported by this host). A local reply sent during the
// callback (StreamResult.Local) cannot replace a response whose headers
// went downstream: Envoy resets the stream, so the caller must not send
// this chunk and must end the stream with Reset.
func (s *Stream) ResponseBody(chunk []byte, endOfStream bool) (StreamResult, error) {
	vm := s.vm
	if err := vm.enter(context.Background()); err != nil {
		return StreamResult{}, err
	}
	defer vm.leave()
	if s.state != stResponse || !s.respSent || s.local != nil || s.hasTrailers || s.respEnded {
		return StreamResult{}, fmt.Errorf("wasmhost: stream %d: a body chunk needs response headers delivered without "+
			"end of stream, no local reply, no trailers and no chunk with end of stream yet", s.id)
	}
	return s.responseBody(chunk, endOfStream)
}

// responseBody runs proxy_on_response_body on one chunk. vm.sem held.
func (s *Stream) responseBody(chunk []byte, endOfStream bool) (StreamResult, error) {
	vm := s.vm
	s.respEnded = endOfStream
	if vm.fn.responseBody == nil {
		return StreamResult{Action: ActionContinue}, nil
	}
	vm.stack[0], vm.stack[1], vm.stack[2] = uint64(s.id), uint64(len(chunk)), b2u(endOfStream)
	s.inBody, s.chunk = true, chunk
	err := vm.callStream(s, vm.fn.responseBody, "proxy_on_response_body", 3)
	s.inBody, s.chunk = false, nil
	if err != nil {
		return StreamResult{}, err
	}
	r := StreamResult{Action: Action(uint32(vm.stack[0]))}
	if s.local != nil {
		r.Local = s.local
		return r, nil
	}
	if r.Action != ActionContinue {
		return r, fmt.Errorf("wasmhost: stream %d: proxy_on_response_body returned %s: buffering the response body "+
			"is not supported by this test host (only Continue is)", s.id, dataStatus(r.Action))
	}
	return r, nil
}

// dataStatus names a body callback's return value as Envoy reads it
// (proxy-wasm-cpp-host FilterDataStatus; above 3, StopIterationNoBuffer).
func dataStatus(a Action) string {
	switch a {
	case 0:
		return "Continue"
	case 1:
		return "StopIterationAndBuffer"
	case 2:
		return "StopIterationAndWatermark"
	}
	return fmt.Sprintf("%d (StopIterationNoBuffer)", int(a))
}

// responseTrailers delivers the response trailers
// (proxy_on_response_trailers, end of stream).
func (s *Stream) responseTrailers(t []Header) error {
	vm := s.vm
	s.trailers, s.hasTrailers = copyHeaders(t, false), true
	if vm.fn.responseTrailers == nil {
		return nil
	}
	vm.stack[0], vm.stack[1], vm.stack[2] = uint64(s.id), uint64(len(s.trailers)), 1
	return vm.callStream(s, vm.fn.responseTrailers, "proxy_on_response_trailers", 3)
}

// applyDeferred applies, after a callback returned, what the guest asked
// for on this stream during it. vm.sem held.
func (s *Stream) applyDeferred() error {
	if s.localPending {
		s.localPending = false
		if s.localInBody {
			// Sent once the response headers went downstream: Envoy can
			// only reset the stream; the response stays as it went.
			return nil
		}
		if s.localInResp {
			// Sent while encoding the response: the reply replaces the
			// response headers (on_response_headers is not run again).
			s.resp = s.localFinal
			return nil
		}
		// Sent before the response started: the reply travels the
		// encoder path, through this filter's on_response_headers.
		s.paused = false
		s.continueReq = false
		s.resp = s.localFinal
		if _, err := s.responseHeaders(len(s.local.Body) == 0); err != nil {
			return err
		}
		s.localFinal = s.resp
		s.settle(settleLocal, nil)
		return nil
	}
	if s.continueReq {
		s.continueReq = false
		s.closeResumed()
		if s.paused {
			s.paused = false
		}
	}
	if !s.paused && s.state == stRequest && s.local == nil {
		if s.upstream == nil {
			s.upstream, s.reqShared = s.req, true
		}
		s.settle(settleContinue, nil)
	}
	return nil
}

// touch records that the guest acted on s during the current callback.
func (vm *VM) touch(s *Stream) {
	if !s.touched {
		s.touched = true
		vm.touched = append(vm.touched, s)
	}
}

// Resumed returns a channel closed when the guest called
// proxy_continue_stream for the request (it takes effect after the callback
// that called it returns).
func (s *Stream) Resumed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumed == nil {
		s.resumed = make(chan struct{})
		if s.resDone {
			close(s.resumed)
		}
	}
	return s.resumed
}

func (s *Stream) closeResumed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resDone {
		return
	}
	s.resDone = true
	if s.resumed != nil {
		close(s.resumed)
	}
}

// settle records how a (possibly paused) request was decided.
func (s *Stream) settle(k settleKind, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settled != settleNone {
		return
	}
	s.settled, s.err = k, err
	if s.settleC != nil {
		close(s.settleC)
	}
}

// Settled returns a channel closed once the request is no longer paused:
// the guest resumed it, replied locally, or the stream or VM failed.
func (s *Stream) Settled() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.settleC == nil {
		s.settleC = make(chan struct{})
		if s.settled != settleNone {
			close(s.settleC)
		}
	}
	return s.settleC
}

// Wait blocks until the request is no longer paused (see Settled) and
// reports how: Action Continue with the request headers as forwarded, or
// Local with the reply's final headers.
func (s *Stream) Wait(ctx context.Context) (StreamResult, error) {
	select {
	case <-s.Settled():
	case <-ctx.Done():
		return StreamResult{}, fmt.Errorf("wasmhost: stream %d still paused: %w", s.id, ctx.Err())
	}
	s.mu.Lock()
	k, err := s.settled, s.err
	s.mu.Unlock()
	if k == settleError {
		return StreamResult{}, err
	}
	vm := s.vm
	if err := vm.enter(ctx); err != nil {
		return StreamResult{}, err
	}
	defer vm.leave()
	if s.local != nil {
		return StreamResult{Action: ActionPause, Local: s.local, Headers: s.req, ResponseHeaders: s.localFinal}, nil
	}
	return StreamResult{Action: ActionContinue, Headers: cloneHeaders(s.upstream)}, nil
}

// Complete finishes a paused stream the way VM.HTTP would have: it waits
// until the guest resumes the request or replies locally, then (if it
// resumed) delivers responseHeaders (default :status 200), and runs on_log,
// on_done and on_delete.
func (s *Stream) Complete(ctx context.Context, responseHeaders []Header) (*Result, error) {
	return s.CompleteWith(ctx, &Request{ResponseHeaders: responseHeaders})
}

// CompleteWith is Complete with the upstream's whole answer as VM.HTTP
// delivers it: up's ResponseHeaders, ResponseBody, ResponseTrailers and
// ResetAfterBodyChunks (its other fields are ignored).
func (s *Stream) CompleteWith(ctx context.Context, up *Request) (*Result, error) {
	if err := checkUpstream(up); err != nil {
		return nil, err
	}
	if _, err := s.Wait(ctx); err != nil {
		return nil, err
	}
	vm := s.vm
	if err := vm.enter(ctx); err != nil {
		return nil, err
	}
	defer vm.leave()
	res := &Result{}
	reset := false
	if s.local == nil {
		if s.state != stRequest {
			return nil, fmt.Errorf("wasmhost: stream %d: already past the request phase", s.id)
		}
		res.UpstreamHeaders = s.upstream
		var err error
		if reset, err = s.respond(up, nil, res); err != nil {
			return nil, err
		}
	}
	s.fillResult(res)
	if err := s.finish(reset); err != nil {
		return nil, err
	}
	return res, nil
}

// Finish ends the stream: proxy_on_log, proxy_on_done, proxy_on_delete.
func (s *Stream) Finish() error {
	vm := s.vm
	if err := vm.enter(context.Background()); err != nil {
		return err
	}
	defer vm.leave()
	return s.finish(false)
}

// Reset ends a stream the downstream abandoned (e.g. while paused). Envoy
// then runs on_log, on_done and on_delete like for a finished stream; a
// later continue_stream or local reply from the guest has no effect.
func (s *Stream) Reset() error {
	vm := s.vm
	if err := vm.enter(context.Background()); err != nil {
		return err
	}
	defer vm.leave()
	return s.finish(true)
}

func (s *Stream) finish(reset bool) error {
	vm := s.vm
	if s.state >= stFinishing {
		return errStreamDone
	}
	s.paused = false
	s.state = stFinishing
	if reset {
		s.settle(settleError, errStreamReset)
	} else {
		s.settle(settleContinue, nil)
	}
	if vm.fn.log != nil {
		vm.stack[0] = uint64(s.id)
		if err := vm.callStream(s, vm.fn.log, "proxy_on_log", 1); err != nil {
			return err
		}
	}
	if vm.fn.done != nil {
		vm.stack[0] = uint64(s.id)
		if err := vm.callStream(s, vm.fn.done, "proxy_on_done", 1); err != nil {
			return err
		}
	}
	s.state = stFinished
	delete(vm.streams, s.id)
	if vm.fn.delete != nil {
		vm.stack[0] = uint64(s.id)
		if err := vm.callStream(s, vm.fn.delete, "proxy_on_delete", 1); err != nil {
			return err
		}
	}
	if s.root.streams--; s.root.streams == 0 && s.root.superseded {
		return vm.retireRoot(s.root)
	}
	return nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
