package filter

// A limit rule's own fields ("limit_headers", policy/limit_headers.go):
// besides the RateLimit fields of the most restrictive rule, every enforced
// rule that admitted the request and names fields of its own sends its
// numbers under them on the response; a rule's rejection carries its own
// with nothing remaining. Kong's per-period X-RateLimit-Remaining-Minute
// and -Hour are sent this way.

// ownNumbers are what a rule with limit_headers sends on an allowed
// response: its whole tokens left and the seconds until it is whole again
// (resetF unrounded, for a held request's reset, delay.go).
type ownNumbers struct {
	rule      *compiledRule
	remaining int64
	reset     int64
	resetF    float64
}

// noteOwnNumbers remembers the numbers of a, an enforced rule with fields
// of its own that admitted the request. (The caller checks the rule's
// ownFields: most rules have none, and the check costs less than a call.)
func (h *httpContext) noteOwnNumbers(a *application) {
	h.own = append(h.own, ownNumbers{rule: a.rule, remaining: wholeTokens(a.dec.Remaining),
		reset: ceilSeconds(a.dec.Reset), resetF: a.dec.Reset})
}

// setOwnHeaders writes each rule's own fields on an allowed response.
func (p *pluginContext) setOwnHeaders(own []ownNumbers) {
	for i := range own {
		o := &own[i]
		r := o.rule
		reset := o.reset
		if r.noReset {
			reset = 0
		}
		if r.ownNames[0] != "" {
			replaceResponseHeader(r.ownNames[0], r.limitHdr)
		}
		if r.ownNames[1] != "" {
			p.hdrBuf = appendDecimal(p.hdrBuf[:0], o.remaining)
			replaceResponseHeader(r.ownNames[1], bytesView(p.hdrBuf))
		}
		if r.ownNames[2] != "" {
			p.hdrBuf = appendDecimal(p.hdrBuf[:0], reset)
			replaceResponseHeader(r.ownNames[2], bytesView(p.hdrBuf))
		}
	}
}

// appendOwnRejectHeaders adds a rejecting rule's own fields to its local
// reply: its limit, nothing remaining, and reset, the seconds until the
// request's cost is available (as RateLimit's t).
func appendOwnRejectHeaders(headers [][2]string, r *compiledRule, reset string) [][2]string {
	if !r.ownFields {
		return headers
	}
	for i, v := range [3]string{r.limitHdr, "0", reset} {
		if r.ownNames[i] != "" {
			headers = append(headers, [2]string{r.ownNames[i], v})
		}
	}
	return headers
}
