package filter

import (
	"errors"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/state"
)

// The store for windowed rules: store.go's protocol (read, decide, CAS
// write, create through the sentinel, bounded groups with claims, refund)
// with a state.Window in place of a state.Bucket. It is a separate path so
// that token buckets keep their exact hot path.

// loadWindow reads a windowed rule's state into a.read and a.ws.read.
func (p *pluginContext) loadWindow(a *application, now float64) (corrupt bool, err error) {
	if a.rule.maxKeys > 0 {
		return p.probeWindow(a, now)
	}
	v, r, err := a.readKey(a.key)
	a.read = r
	if err != nil || !r.stored {
		return false, err
	}
	if state.DecodeWindow(v, &a.ws.read) != nil {
		return true, nil // rewritten as a fresh window, with the cas read
	}
	a.read.exists = true
	return false, nil
}

// probeWindow is probe (store.go) for window records: the same lookup and
// choice of way. A window's level is the quota it has left at now, and a
// window with no use inside the current window (Reset 0) ranks as free,
// like a full bucket.
func (p *pluginContext) probeWindow(a *application, now float64) (corrupt bool, err error) {
	r, corrupt, err := a.readGroup()
	if err != nil {
		return corrupt, err
	}
	w := &a.ws.read
	for i := 0; i < a.nways; i++ {
		if a.otherIdentity(a.ways[i]) {
			continue
		}
		if fp, id, derr := state.DecodeWindowSlot(a.ways[i], w); derr == nil && fp == a.fp && string(id) == a.identity {
			r.exists, r.way = true, i
			a.read = r
			return corrupt, nil
		}
	}
	if a.claimNewWay(&r) {
		return corrupt, nil
	}
	capacity := a.rule.win.Capacity()
	var levels [state.Ways]float64
	n := 0
	for n < a.nways {
		levels[n] = capacity
		if _, _, derr := state.DecodeWindowSlot(a.ways[n], w); derr == nil {
			levels[n] = min(windowLevel(a.rule.win, w, now), capacity)
		} else if len(a.ways[n]) > 0 {
			corrupt = true
		}
		if n++; levels[n-1] >= capacity {
			break
		}
	}
	r.way, r.claim = chooseWay(levels[:n], capacity)
	a.read = r
	return corrupt, nil
}

// windowLevel returns the quota a stored window has left at now; a fresh
// window has its capacity.
func windowLevel(l limiter.Window, w *state.Window, now float64) float64 {
	c := *w
	d := l.Take(&c, true, now, 0)
	if d.Reset == 0 {
		return l.Capacity()
	}
	return d.Remaining
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
			v, cas, st := a.readValue(0, a.key)
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
	r, corrupt, err := a.readGroup()
	if err != nil || corrupt || !r.stored || r.cas == 0 {
		return r, -1, false
	}
	for i := 0; i < a.nways; i++ {
		fp, id, derr := state.DecodeWindowSlot(a.ways[i], w)
		if derr == nil && fp == a.fp && string(id) == a.identity {
			return r, i, true
		}
	}
	return r, -1, true
}
