package filter

import (
	"errors"
	"math"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/state"
)

// The store for windowed rules: store.go's protocol (read, decide, CAS
// write, create through the sentinel, bounded slots with claims and bumps,
// refund) with a state.Window in place of a state.Bucket. It is a separate
// path so that token buckets keep their exact hot path.

// loadWindow reads a windowed rule's state into a.read and a.ws.read.
func (p *pluginContext) loadWindow(a *application, now float64) (corrupt bool, err error) {
	if a.rule.maxKeys > 0 {
		return p.probeWindow(a, now)
	}
	a.read = bucketRead{}
	v, cas, st := a.readValue(0, a.key)
	switch st {
	case statusOK:
	case statusNotFound:
		return false, nil
	default:
		return false, statusError(st)
	}
	a.read.stored, a.read.cas = true, cas
	if state.DecodeWindow(v, &a.ws.read) != nil {
		return true, nil // rewritten as a fresh window, with the cas read
	}
	a.read.exists = true
	return false, nil
}

// probeWindow is probe (store.go) for window slots: the same probe order,
// target choice, claim plan, one-read claims and spill marks. A window's
// level is the quota it has left (Remaining at the reference time), and a
// window with no use inside the current window (Reset 0) ranks as free,
// like a full bucket.
func (p *pluginContext) probeWindow(a *application, now float64) (corrupt bool, err error) {
	var (
		seen    [state.Candidates]slotBump
		free    [state.Candidates]bool
		decoded [state.Candidates]bool
		n       int
		tref    float64
	)
	cands := &a.ws.cands
	for i := 0; i < a.ncand; i++ {
		slot := a.cand[i]
		v, cas, st := a.readValue(i, a.slotKey(slot)) // seen[i] may keep v until store
		if st == statusNotFound {
			seen[n] = slotBump{slot: slot, missing: true}
			free[n] = true
			n++
			break
		}
		if st != statusOK {
			return corrupt, statusError(st)
		}
		if len(v) == 0 && i == 0 { // a placeholder first candidate: a one-read claim
			a.read = bucketRead{stored: true, cas: cas, slot: slot, claim: claimReuse}
			return corrupt, nil
		}
		seen[n] = slotBump{slot: slot, value: v, cas: cas}
		if len(v) == 0 { // a placeholder
			free[n] = true
			n++
			continue
		}
		fp, spill, id, derr := state.DecodeWindowSlot(v, &cands[n])
		if derr == nil && fp == a.fp && string(id) == a.identity {
			a.read = bucketRead{exists: true, stored: true, cas: cas, slot: slot, spill: spill}
			a.ws.read = cands[n]
			if n > 0 && decoded[0] {
				// We live past our first candidate: keep its spill mark
				// covering our window (store raises it when needed).
				a.read.markFirst(seen[0], true)
			}
			return corrupt, nil
		}
		if derr != nil {
			corrupt, free[n] = true, true
		} else {
			decoded[n], seen[n].spill = true, spill
			tref = max(tref, cands[n].Start)
		}
		n++
		if i == 0 && derr == nil && spill <= now && windowFresh(a.rule.win, &cands[0], now) {
			// A one-read claim, as in probe.
			a.read = bucketRead{stored: true, cas: cas, slot: slot, claim: claimReuse, spill: spill}
			return corrupt, nil
		}
	}
	if n == 0 {
		return corrupt, errors.New("no candidate slots")
	}
	capacity := a.rule.win.Capacity()
	t, best := 0, math.Inf(-1)
	for i := 0; i < n; i++ {
		lvl := capacity
		if !free[i] {
			lvl = min(windowLevel(a.rule.win, &cands[i], tref), capacity)
		}
		if lvl > best {
			t, best = i, lvl
		}
	}
	r := bucketRead{stored: !seen[t].missing, cas: seen[t].cas, slot: seen[t].slot, spill: seen[t].spill}
	switch {
	case seen[t].missing:
		r.claim = claimMissing
	case free[t] || windowFresh(a.rule.win, &cands[t], now):
		r.claim = claimReuse
	default:
		r.claim = claimEvict
	}
	a.read = r
	a.read.setBumps(seen[:n], t)
	if t > 0 && decoded[0] {
		a.read.markFirst(seen[0], false) // its bump raises its spill mark
	}
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

// windowFresh reports whether a stored window holds no use inside the
// current window at now: it carries no information a new one would not.
func windowFresh(l limiter.Window, w *state.Window, now float64) bool {
	c := *w
	return l.Take(&c, true, now, 0).Reset == 0
}

// refundWindow removes a's cost from the period its request was counted in
// (a.ws.next.Start), like refund. It reports whether the state now reflects
// no use by this request (refunded, or the window or slot has moved on).
func (p *pluginContext) refundWindow(a *application) bool {
	period := a.rule.win.PeriodSeconds()
	counted := a.ws.next.Start
	w := &a.ws.read // scratch: the request's decision is done
	for attempt := 0; attempt < maxAttempts; attempt++ {
		key := a.key
		var spill float64 // the slot's spill mark, kept
		if a.rule.maxKeys > 0 {
			key = a.slotKey(a.read.slot)
		}
		v, cas, st := a.readValue(0, key)
		if st != statusOK {
			return false
		}
		if a.rule.maxKeys == 0 {
			if state.DecodeWindow(v, w) != nil {
				return false
			}
		} else {
			fp, s, id, err := state.DecodeWindowSlot(v, w)
			if err != nil || fp != a.fp || string(id) != a.identity {
				return true // our window is gone: nothing left to refund
			}
			spill = s
		}
		if !limiter.RefundWindow(w, counted, period, a.cost) {
			return true // the period has left the state: nothing to give back
		}
		if a.rule.maxKeys == 0 {
			p.valBuf = state.EncodeWindow(p.valBuf[:0], w)
		} else {
			p.valBuf = state.EncodeWindowSlot(p.valBuf[:0], a.fp, w, a.identity, spill)
			key = a.slotKey(a.read.slot)
		}
		err := setSharedData(key, p.valBuf, cas)
		if err == nil {
			return true
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return false
		}
	}
	return false
}
