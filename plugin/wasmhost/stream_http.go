package wasmhost

import "context"

// HTTP runs a full stream on the VM, the way Envoy's filter chain would for
// a request without body: context create, on_request_headers, then (unless
// the plugin replied locally or paused) on_response_headers with
// req.ResponseHeaders, then on_log, on_done, on_delete. A local reply sent
// during the request headers goes downstream through on_response_headers,
// so the plugin sees its own reply there, as in Envoy; Result reports the
// final headers. If the request stays paused, Result.Paused is set and
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
	reqBuf, respBuf := res.UpstreamHeaders[:0], res.ResponseHeaders[:0]
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
	if s.local == nil {
		res.UpstreamHeaders = s.req
		s.resp = appendHeaders(respBuf, req.ResponseHeaders, true)
		if _, err := s.responseHeaders(len(req.ResponseTrailers) == 0); err != nil {
			return err
		}
		if len(req.ResponseTrailers) > 0 && s.local == nil {
			if err := s.responseTrailers(req.ResponseTrailers); err != nil {
				return err
			}
		}
	}
	s.fillResult(res)
	if err := s.finish(false); err != nil {
		return err
	}
	// The stream never left this call: reuse it for the next one.
	vm.spare = s
	return nil
}

// fillResult reports the local reply or the upstream response. vm.sem held.
func (s *Stream) fillResult(res *Result) {
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
