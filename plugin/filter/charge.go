package filter

import (
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/bodyscan"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
)

// Costs reported by the response ("cost_source": "response_header:<name>"
// or "response_trailer:<name>", token_bucket and quota), and costs of
// responses of some statuses ("response_status:<statuses>",
// "response_grpc_status:<codes>").
//
// Request phase: the rule admits the request while its bucket (quota) has
// something left (limiter's Admit); nothing is written, nothing is taken.
// The request remembers the rule and its identity (pendingCharge, in the
// HTTP context, whose buffers are recycled with it).
//
// Response phase: the cost is read from the response header (in
// on_response_headers) or trailer (on_response_trailers) and charged with
// the store's protocol (store.go): read, limiter's Charge, CAS write,
// re-read on mismatch, at most maxChargeAttempts times. A charge never
// rejects; it may put the bucket in debt down to -max_debt (a quota's use
// up to limit + max_debt), and later requests are refused until it is paid
// back. In bounded mode the identity's bucket may have been reused since
// the request (it was full): the charge then claims a way, or lands on the
// group's overflow bucket, exactly as a new request would.
//
// A response that reports no usable cost (absent, not a number, negative)
// is charged default_cost; so is a stream that ends without the value (a
// reset, a response without the trailer), in on_log, the stream's last
// callback. A response_status rule charges fixed_cost for a response whose
// status it lists and nothing otherwise, nor for a stream that ends
// without a response: it counts what the upstream answered (a failed
// login), and a client that resets learns nothing. A cost too large for
// the debt limit is clamped to it. A charge
// that cannot be written (a shared-data error, retries exhausted) is
// dropped: the filter fails open, as everywhere. Each case has a counter
// (chargeMetrics).

// maxChargeAttempts bounds the writes of one charge. A charge is off the
// request path and never decides anything, so it gives up sooner than a
// request's commit (maxAttempts): a dropped charge only under-counts.
const maxChargeAttempts = 32

// pendingCharge is an admitted request's charge still waiting for its
// cost, or (release) a concurrency rule's place to give back when the
// stream ends (concurrency.go).
type pendingCharge struct {
	rule       *compiledRule
	fp         uint64
	group      int
	start, end int  // the bucket key in httpContext.chargeKeys
	done       bool // charged (released)
	// A place: where it was counted (the period's start, and whether the
	// group's overflow state counted it) and how many places (the cost).
	release    bool
	overflowed bool
	counted    float64
	cost       float64
	// A response_json rule's body scan: httpContext.scans[scan], while
	// scanning.
	scanning bool
	scan     int
	// A response_bytes rule's count of the body's bytes, while counting
	// (body.go).
	counting bool
	bytes    float64
}

// chargeMetrics are a response-charged rule's counters (docs/filter.md).
type chargeMetrics struct {
	charged counter // charges written
	dflt    counter // charged default_cost: no usable cost reported, or the stream ended first
	invalid counter // the reported value was not a cost (counted in dflt too)
	clamped counter // the charge hit the debt limit
	failed  counter // the charge could not be written (fail open)
}

func (vm *vmContext) chargeMetrics(rule string) chargeMetrics {
	p := "sluice.rule." + rule + ".response_cost_"
	return chargeMetrics{
		charged: vm.counter(p + "charged"),
		dflt:    vm.counter(p + "default"),
		invalid: vm.counter(p + "invalid"),
		clamped: vm.counter(p + "clamped"),
		failed:  vm.counter(p + "failed"),
	}
}

// countDefault and countInvalid count a charge of default_cost, and a
// reported value that was not a cost, in the rule's counters and its
// telemetry.
func (cr *compiledRule) countDefault() {
	cr.cm.dflt.inc()
	cr.tc.respDefault++
}

func (cr *compiledRule) countInvalid() {
	cr.cm.invalid.inc()
	cr.tc.respInvalid++
}

// compileCharge sets a response-charged rule's fields.
func (cr *compiledRule) compileCharge(cs policy.CostSource, maxDebt float64, vm *vmContext) {
	if !cs.FromResponse() {
		return
	}
	cr.respCost = true
	cr.respTrailer = cs.Kind == policy.CostResponseTrailer
	cr.respStatus = cs.ByStatus()
	cr.respGRPC = cs.Kind == policy.CostResponseGRPCStatus
	cr.respName = cs.Name
	cr.respBytes = cs.Kind == policy.CostResponseBytes
	if cr.respJSON = cs.Kind == policy.CostResponseJSON; cr.respJSON {
		cr.jsonPaths, _ = bodyscan.ParsePaths(cs.Name) // valid: policy.Parse checked it
	}
	cr.statuses, cr.grpcCodes = cs.Statuses, cs.GRPCCodes
	cr.maxDebt = maxDebt
	cr.cm = vm.chargeMetrics(cr.name)
}

