// Package filter is the Sluice proxy-wasm HTTP filter: token-bucket rate
// limiting with state in proxy-wasm shared data, so every worker thread of an
// Envoy shares the same buckets.
//
// How a request flows (docs/filter.md has the long version):
//
//  1. on_request_headers: for every policy, the first rule whose match holds
//     and whose limit keys are all present applies. For each applying rule
//     the bucket of the identity (the composite key) is found in shared
//     data, in its group tb:{rule}:#{group} of four buckets (bounded, the
//     default) or at tb:{rule}:{composite_key} (max_keys 0), see store.go,
//     and limiter.TokenBucket.Take decides (phase 1, no writes).
//  2. If an enforce-mode rule refuses, nothing is written and a 429 local
//     reply is sent. Otherwise each admitting rule's new state is committed
//     with CAS (phase 2); a CAS mismatch re-reads and re-decides that rule,
//     and a rule that now refuses rolls back (refunds) the rules already
//     committed before the 429: a rejected request consumes from no rule.
//  3. on_response_headers: the RateLimit fields of the most restrictive
//     enforce rule are added to allowed responses; the filter's own 429 is
//     left alone.
//
// Shared-data errors fail open for the rule concerned (store.go), and every
// callback recovers from panics and lets the request through: the filter
// never blocks traffic because of its own failure and never traps the VM.
package filter

import (
	"errors"
	"strconv"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/shared/state"
)

// NewVMContext returns the filter's VM context; plugin/main.go registers it.
func NewVMContext() types.VMContext { return &vmContext{} }

// vmContext is per VM (one per Envoy worker thread). It outlives root
// contexts: metric ids and the log limiter are kept across reconfigurations.
type vmContext struct {
	types.DefaultVMContext
	// hashKey keys identity fingerprints (hashseed.go): the deployment's,
	// read once (seedOK) and kept for the VM's life.
	hashKey  state.HashKey
	seedOK   bool
	seedTry  float64 // when loading it last failed (unix seconds)
	seedBuf  []byte
	counters map[metricKey]counter // and gauges
	global   *globalMetrics
	logs     logLimiter
	tallies  map[string]*ruleTally // telemetry.go: cumulative per-rule counters
	tel      telemetryState        // telemetry.go
	held     int                   // delay.go: streams held on this VM
	fleet    fleetState            // fleet_sync.go
}

func (vm *vmContext) NewPluginContext(contextID uint32) types.PluginContext {
	return &pluginContext{vm: vm, id: contextID}
}

// pluginContext is a root context: one configuration. Envoy creates a new
// one per configuration update; if its on_configure fails, the previous one
// stays in force.
type pluginContext struct {
	types.DefaultPluginContext
	vm  *vmContext
	id  uint32          // the root context id
	cfg *compiledConfig // nil until configured
	hq  holdQueue       // delay.go: held streams
	tk  tickSchedule    // tick.go: on_tick's clients and period

	// Per-request scratch, reused: a VM runs one callback at a time.
	rs      requestSources
	apps    []application
	act     *compiledRule // the exempt or deny rule selectRules found (actions.go), else nil
	comps   []string
	compBuf []byte
	valBuf  []byte
	recBuf  []byte // a group's new record (store.go)
	hdrBuf  []byte
	shadow  []byte
	free    []*httpContext // recycled HTTP contexts
	// chargeApp is the scratch of a response-phase charge (charge.go).
	chargeApp application
}

// OnPluginStart is proxy_on_configure: parse and validate the plugin
// configuration with the same code the admin uses. On any problem, every
// problem is logged at error level with its JSON path and false is returned,
// so Envoy keeps the previous configuration. Buckets are never reset: they
// live in shared data keyed by rule name.
func (p *pluginContext) OnPluginStart(int) (ok types.OnPluginStartStatus) {
	defer func() {
		if r := recover(); r != nil {
			p.vm.recovered("on_configure", r)
			ok = types.OnPluginStartStatusFailed
		}
	}()
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogError("sluice: cannot read the plugin configuration: " + err.Error())
		p.vm.globals().configRejected.inc()
		return types.OnPluginStartStatusFailed
	}
	cfg, err := policy.Parse(data)
	if err != nil || cfg == nil {
		logConfigErrors(err)
		p.vm.globals().configRejected.inc()
		return types.OnPluginStartStatusFailed
	}
	if cfg.Telemetry, err = resolveTelemetryToken(cfg.Telemetry, getenv); err != nil {
		logConfigErrors(err)
		p.vm.globals().configRejected.inc()
		return types.OnPluginStartStatusFailed
	}
	p.vm.globals() // define the global counters up front
	if !p.vm.seedOK {
		p.vm.loadHashSeed() // normally done in on_vm_start
	}
	p.cfg = compile(cfg, p.vm)
	p.cfg.hash = configHash(data)
	p.apps = make([]application, 0, len(p.cfg.policies))
	if p.cfg.fleet != nil {
		p.startFleet() // fleet_sync.go
	}
	if p.cfg.telemetry != nil {
		p.startTelemetry()
	}
	p.settleTick() // tick.go: the period this configuration needs
	proxywasm.LogInfo("sluice: configuration loaded: " + strconv.Itoa(len(p.cfg.policies)) +
		" policies, " + strconv.Itoa(len(p.cfg.rules)) + " rules")
	return types.OnPluginStartStatusOK
}

