package filter

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/plugin/headermap"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/shared/state"
)

// application is one applying rule in one request: its slot's buffers,
// kept across requests, and its state, cleared for each request.
type application struct {
	appBuffers
	appState
}

// appState is what an application holds for one request (selectRules
// clears it in place: building a new one and assigning it would copy all of
// it, and in wasm every copy larger than 16 bytes is a memory.copy, under
// Envoy's fast JIT a call into the runtime).
type appState struct {
	rule *compiledRule
	// slotKeyOf is 1 + the group whose key slotBuf holds (0: none), so a
	// request builds its group key once (groupKey).
	slotKeyOf int
	// key and identity are views of keyBuf (bytesView): the exact key
	// (max_keys 0) and its composite part, the identity. They change with
	// the slot's next request: copy them to keep them longer.
	key      string
	identity string

	// Bounded mode: the identity's fingerprint, its group (of buckets or
	// windows, or of a global rule's pools: fleet.go), and the group as
	// last read (aliasing val; store.go).
	fp    uint64
	group int
	grp   state.Group

	fl        fleetApp // global rules (fleet.go)
	cost      float64
	read      bucketRead
	next      state.Bucket
	dec       limiter.Decision
	now       float64 // the time dec was taken at
	failed    bool    // storage failed: the rule is skipped (fail open)
	committed bool
	// overflowed: the committed decision was on the group's overflow
	// bucket (a refund goes back there).
	overflowed bool
	// released: refundWindow gave the cost back and stored the state,
	// which ws.read holds.
	released bool
	// noSeed: the deployment's hash key could not be read, so a bounded
	// rule cannot place the identity: it fails open (hashseed.go).
	noSeed bool
	// spared: the rule enforces on a share of its identities
	// ("enforce_percent") and not on this one, so it decides as a shadow
	// rule: counts and marks what it would refuse, never refuses or holds.
	spared bool
}

// shadow reports whether the application refuses nothing: its rule is in
// shadow mode, or spares this identity.
func (a *application) shadow() bool { return a.rule.shadow || a.spared }

// appBuffers are an application slot's buffers, kept across requests when
// the slot is reused (p.apps), so that building keys and reading shared
// data allocate nothing once they have grown. The rest of an application
// is reset for every request (selectRules).
type appBuffers struct {
	keyBuf  []byte // "tb:<rule>:<composite>"
	slotBuf []byte // "tb:<rule>:#<group>" (bounded mode) or a pool key
	// val holds the value last read from shared data: the group or the
	// exact key.
	val []byte
	// ws holds a windowed rule's states (window.go), nil until the slot
	// serves a windowed rule, so token buckets do not carry (or clear)
	// window-sized state.
	ws *windowScratch
}