// takeAdmit is take for a response-charged rule: admit while something is
// left (a response_status rule: while what a counted response costs is
// left, limiter's AdmitCost), consume nothing.
func (a *application) takeAdmit(now float64) {
	r := a.rule
	if r.win == nil {
		if r.respStatus {
			a.next, a.dec = r.tb.AdmitCost(a.read.b, a.read.exists, now, r.fixedCost)
			return
		}
		a.next, a.dec = r.tb.Admit(a.read.b, a.read.exists, now)
		return
	}
	a.ws.next = a.ws.read
	if r.respStatus {
		a.dec = r.quota.AdmitCost(&a.ws.next, a.read.exists, now, r.fixedCost)
		return
	}
	a.dec = r.quota.Admit(&a.ws.next, a.read.exists, now)
}

// addCharges records the response-charged rules that admitted h's
// request, and the places its concurrency rules gave it.
func (h *httpContext) addCharges(apps []application) {
	for i := range apps {
		a := &apps[i]
		if !a.committed || !a.rule.respCost && !a.rule.concurrent {
			continue
		}
		start := len(h.chargeKeys)
		h.chargeKeys = append(h.chargeKeys, a.key...)
		c := pendingCharge{rule: a.rule, fp: a.fp, group: a.group, start: start, end: len(h.chargeKeys)}
		if a.rule.concurrent {
			c.release, c.overflowed, c.counted, c.cost = true, a.overflowed, a.ws.next.Start, a.cost
		}
		h.charges = append(h.charges, c)
	}
}

// chargeResponse charges the pending charges whose cost the response
// carries in this phase: headers (trailer false; end: the response has no
// body nor trailers) or trailers (true). A response_json rule starts
// reading the body with the headers and is charged at the end of the body
// or with the trailers (body.go).
func (h *httpContext) chargeResponse(trailer, end bool) {
	defer func() {
		if r := recover(); r != nil {
			h.p.vm.recovered("the response-cost charge", r)
		}
	}()
	for i := range h.charges {
		c := &h.charges[i]
		if c.done || c.release {
			continue // a place is given back when the stream ends
		}
		if c.rule.respGRPC { // in the headers of a trailers-only response, else in the trailers
			h.chargeGRPCStatus(c, trailer)
			continue
		}
		if c.rule.respJSON {
			if trailer {
				h.chargeBody(c)
			} else {
				h.startBodyScan(c, end)
			}
			continue
		}
		if c.rule.respBytes { // body.go
			if trailer {
				h.chargeBytes(c)
			} else {
				h.startByteCount(c, end)
			}
			continue
		}
		if c.rule.respTrailer != trailer {
			continue
		}
		if c.rule.respStatus {
			h.chargeStatus(c)
			continue
		}
		v, buf, ok := getResponseValue(trailer, c.rule.respName, h.p.hdrBuf[:0])
		h.p.hdrBuf = buf
		cost := 0.0
		if ok {
			cost, ok = limiter.ParseReportedCost(v)
			if !ok {
				c.rule.countInvalid()
			}
		}
		if !ok { // absent or unusable: default_cost
			h.chargeDefault(c)
			continue
		}
		h.p.charge(h, c, cost)
	}
}

// pendingApp marks c done and returns p's application for it: the rule,
// its bucket key (a copy: h's keys stay for the stream's other charges),
// fingerprint and group.
func (p *pluginContext) pendingApp(h *httpContext, c *pendingCharge) *application {
	c.done = true
	a := &p.chargeApp
	r := c.rule
	a.appState = appState{rule: r}
	a.keyBuf = append(a.keyBuf[:0], h.chargeKeys[c.start:c.end]...)
	if r.win != nil && a.ws == nil {
		a.ws = new(windowScratch)
	}
	a.key = bytesView(a.keyBuf)
	a.identity = a.key[len(r.keyPrefix):]
	a.fp, a.group = c.fp, c.group
	return a
}

// chargeStatus charges a response_status rule's pending charge: fixed_cost
// when the response's status is one the rule counts, nothing otherwise.
func (h *httpContext) chargeStatus(c *pendingCharge) {
	v, buf, ok := getResponseValue(false, ":status", h.p.hdrBuf[:0])
	h.p.hdrBuf = buf
	if !ok || !c.rule.statuses.Has(policy.ParseStatus(v)) {
		c.done = true
		return
	}
	h.p.charge(h, c, c.rule.fixedCost)
}