func logConfigErrors(err error) {
	var fes policy.Errors
	switch {
	case errors.As(err, &fes) && len(fes) > 0:
		for _, fe := range fes {
			proxywasm.LogError("sluice: invalid configuration: " + fe.Error())
		}
	case err != nil:
		proxywasm.LogError("sluice: invalid configuration: " + err.Error())
	default:
		proxywasm.LogError("sluice: invalid configuration")
	}
}

func (p *pluginContext) NewHttpContext(contextID uint32) types.HttpContext {
	// Must never return nil (the SDK would panic): nothing here can fail.
	// HTTP contexts are recycled (see OnHttpStreamDone): one allocation less
	// per request.
	if n := len(p.free); n > 0 {
		h := p.free[n-1]
		p.free = p.free[:n-1]
		*h = httpContext{p: p, id: contextID, charges: h.charges[:0], chargeKeys: h.chargeKeys[:0]}
		return h
	}
	return &httpContext{p: p, id: contextID}
}

// maxFreeContexts bounds the recycled HTTP contexts per root context.
const maxFreeContexts = 64

// OnHttpStreamDone is proxy_on_log, the last callback a stream's context
// receives (after it the host only calls proxy_on_done and proxy_on_delete,
// which the SDK handles without calling the context). The context is then
// free for reuse by a new stream.
func (h *httpContext) OnHttpStreamDone() {
	if h.hold.held { // reset while held (delay.go): leave the queue, refund
		h.p.cancelHold(h)
	}
	h.p.vm.fleetForget(h)   // fleet.go: no longer waits for a lease
	if len(h.charges) > 0 { // charge.go: the response never reported these
		h.chargeRemaining()
	}
	if p := h.p; len(p.free) < maxFreeContexts {
		clear(h.charges) // do not retain rules of an old configuration
		*h = httpContext{p: p, charges: h.charges[:0], chargeKeys: h.chargeKeys[:0]}
		p.free = append(p.free, h)
	}
}

// httpContext is one HTTP stream.
type httpContext struct {
	types.DefaultHttpContext
	p       *pluginContext
	id      uint32         // the context id (to resume it from on_tick)
	local   bool           // we sent a local reply (our 429)
	allowed allowedHeaders // what on_response_headers adds (rule nil: nothing)
	hold    holdState      // delay.go

	// Fleet mode (fleet.go): a request paused for leases (resumed by id).
	fleetWaits   int  // asks in flight this request waits for
	fleetFetched bool // it waited once: decide again without fetching
	fleetDone    bool // the stream ended while waiting

	// Response-charged rules that admitted the request (charge.go), and
	// their bucket keys; both kept when the context is recycled.
	charges    []pendingCharge
	chargeKeys []byte
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	defer func() {
		if r := recover(); r != nil {
			h.p.vm.recovered("on_request_headers", r)
			h.allowed = allowedHeaders{}
			action = types.ActionContinue
			if h.local {
				action = types.ActionPause
			}
		}
	}()
	if h.p.cfg == nil {
		return types.ActionContinue
	}
	return h.p.decide(h)
}

func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	if len(h.charges) > 0 && !h.local {
		h.chargeResponse(false) // charge.go: costs in response headers
	}
	// Envoy runs this callback for our own local reply too: its headers are
	// already final, leave them alone. (These checks cannot panic; the
	// recover is paid only when there is work.)
	if h.local || h.allowed.rule == nil || h.p.cfg == nil || !h.p.cfg.responseHeaders {
		return types.ActionContinue
	}
	h.setResponseHeaders()
	return types.ActionContinue
}

// OnHttpResponseTrailers charges the costs reported in response trailers
// (charge.go).
func (h *httpContext) OnHttpResponseTrailers(int) types.Action {
	if len(h.charges) > 0 && !h.local {
		h.chargeResponse(true)
	}
	return types.ActionContinue
}

func (h *httpContext) setResponseHeaders() {
	defer func() {
		if r := recover(); r != nil {
			h.p.vm.recovered("on_response_headers", r)
		}
	}()
	h.p.setAllowedHeaders(h.allowed)
	if h.hold.delayMS > 0 {
		h.p.setDelayHeader(h)
	}
}

