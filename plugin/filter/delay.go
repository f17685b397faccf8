package filter

import (
	"math"
	"slices"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

// Delayed admission (docs/filter.md "Delayed admission"; token_bucket
// "max_delay_ms"). limiter.TokenBucket.Take decides: a request that would
// wait at most max_delay_ms for its tokens is admitted as a reservation
// (Decision.Delay > 0), its tokens taken now, the bucket left negative. The
// request then has to wait, and a proxy-wasm filter cannot sleep: goroutines
// and timers do not run between callbacks. So on_request_headers returns
// Pause and the stream joins its root context's queue of held streams,
// ordered by due time; on_tick resumes the streams whose time has come
// (proxy_set_effective_context, then proxy_continue_stream, which Envoy
// applies after the callback returns).
//
//   - While any stream is held the root context ticks every holdTickMS, so a
//     held request goes upstream within about that much after its time,
//     never before it (the queue is timed with the monotonic clock).
//     Telemetry, which shares on_tick, keeps reporting on its own interval:
//     while ticking fast a report goes out only when its interval has
//     passed, and the telemetry period is restored at a report once nothing
//     is held (the period is then in step with the reports again); without
//     telemetry ticks stop.
//   - A stream the client resets while held gets on_log (OnHttpStreamDone)
//     before it is deleted: it leaves the queue there and its tokens are
//     refunded to every rule it took them from (store.go refund), as if it
//     had never come. So no dead stream is ever resumed.
//   - At most maxHeld streams are held per VM; a request that would be held
//     beyond that is rejected (429), its tokens given back, counted in
//     sluice.delay.queue_full. Memory stays bounded.
//   - If the tick cannot be armed, the request is let through at once
//     (fail open, like every storage failure).
//
// Several rules: the request is held for the longest delay among the
// enforce rules it reserved on. Shadow rules never hold a request: they
// keep their buckets exactly as enforcing would (they reserve) and count
// shadow_delayed.

const (
	// maxHeld bounds the streams held per VM (each holds its
	// httpContext and copies of its reservations: well under 1 KiB).
	maxHeld = 4096
	// holdTickMS is the tick period while streams are held: how late, at
	// most, a held request goes upstream (plus Envoy's timer accuracy).
	holdTickMS = 5

	// hdrDelayUpstream tells upstream how long the request was held, in
	// whole milliseconds (rounded up). A client-sent header of that name is
	// removed when a rule can delay, so upstream can trust it.
	hdrDelayUpstream = "x-sluice-delay-ms"
	// hdrDelay tells the client the same on the response.
	hdrDelay = "x-ratelimit-delay-ms"
)

// holdQueue is a root context's held streams and tick state.
type holdQueue struct {
	q   []*httpContext // held streams by (due, seq)
	due []*httpContext // scratch for the streams resumed by one tick
	seq uint64
}

// holdState is an httpContext's part in delayed admission.
type holdState struct {
	held     bool
	due      int64 // monotonic ns
	since    int64 // monotonic ns when held
	seq      uint64
	resetAt  float64       // the decision's Reset (seconds from since)
	reserved []application // copies of the committed rules, to refund on reset
	delayMS  int64         // > 0 once resumed: the time held
}

// heldFor returns how long a request whose rules are all committed must
// wait: the longest reservation among its enforce rules, 0 if none.
func heldFor(apps []application) float64 {
	wait := 0.0
	for i := range apps {
		a := &apps[i]
		if a.committed && !a.shadow() && a.dec.Delay > wait {
			wait = a.dec.Delay
		}
	}
	return wait
}

// canHold reports whether one more stream may be held on this VM.
func (p *pluginContext) canHold() bool { return p.vm.held < maxHeld }

// rejectQueueFull rejects a request that should have been held while the
// VM's queue is full: its tokens go back and the reply names the rule with
// the longest delay, whose wait becomes Retry-After.
func (p *pluginContext) rejectQueueFull(h *httpContext, apps []application, wait float64) types.Action {
	p.refundCommitted(apps)
	p.vm.globals().delayQueueFull.inc()
	for i := range apps {
		a := &apps[i]
		if !a.shadow() && a.dec.Delay == wait {
			a.dec.Wait = wait
			p.countRejected(a)
			return p.reject(h, a)
		}
	}
	return types.ActionContinue // unreachable: wait came from one of apps
}

// countDelays counts the committed reservations of a request in the rules'
// metrics.
func countDelays(apps []application) {
	for i := range apps {
		a := &apps[i]
		if !a.committed || a.dec.Delay <= 0 {
			continue
		}
		if a.shadow() {
			a.rule.m.shadowDelayed.inc()
			continue
		}
		a.rule.m.delayed.inc()
		a.rule.m.delayMS.add(uint64(ceilMillis(a.dec.Delay)))
	}
}

// hold pauses the request for wait seconds (see the file comment). The
// reservations are committed; apps are copied so they can be refunded if
// the client goes away.
func (p *pluginContext) hold(h *httpContext, apps []application, wait float64) types.Action {
	if err := p.setTickPeriod(holdTickMS); err != nil {
		p.vm.logLimited(logFailOpen, "sluice: cannot arm the tick to resume a delayed request ("+err.Error()+"); letting it through now")
		return types.ActionContinue
	}
	now := monoNanos()
	hs := &h.hold
	hs.held, hs.since, hs.due = true, now, now+int64(math.Ceil(wait*1e9))
	p.hq.seq++
	hs.seq = p.hq.seq
	if h.allowed.rule != nil {
		hs.resetAt = h.allowed.resetF
	}
	hs.reserved = hs.reserved[:0]
	for i := range apps {
		if a := apps[i]; a.committed {
			a.key = string(a.keyBuf) // a copy: keyBuf is reused by the next request
			a.identity = a.key[len(a.rule.keyPrefix):]
			a.keyBuf, a.slotBuf, a.slotKeyOf = nil, nil, 0
			a.val = nil // the live application reuses its array
			a.grp.Reset()
			a.read = bucketRead{} // refund reads the group again
			hs.reserved = append(hs.reserved, a)
		}
	}
	i, _ := slices.BinarySearchFunc(p.hq.q, h, func(x, t *httpContext) int {
		return cmpHeld(&x.hold, &t.hold)
	})
	p.hq.q = slices.Insert(p.hq.q, i, h)
	p.vm.held++
	return types.ActionPause
}

func cmpHeld(a, b *holdState) int {
	switch {
	case a.due < b.due:
		return -1
	case a.due > b.due:
		return 1
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

// resumeDue resumes every held stream whose time has come, earliest first
// (so in arrival order for one bucket).
func (p *pluginContext) resumeDue() {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("on_tick (delayed requests)", r)
		}
	}()
	q := p.hq.q
	if len(q) == 0 {
		return
	}
	now := monoNanos()
	n := 0
	for n < len(q) && q[n].hold.due <= now {
		n++
	}
	if n == 0 {
		return
	}
	// Take them off the queue first: a failure below must not leave a
	// stream both resumed and queued.
	p.hq.due = append(p.hq.due[:0], q[:n]...)
	rest := copy(q, q[n:])
	clear(q[rest:])
	p.hq.q = q[:rest]
	p.vm.held -= n
	for _, h := range p.hq.due {
		p.resume(h, now)
	}
	clear(p.hq.due)
	// Later host calls of this tick belong to the root context again.
	_ = setEffectiveContext(p.id)
}

// resume sends one held stream upstream.
func (p *pluginContext) resume(h *httpContext, now int64) {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("on_tick (resuming a delayed request)", r)
		}
	}()
	hs := &h.hold
	hs.held = false
	clear(hs.reserved)
	hs.reserved = hs.reserved[:0]
	if err := setEffectiveContext(h.id); err != nil {
		return // the stream is gone (it would have left the queue on_log)
	}
	held := now - hs.since
	hs.delayMS = max((held+999_999)/1_000_000, 1) // whole ms, rounded up
	if h.allowed.rule != nil {
		h.allowed.reset = ceilSeconds(hs.resetAt - float64(held)/1e9)
	}
	for i := range h.own { // limit_headers.go
		h.own[i].reset = ceilSeconds(h.own[i].resetF - float64(held)/1e9)
	}
	p.hdrBuf = appendDecimal(p.hdrBuf[:0], hs.delayMS)
	_ = replaceRequestHeader(hdrDelayUpstream, bytesView(p.hdrBuf))
	if err := resumeRequest(); err != nil {
		p.vm.logLimited(logFailOpen, "sluice: cannot resume a delayed request: "+err.Error())
	}
}