// chargeGRPCStatus charges a response_grpc_status rule's pending charge
// when the phase carries grpc-status: the headers of a trailers-only
// response, else the trailers. fixed_cost when the rule counts the code,
// nothing otherwise; a response whose trailers carry none is charged
// nothing.
func (h *httpContext) chargeGRPCStatus(c *pendingCharge, trailer bool) {
	v, buf, ok := getResponseValue(trailer, "grpc-status", h.p.hdrBuf[:0])
	h.p.hdrBuf = buf
	switch {
	case !ok && !trailer:
		return // the trailers may carry it
	case !ok || !c.rule.grpcCodes.Has(policy.ParseGRPCStatus(v)):
		c.done = true
	default:
		h.p.charge(h, c, c.rule.fixedCost)
	}
}

// chargeRemaining charges default_cost for the charges the response never
// reported: the stream ended (reset, or no trailer); and gives back the
// places of concurrency rules. Called from on_log.
func (h *httpContext) chargeRemaining() {
	defer func() {
		if r := recover(); r != nil {
			h.p.vm.recovered("the response-cost charge", r)
		}
	}()
	for i := range h.charges {
		c := &h.charges[i]
		if c.done {
			continue
		}
		if c.release {
			h.p.release(h, c) // concurrency.go
			continue
		}
		if c.rule.respStatus { // no response: nothing to count
			c.done = true
			continue
		}
		if c.counting { // the bytes that passed (body.go)
			h.chargeBytes(c)
			continue
		}
		h.chargeDefault(c)
	}
}

// charge writes one charge of cost with CAS (see the file comment). When
// the rule is the one whose RateLimit fields the response carries, they are
// updated to the state after the charge.
func (p *pluginContext) charge(h *httpContext, c *pendingCharge, cost float64) {
	if c.rule.fleet != nil {
		p.chargePool(h, c, cost) // fleet_charge.go
		return
	}
	a := p.pendingApp(h, c)
	r := c.rule
	now := nowSeconds()
	a.cost, a.now = cost, now
	for attempt := 1; ; attempt++ {
		corrupt, err := p.load(a, now)
		if corrupt {
			p.logCorrupt(a)
		}
		if err != nil {
			p.chargeFailed(a, err)
			return
		}
		clamped := a.chargeState(now)
		err = p.store(a)
		if err == nil {
			if clamped {
				r.cm.clamped.inc()
			}
			r.cm.charged.inc()
			r.tc.respCharged++
			if a.read.claim == claimOverflow {
				p.countOverflow(a)
			}
			if h.allowed.rule == r {
				h.allowed.remaining, h.allowed.resetF = a.chargedLevel(now)
				h.allowed.reset = ceilSeconds(h.allowed.resetF)
			}
			for i := range h.own { // limit_headers.go
				if o := &h.own[i]; o.rule == r {
					o.remaining, o.resetF = a.chargedLevel(now)
					o.reset = ceilSeconds(o.resetF)
				}
			}
			return
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			p.chargeFailed(a, err)
			return
		}
		r.m.casRetries.inc()
		if attempt >= maxChargeAttempts {
			p.chargeFailed(a, errRetriesExhausted)
			return
		}
	}
}

// chargeState applies a's cost to the state read into a.next or
// a.ws.next; it reports whether the charge was clamped at the debt limit.
func (a *application) chargeState(now float64) bool {
	r := a.rule
	if r.win == nil {
		var clamped bool
		a.next, clamped = r.tb.Charge(a.read.b, a.read.exists, now, a.cost, r.maxDebt)
		return clamped
	}
	a.ws.next = a.ws.read
	return r.quota.Charge(&a.ws.next, a.read.exists, now, a.cost, r.maxDebt)
}

// chargedLevel returns what is left after a charge (whole tokens, never
// negative) and the seconds until the bucket is full (the quota resets).
func (a *application) chargedLevel(now float64) (int64, float64) {
	r := a.rule
	if r.win == nil {
		tokens := a.next.Tokens
		return wholeTokens(tokens), max((r.tb.Burst-tokens)/r.tb.Rate, 0)
	}
	used := a.ws.next.Counts[0]
	reset := 0.0
	if used > 0 {
		_, end := r.quota.Bounds(a.ws.next.Start)
		reset = max(end-now, 0)
	}
	return wholeTokens(r.quota.Limit - used), reset
}

// chargeFailed drops a charge that could not be written: fail open,
// counted and logged (rate-limited).
func (p *pluginContext) chargeFailed(a *application, err error) {
	a.rule.cm.failed.inc()
	p.vm.logLimited(logFailOpen, "sluice: rule "+a.rule.name+": could not charge a response's cost ("+err.Error()+"); failing open")
}