// decide runs the rate limit for one request; see the package comment.
func (p *pluginContext) decide(h *httpContext) types.Action {
	cfg := p.cfg
	p.rs.reset(cfg, h.numHeaders)
	p.shadow = p.shadow[:0]
	apps := p.selectRules(h.fleetFetched)
	shadowDenied := false
	if r := p.shadowEx; r != nil && !h.fleetFetched { // actions.go; not counted again when a fleet lease resumes the request
		r.m.exempted.inc()
		r.tc.exempted++
	}
	if r := p.act; r != nil { // actions.go
		switch {
		case r.action == actExempt:
			return p.exempt(r)
		case !r.shadow:
			return p.deny(h, r)
		}
		p.shadowDeny(r, !h.fleetFetched) // counted once, not again when a fleet lease resumes the request
		shadowDenied = true
	}
	if len(apps) == 0 {
		p.markShadow(shadowDenied)
		p.stripDelayHeader()
		return types.ActionContinue
	}
	now := limiter.Seconds(p.nowNS()) // as a rule for a time read it

	// Phase 1: read and decide every applying rule, write nothing. The
	// commonest rule (a fixed cost, bounded storage, a token bucket) is
	// served without the dispatching calls in between (cost, load, take):
	// in wasm every call costs.
	for i := range apps {
		a := &apps[i]
		r := a.rule
		if r.costKind == policy.CostFixed {
			a.cost = r.fixedCost
		} else {
			a.cost = r.cost(&p.rs)
		}
		if a.noSeed {
			p.failOpen(a, errNoHashSeed)
			continue
		}
		if r.fleet != nil { // fleet.go: spend from the lease pool
			p.fleetLoad(a, now, h.fleetFetched)
			continue
		}
		var corrupt bool
		var err error
		if r.maxKeys > 0 && r.win == nil {
			corrupt, err = p.probe(a, now)
		} else {
			corrupt, err = p.load(a, now)
		}
		if corrupt {
			p.logCorrupt(a)
		}
		if err != nil {
			p.failOpen(a, err)
			continue
		}
		if r.win == nil && !r.respCost {
			a.now = now
			a.next = r.tb.TakeInto(&a.dec, a.read.b, a.read.exists, now, a.cost)
		} else {
			a.take(now)
		}
	}

	// Any enforce rule refusing rejects the request, before any write. The
	// reported rule is the one with the longest wait, so Retry-After covers
	// every refusing rule.
	reject := -1
	anyShadow := shadowDenied
	for i := range apps {
		a := &apps[i]
		if a.failed || a.dec.Allowed {
			continue
		}
		if a.rule.blockSecs > 0 {
			p.block(a) // block.go
		}
		if a.rule.fleet != nil {
			p.fleetRejectCounts(a)
		}
		if a.shadow() {
			p.shadowReject(a)
			anyShadow = true
			continue
		}
		p.countRejected(a)
		if reject < 0 || a.dec.Wait > apps[reject].dec.Wait {
			reject = i
		}
	}
	if reject >= 0 {
		return p.reject(h, &apps[reject])
	}
	if p.cfg.fleet != nil { // fleet.go: pause for leases
		switch p.fetchIfNeeded(h, apps) {
		case fetchPaused:
			return types.ActionPause
		case fetchRedo:
			return p.decide(h)
		}
	}

	// Phase 2: commit every admitting rule with CAS.
	for i := range apps {
		a := &apps[i]
		if a.failed || !a.dec.Allowed {
			continue
		}
		var res commitResult
		if r := a.rule; r.fleet == nil && !r.respCost {
			// commit's common case, without the call to commit.
			if err := p.store(a); err == nil && a.read.claim != claimOverflow {
				res = commitOK
			} else {
				res = p.committed(a, now, err)
			}
		} else {
			res = p.commit(a, now)
		}
		switch res {
		case commitOK:
			a.committed = true
		case commitFailed:
			// counted and logged by commit; the rule is skipped
		case commitRefused:
			if a.shadow() {
				p.shadowReject(a)
				anyShadow = true
				continue
			}
			p.countRejected(a)
			p.refundCommitted(apps[:i])
			return p.reject(h, a)
		}
	}

	// Delayed admission (delay.go): the request must wait for its
	// reservations, unless this VM holds too many requests already.
	wait := 0.0
	if cfg.anyDelay {
		wait = heldFor(apps)
		if wait > 0 && !p.canHold() {
			return p.rejectQueueFull(h, apps, wait)
		}
		countDelays(apps)
	}

	// Allowed.
	var best *application
	h.own = h.own[:0] // a request decided again after a fleet fetch starts over
	for i := range apps {
		a := &apps[i]
		if !a.committed {
			continue
		}
		a.rule.m.allowed.inc()
		a.rule.tc.allowed++
		if a.dec.Remaining < a.rule.nearLimit {
			a.rule.m.nearLimit.inc()
		}
		if p.cfg.telemetry != nil {
			p.vm.tel.hot.touch(a, false)
		}
		if !a.shadow() {
			if best == nil || a.dec.Remaining < best.dec.Remaining {
				best = a
			}
			if a.rule.ownFields {
				h.noteOwnNumbers(a) // limit_headers.go
			}
		}
	}
	if best != nil {
		h.allowed = allowedHeaders{
			rule:      best.rule,
			remaining: wholeTokens(best.dec.Remaining),
			reset:     ceilSeconds(best.dec.Reset),
			resetF:    best.dec.Reset,
		}
	}
	if cfg.anyPending {
		h.addCharges(apps) // charge.go
	}
	p.markShadow(anyShadow)
	if wait > 0 {
		return p.hold(h, apps, wait)
	}
	p.stripDelayHeader()
	return types.ActionContinue
}

