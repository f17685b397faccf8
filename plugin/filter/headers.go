package filter

import (
	"unsafe"

	"github.com/sluice-rl/sluice/shared/request"
)

// Response header fields (names lower-case, as Envoy stores them).
//
// draft-ietf-httpapi-ratelimit-headers-10's structured fields are sent, and
// with "legacy_headers" also the older RateLimit-Limit / -Remaining / -Reset
// (drafts <= 06) or their X-RateLimit- namesakes (compiledConfig.legacyNames;
// opt-in because each is a host call more on every allowed response, like
// the Fairvisor token bucket's pair of generations):
//
//	RateLimit:        "<rule>";r=<remaining>;t=<seconds>
//	RateLimit-Policy: "<rule>";q=<burst>;w=<ceil(burst/rate)>
//
// A concurrency rule's places free when requests end, not at a time: its
// fields are "<rule>";r=<places free> and "<rule>";q=<limit>;
// qu="concurrent-requests" (the draft's quota unit), without t or w, and a
// refusal's Retry-After is 1.
//
// Values:
//   - Limit and q are the burst (whole tokens, floored).
//   - Remaining and r are the whole tokens left (floored: never promise a
//     token that is not there).
//   - On an allowed response, Reset and t are the seconds until the bucket is
//     full again (rounded up). On a rejection they are the seconds until this
//     request's cost is available (rounded up), and Retry-After is that plus a
//     deterministic per-client jitter of at most 50% (limiter.RetryAfter), so
//     Retry-After >= t >= the true wait, as the draft requires.
//   - w is the time the bucket takes to refill from empty.
const (
	hdrRetryAfter     = "retry-after"
	hdrRateLimit      = "ratelimit"
	hdrPolicy         = "ratelimit-policy"
	hdrReason         = "x-ratelimit-reason"
	hdrContentType    = "content-type"
	reasonTokenBucket = "token_bucket_exceeded"
	contentTypeJSON   = "application/json"
)

// sendReject sends the local reply for a request rejected by rule r with
// decision wait (seconds until its cost is available), passing details to
// Envoy (the rule's, or a fallback's). identity is the composite key: it
// seeds Retry-After's jitter.
func (p *pluginContext) sendReject(r *compiledRule, details string, wait float64, identity string) error {
	retry, t := request.RejectTimes(wait, identity)
	if r.exactRetry {
		retry = t // a quota: the time to the reset, without jitter
	}
	b := p.hdrBuf[:0]
	b = appendDecimal(b, retry)
	retryEnd := len(b)
	b = appendDecimal(b, t)
	tEnd := len(b)
	b = append(b, r.rlPrefix...)
	b = append(b, '0')
	if !r.noReset {
		b = append(b, ";t="...)
		b = appendDecimal(b, t)
	}
	rlEnd := len(b)
	if r.reply == nil { // the filter's JSON body, ending with the wait
		b = append(b, r.bodyPre...)
		b = appendDecimal(b, retry)
		b = append(b, '}')
	}
	p.hdrBuf = b
	s := bytesView(b)

	body, contentType := b[rlEnd:], contentTypeJSON
	if r.reply != nil {
		body, contentType = r.reply.body, r.reply.contentType
	}
	headers := append(p.replyHdrs[:0],
		[2]string{hdrRetryAfter, s[:retryEnd]},
		[2]string{hdrRateLimit, s[tEnd:rlEnd]},
		[2]string{hdrPolicy, r.policyHdr},
		[2]string{hdrReason, r.reason})
	if contentType != "" { // not an empty reject_body without a content type
		headers = append(headers, [2]string{hdrContentType, contentType})
	}
	if p.cfg.legacyHeaders {
		names := &p.cfg.legacyNames
		headers = append(headers,
			[2]string{names[0], r.limitHdr},
			[2]string{names[1], "0"},
			[2]string{names[2], s[retryEnd:tEnd]})
	}
	headers = appendOwnRejectHeaders(headers, r, s[retryEnd:tEnd]) // limit_headers.go
	headers = append(headers, r.rejectHeaders...)
	p.replyHdrs = headers
	return sendLocalResponse(r.rejectStatus, details, headers, body, p.cfg.rejectGRPC)
}

// localReply is a rejection's body and content type ("" sends none).
type localReply struct {
	body        []byte
	contentType string
}

// allowedHeaders remembers what on_response_headers will send for an
// allowed request: the most restrictive enforce rule's numbers.
type allowedHeaders struct {
	rule      *compiledRule
	remaining int64
	reset     int64
	resetF    float64 // reset in seconds, unrounded (delay.go recomputes reset after a hold)
}

// setAllowedHeaders writes the RateLimit fields on an allowed response.
// replace (not add) so a retried or upstream-set field is not duplicated.
func (p *pluginContext) setAllowedHeaders(h allowedHeaders) {
	// The numbers are written once, in place; the older fields are views
	// of them.
	r := h.rule
	if r.noReset {
		h.reset = 0
	}
	b := append(p.hdrBuf[:0], r.rlPrefix...)
	remStart := len(b)
	b = appendDecimal(b, h.remaining)
	remEnd := len(b)
	b = append(b, ';', 't', '=')
	resetStart := len(b)
	b = appendDecimal(b, h.reset)
	p.hdrBuf = b
	s := bytesView(b)

	rl := s
	if r.noReset {
		rl = s[:remEnd] // no t
	}
	replaceResponseHeader(hdrRateLimit, rl)
	replaceResponseHeader(hdrPolicy, r.policyHdr)
	if p.cfg.legacyHeaders {
		names := &p.cfg.legacyNames
		replaceResponseHeader(names[0], r.limitHdr)
		replaceResponseHeader(names[1], s[remStart:remEnd])
		replaceResponseHeader(names[2], s[resetStart:])
	}
}

// bytesView returns b as a string without copying, so that the request
// path builds keys and header values in reused buffers without allocating.
// The string is valid only while b's bytes are unchanged: it dies when the
// buffer is next written (for the views held by an application, a.key and
// a.identity, when selectRules or charge reuses the slot). Its uses are
// limited to what ends within that time: host calls (they copy their
// arguments into the host), comparisons, map lookups, and appending it to
// another buffer. Anything kept beyond the request takes a copy first:
// held requests (delay.go, string(a.keyBuf)), telemetry's top identities
// (telemetry.go, strings.Clone), pending response charges (charge.go,
// appended to h.chargeKeys).
func bytesView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
