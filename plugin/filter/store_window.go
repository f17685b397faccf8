package filter

import (
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/state"
)

// The store for windowed rules: store.go's protocol (read, decide, CAS
// write, create through the sentinel, bounded groups with claims and an
// overflow state, refund)
// with a state.Window in place of a state.Bucket. It is a separate path so
// that token buckets keep their exact hot path.

// loadWindow reads a windowed rule's state into a.read and a.ws.read.
func (p *pluginContext) loadWindow(a *application, now float64) (corrupt bool, err error) {
	if a.rule.maxKeys > 0 {
		return p.probeWindow(a, now)
	}
	v, err := a.readKey(a.key, &a.read)
	if err != nil || !a.read.stored || len(v) == 0 { // empty: forgotten by a reset (resets.go)
		return false, err
	}
	if state.DecodeWindow(v, &a.ws.read) != nil {
		return true, nil // rewritten as a fresh window, with the cas read
	}
	a.read.exists = true
	return false, nil
}

// probeWindow is probe (store.go) for window records: the same lookup,
// claims and overflow decisions. A window with no use left inside its window
// (windowIdle) may be reused, like a full bucket; the overflow state is a
// window of the rule's own limit.
func (p *pluginContext) probeWindow(a *application, now float64) (corrupt bool, err error) {
	var r bucketRead
	corrupt, err = a.readGroup(&r)
	if err != nil {
		return corrupt, err
	}
	w := &a.ws.read
	if i := a.grp.Find(a.fp, a.identity, func(rec []byte) (uint64, []byte, bool) {
		fp, id, derr := state.DecodeWindowSlot(rec, w)
		return fp, id, derr == nil
	}); i >= 0 {
		r.exists, r.way = true, i
		a.read = r
		return corrupt, nil
	}
	// A window with no use left in it may be reused like a full bucket (w
	// is scratch until the overflow state is read).
	l := a.rule.win
	overflow := !a.claim(&r, &corrupt, func(rec []byte) (decoded, idle bool) {
		_, _, derr := state.DecodeWindowSlot(rec, w)
		return derr == nil, derr == nil && windowIdle(l, w, now)
	})
	// A claimed way's window and an overflow decision both start from the
	// overflow window (none: a fresh window).
	ovf := a.grp.Overflow()
	sharers, oerr := state.DecodeWindowOverflow(ovf, w)
	r.exists = oerr == nil
	corrupt = corrupt || (oerr != nil && len(ovf) > 0)
	idle := !r.exists || windowIdle(a.rule.win, w, now)
	if overflow {
		if idle {
			sharers = 0
		}
		r.way, r.claim, r.sharers = -1, claimOverflow, sharers|state.SharerBit(a.fp)
	} else {
		r.dropOverflow = idle && len(ovf) > 0
	}
	a.read = r
	return corrupt, nil
}

// windowIdle reports whether a stored window holds no use inside its
// window at now: it is equivalent to a fresh one (limiter.Window's Reset 0).
func windowIdle(l limiter.Window, w *state.Window, now float64) bool {
	c := *w
	return l.Take(&c, true, now, 0).Reset == 0
}

// refundWindow removes a's cost from the period its request was counted in
// (a.ws.next.Start), like refund. It reports whether the state now reflects
// no use by this request (refunded, or the window or its way has moved on).
func (p *pluginContext) refundWindow(a *application) bool {
	period := a.rule.win.PeriodSeconds()
	counted := a.ws.next.Start
	w := &a.ws.read // scratch: the request's decision is done
	for attempt := 0; attempt < maxAttempts; attempt++ {
		var err error
		if a.rule.maxKeys == 0 {
			v, cas, st := a.readValue(a.key)
			if st != statusOK || state.DecodeWindow(v, w) != nil {
				return false
			}
			if !limiter.RefundWindow(w, counted, period, a.cost) {
				return true // the period has left the state: nothing to give back
			}
			p.valBuf = state.EncodeWindow(p.valBuf[:0], w)
			err = setSharedData(a.key, p.valBuf, cas)
		} else {
			r, way, ok := p.findOwnWindow(a, w)
			if !ok {
				return false
			}
			if way < 0 || !limiter.RefundWindow(w, counted, period, a.cost) {
				return true // our window is gone, or the period has left it
			}
			p.recBuf = state.EncodeWindowSlot(p.recBuf[:0], a.fp, w, a.identity)
			err = p.writeWay(a, way, true, r.cas)
		}
		if err == nil {
			a.released = true
			return true
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return false
		}
	}
	return false
}

// findOwnWindow is findOwnWay (store.go) for window records: it decodes a's
// window into w.
func (p *pluginContext) findOwnWindow(a *application, w *state.Window) (r bucketRead, way int, ok bool) {
	corrupt, err := a.readGroup(&r)
	if err != nil || corrupt || !r.stored || r.cas == 0 {
		return r, -1, false
	}
	way = a.grp.Find(a.fp, a.identity, func(rec []byte) (uint64, []byte, bool) {
		fp, id, derr := state.DecodeWindowSlot(rec, w)
		return fp, id, derr == nil
	})
	return r, way, true
}