// recovered logs a recovered panic (rate-limited) and counts it.
func (vm *vmContext) recovered(where string, r any) {
	vm.globals().panicsRecovered.inc()
	msg := "sluice: recovered from a panic in " + where + "; request let through"
	if e, ok := r.(error); ok {
		msg += ": " + e.Error()
	} else if s, ok := r.(string); ok {
		msg += ": " + s
	}
	vm.logLimited(logPanic, msg)
}

// application is one applying rule in one request.
type application struct {
	rule    *compiledRule
	keyBuf  []byte // "tb:<rule>:<composite>", reused across requests
	slotBuf []byte // "tb:<rule>:#<group>" (bounded mode) or a pool key, reused across requests
	// slotKeyOf is 1 + the group whose key slotBuf holds (0: none), so a
	// request builds its group key once (groupKey).
	slotKeyOf int
	key       string // view of keyBuf: the exact key (max_keys 0)
	identity  string // view of the composite part: the identity

	// Bounded mode: the identity's fingerprint, its group (local rules) or
	// its pool's candidate slots (global rules, fleet.go), and the ways of
	// the group as last read (aliasing vals[0]; store.go).
	fp    uint64
	group int
	cand  [state.Candidates]int
	ncand int
	ways  [state.Ways][]byte
	nways int
	ovf   []byte // the group's overflow record as read (aliasing vals[0]; empty: none)

	fl fleetApp // global rules (fleet.go)
	// vals holds the values read from shared data: the group or exact key
	// in the first, a global rule's pool candidates in each, reused across
	// requests so reads allocate nothing.
	vals [state.Candidates][]byte
	cost float64
	read bucketRead
	next state.Bucket
	// ws holds a windowed rule's states (window.go); kept across requests
	// like keyBuf, nil until the slot serves a windowed rule, so token
	// buckets do not carry (or clear) window-sized state.
	ws        *windowScratch
	dec       limiter.Decision
	now       float64 // the time dec was taken at
	failed    bool    // storage failed: the rule is skipped (fail open)
	committed bool
	// overflowed: the committed decision was on the group's overflow
	// bucket (a refund goes back there).
	overflowed bool
	// noSeed: the deployment's hash key could not be read, so a bounded
	// rule cannot place the identity: it fails open (hashseed.go).
	noSeed bool
}

