package wasmhost

import (
	"context"
	"fmt"
)

// HTTP runs a full stream on the VM, the way Envoy's filter chain would for
// a request without body: context create, on_request_headers, then (unless
// the plugin replied locally or paused) on_response_headers with
// req.ResponseHeaders, on_response_body per chunk of req.ResponseBody and
// on_response_trailers with req.ResponseTrailers, then on_log, on_done,
// on_delete. A local reply sent during the request headers goes downstream
// through on_response_headers, so the plugin sees its own reply there, as
// in Envoy; Result reports the final headers. If the request stays paused, Result.Paused is set and
// Result.Stream must be continued (Complete) or Reset by the caller.
func (vm *VM) HTTP(ctx context.Context, req *Request) (*Result, error) {
	res := new(Result)
	if err := vm.HTTPInto(ctx, req, res); err != nil {
		return nil, err
	}
	return res, nil
}

// HTTPInto is HTTP writing into res, whose header slices it reuses: a
// caller running many requests (a benchmark, a load generator) can keep one
// Result and avoid most allocations. The previous contents of res,
// including its header slices, are overwritten.
func (vm *VM) HTTPInto(ctx context.Context, req *Request, res *Result) error {
	if err := vm.enter(ctx); err != nil {
		return err
	}
	err := vm.http(req, res)
	vm.leave()
	return err
}

func (vm *VM) http(req *Request, res *Result) error {
	if err := checkUpstream(req); err != nil {
		return err
	}
	reqBuf, respBuf, bodyBuf := res.UpstreamHeaders[:0], res.ResponseHeaders[:0], res.ResponseBody[:0]
	*res = Result{}
	s, err := vm.newStream(req.Properties)
	if err != nil {
		return err
	}
	s.req = requestHeaders(reqBuf, req.Headers)
	if _, err := s.requestHeaders(true); err != nil {
		return err
	}
	if s.paused {
		s.req = cloneHeaders(s.req) // do not keep the caller's buffer
		res.Paused, res.Stream = true, s
		return nil
	}
	if s.local == nil && req.HoldUpstream {
		s.req = cloneHeaders(s.req) // do not keep the caller's buffer
		s.upstream = s.req
		res.UpstreamHeaders, res.Stream = s.upstream, s
		return nil
	}
	if s.local == nil && req.ResetAfterRequest {
		res.UpstreamHeaders = s.req
		return s.finish(true) // the stream is not reused
	}
	reset := false
	if s.local == nil {
		res.UpstreamHeaders = s.req
		res.ResponseBody = bodyBuf
		if reset, err = s.respond(req, respBuf, res); err != nil {
			return err
		}
	}
	s.fillResult(res)
	if err := s.finish(reset); err != nil {
		return err
	}
	if !reset {
		// The stream never left this call: reuse it for the next one.
		vm.spare = s
	}
	return nil
}

// checkUpstream checks the upstream's answer in req.
func checkUpstream(req *Request) error {
	if n := req.ResetAfterBodyChunks; n < 0 || n > len(req.ResponseBody) {
		return fmt.Errorf("wasmhost: ResetAfterBodyChunks %d: the response body has %d chunks", n, len(req.ResponseBody))
	}
	return nil
}

// respond delivers the upstream's answer in req (ResponseHeaders, then
// ResponseBody chunk by chunk, then ResponseTrailers; or a reset after
// ResetAfterBodyChunks chunks) to a stream whose request went upstream,
// appending the chunks that went downstream to res.ResponseBody. reset
// reports that the stream was reset (after some chunks, or by a local reply
// once the response headers went downstream): the caller finishes it so.
// vm.sem held.
func (s *Stream) respond(req *Request, respBuf []Header, res *Result) (reset bool, err error) {
	body, trailers := req.ResponseBody, req.ResponseTrailers
	cut := req.ResetAfterBodyChunks
	if cut > 0 {
		body = body[:cut]
	}
	s.resp = appendHeaders(respBuf, req.ResponseHeaders, true)
	if _, err := s.responseHeaders(len(body) == 0 && len(trailers) == 0); err != nil {
		return false, err
	}
	if s.local != nil {
		res.ResponseBody = nil
		return false, nil // the reply replaced the response: no body, no trailers
	}
	for i, chunk := range body {
		if _, err := s.responseBody(chunk, cut == 0 && i == len(body)-1 && len(trailers) == 0); err != nil {
			return false, err
		}
		if s.local != nil {
			reset = true // Envoy resets a stream whose response started
			break
		}
		res.ResponseBody = append(res.ResponseBody, chunk...)
	}
	if len(res.ResponseBody) == 0 {
		res.ResponseBody = nil
	}
	if reset || cut > 0 {
		return true, nil
	}
	if len(trailers) > 0 {
		if err := s.responseTrailers(trailers); err != nil {
			return false, err
		}
	}
	return false, nil
}

// fillResult reports the local reply or the upstream response. vm.sem held.
func (s *Stream) fillResult(res *Result) {
	if s.local != nil && s.localInBody {
		// The reply came too late to replace the response: what went
		// downstream is the upstream's (the stream is reset).
		res.Rejected = true
		res.Local = s.local
		res.ResponseHeaders = s.resp
		res.Status = statusOf(s.resp)
		return
	}
	if s.local != nil {
		res.Rejected = true
		res.Local = s.local
		res.Status = statusOf(s.localFinal)
		res.ResponseHeaders = s.localFinal
		return
	}
	if res.UpstreamHeaders == nil {
		res.UpstreamHeaders = s.upstream
	}
	res.ResponseHeaders = s.resp
	res.Status = statusOf(s.resp)
}