// selectRules picks, per policy, the first rule whose match holds and whose
// limit keys are all present, and builds its bucket key. A rule that matches
// but lacks a key value is skipped (counted in key_missing) and the next rule
// of the policy is tried, so "per API key, else per IP" is two rules.
//
// An exempt or deny rule (actions.go) selected this way is left in p.act:
// the first enforced exempt rule ends the selection (it exempts the request
// from every rule), else the first enforced deny rule is kept, else the
// first shadow deny rule. The first shadow exempt rule is left in
// p.shadowEx: it exempts the request from shadow rules only, so the shadow
// rules selected before it are dropped and those after it are skipped.
// again is true when the request was selected for before (a fleet lease
// resumed it): what selection counts is not counted twice.
func (p *pluginContext) selectRules(again bool) []application {
	apps := p.apps[:0]
	p.act, p.shadowEx = nil, nil
	used := 0 // the limit key values this request put in p.comps
	p.clockNS = 0
policies:
	for _, rules := range p.cfg.policies {
		for _, r := range rules {
			// A rule outside its time is passed over as one whose match
			// does not hold.
			if r.timed && !r.activeAt(p.nowNS()) { // schedule.go
				continue
			}
			// One exact condition on a header (the commonest rule that
			// does not apply, such as each rule of a shadow trial) is
			// decided here, without matches and its loop over conditions,
			// and without any call when the header is read already: every
			// Go call costs in wasm. A missing value is "", oneValue never
			// is.
			if i := r.oneHeader - 1; i >= 0 {
				// Read whole, the header's slot has its value's length:
				// another length is another value, told without reading it.
				if ri := p.rs.cfg.headerRead[i]; p.rs.whole == wholeRead && ri > 0 &&
					headermap.ValueLen(p.rs.found[ri-1]) != len(r.oneValue) {
					continue
				}
				v := p.rs.headers[i].v
				if p.rs.headers[i].gen != p.rs.gen {
					v, _ = p.rs.get(sourceRef{kind: policy.SourceHeader, idx: i})
				}
				if v != r.oneValue {
					continue
				}
			} else if len(r.match) > 0 && !r.matches(&p.rs) { // no conditions: no call
				continue
			}
			comps := p.comps[:0]
			ok := true
			for _, k := range r.keys {
				v, present := p.rs.get(k)
				if !present {
					ok = false
					break
				}
				comps = append(comps, v)
			}
			p.comps = comps
			used = max(used, len(comps))
			if !ok {
				if !again {
					r.m.keyMissing.inc()
					r.tc.keyMissing++
				}
				continue
			}
			if r.shadow && p.shadowEx != nil {
				break // exempted by the shadow exempt rule
			}
			if r.action != actLimit {
				switch {
				case r.action == actUnlimited: // actions.go: its policy limits this request no further
					if !again {
						r.m.exempted.inc()
						r.tc.exempted++
					}
				case r.action == actExempt && !r.shadow:
					p.act = r
					apps = apps[:0]
					break policies
				case r.action == actExempt:
					p.shadowEx = r
					apps = dropShadow(apps)
					if p.act != nil && p.act.shadow {
						p.act = nil
					}
				case p.act == nil || p.act.shadow && !r.shadow:
					p.act = r
				}
				break
			}
			// Reuse the slot's key buffer from earlier requests.
			if len(apps) < cap(apps) {
				apps = apps[:len(apps)+1]
			} else {
				apps = append(apps, application{})
			}
			a := &apps[len(apps)-1]
			kb := append(a.keyBuf[:0], r.keyPrefix...)
			kb, p.compBuf = request.AppendComposite(kb, p.compBuf, comps)
			a.appState = appState{}
			a.rule = r
			a.keyBuf = kb
			if r.win != nil && a.ws == nil {
				a.ws = new(windowScratch)
			}
			a.key = bytesView(kb)
			a.identity = a.key[len(r.keyPrefix):]
			if r.partial { // gradual enforcement: a share of the identities
				a.spared = !request.Enforced(a.identity, r.enforcePct)
			}
			if r.overrides != nil { // actions.go: this identity's own limits
				a.rule = r.override(a.identity, !again)
			}
			if r.maxKeys > 0 {
				if !p.vm.seedOK && !p.vm.loadHashSeed() { // hashseed.go
					a.noSeed = true
					break
				}
				a.fp = state.KeyedFingerprint(p.vm.hashKey, a.identity)
				a.group = state.GroupOf(a.fp, r.groups)
			}
			break
		}
	}
	// Do not retain header strings. Only what this request set: earlier
	// requests cleared theirs. A counted loop: clear (and a range loop,
	// which the compiler turns into one) is a runtime call, a memory.fill.
	// (The last rule's values may be fewer: re-slice up to used, within
	// the capacity, which only grows.)
	comps := p.comps[:used]
	for i := 0; i < used; i++ {
		comps[i] = ""
	}
	p.apps = apps
	return apps
}