// decide runs the rate limit for one request; see the package comment.
func (p *pluginContext) decide(h *httpContext) types.Action {
	cfg := p.cfg
	p.rs.reset(cfg)
	p.shadow = p.shadow[:0]
	apps := p.selectRules()
	shadowDenied := false
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
	now := nowSeconds()

	// Phase 1: read and decide every applying rule, write nothing.
	for i := range apps {
		a := &apps[i]
		a.cost = a.rule.cost(&p.rs)
		if a.noSeed {
			p.failOpen(a, errNoHashSeed)
			continue
		}
		if a.rule.fleet != nil { // fleet.go: spend from the lease pool
			p.fleetLoad(a, now, h.fleetFetched)
			continue
		}
		corrupt, err := p.load(a, now)
		if corrupt {
			p.logCorrupt(a)
		}
		if err != nil {
			p.failOpen(a, err)
			continue
		}
		a.take(now)
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
		if a.rule.fleet != nil {
			p.fleetRejectCounts(a)
		}
		if a.rule.shadow {
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
		switch p.commit(a, now) {
		case commitOK:
			a.committed = true
		case commitFailed:
			// counted and logged by commit; the rule is skipped
		case commitRefused:
			if a.rule.shadow {
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
	for i := range apps {
		a := &apps[i]
		if !a.committed {
			continue
		}
		a.rule.m.allowed.inc()
		a.rule.tc.allowed++
		if p.cfg.telemetry != nil {
			p.vm.tel.hot.touch(a, false)
		}
		if !a.rule.shadow && (best == nil || a.dec.Remaining < best.dec.Remaining) {
			best = a
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
	if cfg.anyRespCost {
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
// the first exempt rule ends the selection (it exempts the request from
// every rule), else the first deny rule is kept.
func (p *pluginContext) selectRules() []application {
	apps := p.apps[:0]
	p.act = nil
policies:
	for _, rules := range p.cfg.policies {
		for _, r := range rules {
			if !r.matches(&p.rs) {
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
			if !ok {
				r.m.keyMissing.inc()
				continue
			}
			if r.action != actLimit {
				if r.action == actExempt {
					p.act = r
					apps = apps[:0]
					break policies
				}
				if p.act == nil {
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
			*a = application{rule: r, keyBuf: kb, slotBuf: a.slotBuf, vals: a.vals, ws: a.ws}
			if r.win != nil && a.ws == nil {
				a.ws = new(windowScratch)
			}
			a.key = bytesView(kb)
			a.identity = a.key[len(r.keyPrefix):]
			if r.overrides != nil { // actions.go: this identity's own limits
				a.rule = r.override(a.identity)
			}
			if r.maxKeys > 0 {
				if !p.vm.seedOK && !p.vm.loadHashSeed() { // hashseed.go
					a.noSeed = true
					break
				}
				a.fp = state.KeyedFingerprint(p.vm.hashKey, a.identity)
				if r.fleet != nil {
					a.cand, a.ncand = candidatesFor(a.fp, r.maxKeys)
				} else {
					a.group = state.GroupOf(a.fp, r.groups)
				}
			}
			break
		}
	}
	clear(p.comps[:cap(p.comps)]) // do not retain header strings
	p.apps = apps
	return apps
}

type commitResult int

const (
	commitOK      commitResult = iota
	commitFailed               // storage error or retries exhausted: fail open
	commitRefused              // after a re-read the rule refuses the request
)

// commit writes a's new state with CAS, re-reading and re-deciding on
// mismatch.
func (p *pluginContext) commit(a *application, now float64) commitResult {
	if a.rule.fleet != nil {
		return p.fleetCommit(a, now) // fleet.go
	}
	if a.rule.respCost {
		return commitOK // admitted, nothing taken: the response is charged (charge.go)
	}
	for attempt := 1; ; attempt++ {
		err := p.store(a)
		if err == nil {
			if a.read.claim == claimOverflow {
				a.overflowed = true
				p.countOverflow(a)
			}
			return commitOK
		}
		if !p.mayRetry(a, attempt, err) {
			return commitFailed
		}
		corrupt, err := p.load(a, now)
		if corrupt {
			p.logCorrupt(a)
		}
		if err != nil {
			p.failOpen(a, err)
			return commitFailed
		}
		a.take(now)
		if !a.dec.Allowed {
			return commitRefused
		}
	}
}

// mayRetry handles a failed write of rule a on its attempt-th try: a CAS
// mismatch is counted and may be retried (after a re-read) until
// maxAttempts; anything else, or running out of attempts, fails the rule
// open.
func (p *pluginContext) mayRetry(a *application, attempt int, err error) bool {
	if !errors.Is(err, types.ErrorStatusCasMismatch) {
		p.failOpen(a, err)
		return false
	}
	a.rule.m.casRetries.inc()
	if attempt >= maxAttempts {
		p.failOpen(a, errRetriesExhausted)
		return false
	}
	return true
}

// refundCommitted gives back the tokens of rules this request already
// committed, because a later rule refused it.
func (p *pluginContext) refundCommitted(apps []application) {
	for i := range apps {
		a := &apps[i]
		if !a.committed {
			continue
		}
		a.committed = false
		if a.rule.respCost {
			continue // admitted without taking anything (charge.go)
		}
		if !p.refund(a) {
			p.vm.globals().refundFailed.inc()
			p.vm.logLimited(logRefund, "sluice: rule "+a.rule.name+": could not refund a rejected request's tokens")
		}
	}
}

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
	if len(p.shadow) > 0 {
		p.shadow = append(p.shadow, ',')
	}
	p.shadow = append(p.shadow, a.rule.name...)
	// The line is built only when the limiter lets it out: a shadow rule
	// refusing every request must not allocate on every request.
	if ok, suppressed := p.vm.logs.allow(logShadow); ok {
		p.vm.emit(logShadow, "sluice: shadow rule "+a.rule.name+" would have rejected a request (retry after "+
			strconv.FormatInt(ceilSeconds(a.dec.Wait), 10)+"s)", suppressed)
	}
}

// markShadow sets the shadow header on the upstream request to the names of
// the shadow rules that would have rejected it. When the configuration has
// shadow rules, a client-sent header of that name is removed otherwise, so
// upstream can trust it.
func (p *pluginContext) markShadow(would bool) {
	// No defer to empty the list (a defer costs on every request in wasm):
	// it is emptied first, its bytes stay intact for the host call.
	names := p.shadow
	p.shadow = p.shadow[:0]
	if !p.cfg.anyShadow {
		return
	}
	if would && len(names) > 0 {
		_ = proxywasm.ReplaceHttpRequestHeader(p.cfg.shadowHeader, bytesView(names))
		return
	}
	_ = proxywasm.RemoveHttpRequestHeader(p.cfg.shadowHeader)
}

// reject sends the 429 for rule a.
func (p *pluginContext) reject(h *httpContext, a *application) types.Action {
	p.shadow = p.shadow[:0]
	h.local = true
	if err := p.sendReject(a.rule, a.dec.Wait, a.identity); err != nil {
		// The host refused the local reply: let the request through.
		h.local = false
		p.vm.logLimited(logFailOpen, "sluice: cannot send the rejection: "+err.Error())
		return types.ActionContinue
	}
	return types.ActionPause
}
