package filter

// Concurrency rules ("algorithm": "concurrency", limiter.Concurrency): a
// request admitted by one holds a place until its stream ends.
//
// The place is taken like any window's use: the store's two-phase
// decision, CAS retries, fail-open, bounded groups and their overflow
// state, and the refund when a later rule refuses the request. An
// admitted request remembers the rule, its key and where its place was
// counted (a pendingCharge with release set, charge.go); on_log, the
// stream's last callback, gives the place back with the same refund
// (refundWindow, or refundOverflow when the overflow state counted it).
// So a place is given back once, whatever ended the stream: the response,
// a reset, a held request cancelled (cancelHold leaves places to on_log).
//
// A place that is never given back (the VM trapped or the refund failed:
// counted in refund_failed) leaves the state when its period is two
// periods of max_request_seconds old: a lost place costs its identity
// capacity for a while, never lets it exceed its limit.

// release gives back the place c holds.
func (p *pluginContext) release(h *httpContext, c *pendingCharge) {
	a := p.pendingApp(h, c) // charge.go
	a.cost, a.overflowed = c.cost, c.overflowed
	a.ws.next.Start = c.counted // the period refundWindow gives it back to
	if !p.refund(a) {
		p.vm.globals().refundFailed.inc()
		p.vm.logLimited(logRefund, "sluice: rule "+a.rule.name+": could not give back a request's place; it returns when its period leaves the state")
		return
	}
	if a.released && p.cfg.telemetry != nil {
		// The next report shows the places free now, though no request
		// may come to touch the identity again: taking nothing from the
		// state just stored reads them.
		a.dec = a.rule.win.Take(&a.ws.read, true, nowSeconds(), 0)
		p.vm.tel.hot.touch(a, false)
	}
}