// cancelHold takes a stream that ended while held (the client reset it)
// off the queue and refunds its reservations.
func (p *pluginContext) cancelHold(h *httpContext) {
	hs := &h.hold
	hs.held = false
	if i := slices.Index(p.hq.q, h); i >= 0 {
		p.hq.q = slices.Delete(p.hq.q, i, i+1)
		p.vm.held--
	}
	p.vm.globals().delayCancelled.inc()
	for i := range hs.reserved {
		a := &hs.reserved[i]
		if a.rule.concurrent {
			continue // its place is given back when the stream ends (concurrency.go)
		}
		if !p.refund(a) {
			p.vm.globals().refundFailed.inc()
			p.vm.logLimited(logRefund, "sluice: rule "+a.rule.name+": could not refund a cancelled delayed request's tokens")
		}
	}
	clear(hs.reserved)
	hs.reserved = hs.reserved[:0]
}

// OnHttpRequestBody keeps a held request paused: Envoy would otherwise
// forward the headers with the first body chunk the filter continues
// (the body is buffered meanwhile, up to the connection's buffer limit).
func (h *httpContext) OnHttpRequestBody(int, bool) types.Action {
	if h.hold.held {
		return types.ActionPause
	}
	return types.ActionContinue
}

// OnHttpRequestTrailers keeps a held request paused, like the body.
func (h *httpContext) OnHttpRequestTrailers(int) types.Action {
	if h.hold.held {
		return types.ActionPause
	}
	return types.ActionContinue
}

// stripDelayHeader removes a client-sent delay header from a request that
// is not held, when some rule can delay (so upstream can trust it).
func (p *pluginContext) stripDelayHeader() {
	if p.cfg.anyDelay {
		_ = removeRequestHeader(hdrDelayUpstream)
	}
}

// setDelayHeader adds the time a resumed request was held to its response.
func (p *pluginContext) setDelayHeader(h *httpContext) {
	p.hdrBuf = appendDecimal(p.hdrBuf[:0], h.hold.delayMS)
	replaceResponseHeader(hdrDelay, bytesView(p.hdrBuf))
}

// ceilMillis rounds seconds up to whole milliseconds (never negative,
// bounded).
func ceilMillis(sec float64) int64 {
	if !(sec > 0) {
		return 0
	}
	return int64(math.Ceil(min(sec, math.MaxInt32) * 1000))
}
