package filter

import (
	"strconv"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/state"
)

// logCorrupt logs (rate-limited) that an undecodable value was met.
func (p *pluginContext) logCorrupt(a *application) {
	if a.rule.maxKeys == 0 {
		p.vm.logLimited(logCorrupt, "sluice: rule "+a.rule.name+": undecodable bucket state replaced by a full bucket")
		return
	}
	p.vm.logLimited(logCorrupt, "sluice: rule "+a.rule.name+": undecodable group value; the way is treated as free (an overflow record as idle)")
}

// countOverflow counts a request of rule a decided by its group's overflow
// bucket (allowed or refused), records the estimate of the identities
// sharing it, and logs (rate-limited) that max_keys is too small. The line
// is built only when the limiter lets it out.
func (p *pluginContext) countOverflow(a *application) {
	k := state.EstimateSharers(a.read.sharers)
	a.rule.m.overflowed.inc()
	a.rule.m.overflowIdentities.set(int64(k))
	a.rule.tc.overflowed++
	a.rule.tc.overflowIdentities = max(a.rule.tc.overflowIdentities, uint64(k))
	if ok, n := p.vm.logs.allowAt(logOverflow, a.now); ok {
		about := "about "
		if k >= state.MaxSharers {
			about = "at least "
		}
		p.vm.emit(logOverflow, "sluice: rule "+a.rule.name+": "+about+itoa(int64(k))+" identities share one overflow limit (max_keys "+
			itoa(int64(a.rule.maxKeys))+" is too small for the active identities; raise it)", n)
	}
}

// countRejected counts an enforce-mode refusal by rule a.
func (p *pluginContext) countRejected(a *application) {
	if a.read.claim == claimOverflow {
		p.countOverflow(a)
	}
	a.rule.m.rejected.inc()
	a.rule.tc.rejected++
	if p.cfg.telemetry != nil {
		p.vm.tel.hot.touch(a, true)
	}
}

// failOpen skips rule a for this request after a storage failure.
func (p *pluginContext) failOpen(a *application, err error) {
	a.failed = true
	a.rule.m.failOpen.inc()
	a.rule.tc.failOpen++
	p.vm.logLimited(logFailOpen, "sluice: rule "+a.rule.name+": shared data failed ("+err.Error()+"); failing open")
}

// shadowReject records that shadow rule a would have refused the request.
func (p *pluginContext) shadowReject(a *application) {
	if a.read.claim == claimOverflow {
		p.countOverflow(a)
	}
	a.rule.m.shadowRejected.inc()
	a.rule.tc.shadowRejected++
	if p.cfg.telemetry != nil {
		p.vm.tel.hot.touch(a, true)
	}
	p.appendShadow(a.rule)
	// The line is built only when the limiter lets it out: a shadow rule
	// refusing every request must not allocate on every request.
	if ok, suppressed := p.vm.logs.allow(logShadow); ok {
		p.vm.emit(logShadow, "sluice: shadow rule "+a.rule.name+" would have rejected a request (retry after "+
			strconv.FormatInt(ceilSeconds(a.dec.Wait), 10)+"s)", suppressed)
	}
}

// appendShadow adds shadow rule r to the names markShadow sets, unless the
// rule only counts ("shadow_mark": false).
func (p *pluginContext) appendShadow(r *compiledRule) {
	if !r.mark {
		return
	}
	if len(p.shadow) > 0 {
		p.shadow = append(p.shadow, ',')
	}
	p.shadow = append(p.shadow, r.name...)
}

// markShadow sets the shadow header on the upstream request to the names of
// the marking shadow rules that would have rejected it. When the
// configuration has marking shadow rules, a client-sent header of that name
// is removed otherwise, so upstream can trust it; without any (no shadow
// rules, or only "shadow_mark": false ones) the header is not touched.
//
// Small enough to be inlined: without marking shadow rules (the common
// case) it costs no call.
func (p *pluginContext) markShadow(would bool) {
	if !p.cfg.anyShadow {
		p.shadow = p.shadow[:0]
		return
	}
	p.setShadowHeader(would)
}

// setShadowHeader is markShadow for a configuration with marking shadow
// rules.
func (p *pluginContext) setShadowHeader(would bool) {
	// No defer to empty the list (a defer costs on every request in wasm):
	// it is emptied first, its bytes stay intact for the host call.
	names := p.shadow
	p.shadow = p.shadow[:0]
	if would && len(names) > 0 {
		_ = replaceRequestHeader(p.cfg.shadowHeader, bytesView(names))
		return
	}
	_ = removeRequestHeader(p.cfg.shadowHeader)
}

// reject sends the 429 for rule a.
func (p *pluginContext) reject(h *httpContext, a *application) types.Action {
	p.shadow = p.shadow[:0]
	h.local = true
	details := a.rule.details
	if a.rule.fleet != nil && p.fellBack(a) {
		details = a.rule.fleet.downDetails
	}
	if err := p.sendReject(a.rule, details, a.dec.Wait, a.identity); err != nil {
		// The host refused the local reply: let the request through.
		h.local = false
		p.vm.logLimited(logFailOpen, "sluice: cannot send the rejection: "+err.Error())
		return types.ActionContinue
	}
	return types.ActionPause
}
