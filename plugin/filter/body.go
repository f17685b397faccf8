package filter

import (
	"github.com/sluice-rl/sluice/shared/bodyscan"
	"github.com/sluice-rl/sluice/shared/limiter"
)

// Costs in the response body ("cost_source": "response_json:<paths>"): the
// token counts an LLM API reports in its JSON answer, or in the last event
// of a streamed one. The request phase is that of every response-charged
// rule (charge.go). With the response headers each such charge starts a
// body scan (package bodyscan: JSON or server-sent events, by the
// Content-Type); each body chunk is read as it passes (the filter never
// holds the body back, so a stream reaches the client as it comes) and the
// charge is made when the body ends: the sum found at the paths, or
// default_cost when the body reports none (invalid too when a path held
// something that is not a cost). A response without a body, and a body
// the filter cannot read (compressed), are charged default_cost with the
// headers; a stream that ends before its body does, when it ends.

// maxBodyRead bounds one read of the body: a larger chunk is read in parts
// of this size, into one reused buffer.
const maxBodyRead = 64 << 10

// startBodyScan starts reading the body for c, or charges default_cost now
// when there is no body (end) or it is encoded.
func (h *httpContext) startBodyScan(c *pendingCharge, end bool) {
	if end {
		h.chargeDefault(c)
		return
	}
	p := h.p
	enc, buf, ok := getResponseValue(false, "content-encoding", p.hdrBuf[:0])
	p.hdrBuf = buf
	if ok && !bodyscan.Readable(enc) {
		p.vm.logLimited(logBody, "sluice: rule "+c.rule.name+": the response body is "+enc+"-encoded and cannot be read; charging default_cost (list Envoy's decompressor filter after Sluice in http_filters)")
		h.chargeDefault(c)
		return
	}
	ct, buf, _ := getResponseValue(false, "content-type", p.hdrBuf[:0])
	p.hdrBuf = buf
	n := len(h.scans)
	if n < cap(h.scans) {
		h.scans = h.scans[:n+1]
	} else {
		h.scans = append(h.scans, bodyscan.Scanner{})
	}
	h.scans[n].Reset(c.rule.jsonPaths, bodyscan.FormatOf(ct))
	c.scanning, c.scan = true, n
	h.bodyScans++
}

// Costs in bytes ("cost_source": "response_bytes"): the size of the body,
// which on_response_body reports chunk by chunk, counted without reading
// the body and charged when it ends (with the trailers, or the last
// chunk). A response without a body costs nothing; a stream that ends
// before its body does is charged the bytes that passed.

// startByteCount starts counting the body's bytes for c; a response
// without a body (end) costs nothing, and nothing is written for it, as
// for a status a response_status rule does not count.
func (h *httpContext) startByteCount(c *pendingCharge, end bool) {
	if end {
		c.done = true
		return
	}
	c.counting, c.bytes = true, 0
	h.bodyScans++
}

// chargeBytes charges c the bytes its count found: the body has ended, or
// the stream has.
func (h *httpContext) chargeBytes(c *pendingCharge) {
	if c.counting {
		c.counting = false
		h.bodyScans--
	}
	h.p.charge(h, c, c.bytes)
}

// scanBody counts a chunk of the body (on_response_body) and reads it into
// the scans; at the end of the body it charges them.
func (h *httpContext) scanBody(size int, end bool) {
	defer func() {
		if r := recover(); r != nil {
			h.p.vm.recovered("the response body scan", r)
		}
	}()
	p := h.p
	reads := false
	for i := range h.charges {
		switch c := &h.charges[i]; {
		case c.counting:
			c.bytes += float64(max(size, 0))
		case c.scanning:
			reads = true
		}
	}
	if reads && p.bodyBuf == nil {
		p.bodyBuf = make([]byte, 0, maxBodyRead)
	}
	for start := 0; reads && start < size; start += maxBodyRead {
		chunk := getResponseBody(start, min(size-start, maxBodyRead), p.bodyBuf[:0])
		for i := range h.charges {
			if c := &h.charges[i]; c.scanning {
				h.scans[c.scan].Write(chunk)
			}
		}
		if cap(chunk) <= maxBodyRead { // keep the buffer, not a larger one
			p.bodyBuf = chunk[:0]
		}
	}
	if !end {
		return
	}
	for i := range h.charges {
		switch c := &h.charges[i]; {
		case c.done:
		case c.scanning:
			h.chargeBody(c)
		case c.counting:
			h.chargeBytes(c)
		}
	}
}

// chargeBody charges c what its body scan found: the body has ended.
func (h *httpContext) chargeBody(c *pendingCharge) {
	if !c.scanning {
		h.chargeDefault(c)
		return
	}
	s := &h.scans[c.scan]
	c.scanning = false
	h.bodyScans--
	s.Close()
	cost, outcome := s.Result()
	switch outcome {
	case bodyscan.Found:
		h.p.charge(h, c, min(cost, limiter.MaxCost))
	case bodyscan.Invalid:
		c.rule.countInvalid()
		h.chargeDefault(c)
	default:
		h.chargeDefault(c)
	}
}

// chargeDefault charges c its rule's default_cost: the response reported
// no cost.
func (h *httpContext) chargeDefault(c *pendingCharge) {
	c.rule.countDefault()
	h.p.charge(h, c, c.rule.defaultCost)
}
