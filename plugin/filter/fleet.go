package filter

import (
	"errors"
	"math"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/shared/state"
)

// Fleet mode, the request path (docs/filter.md "Fleet mode"). A global rule
// spends from its identity's lease pool in shared data (fleet_pool.go): one
// get and one CAS set, like a local bucket. Pools live in the rule's table
// of groups like buckets (state.Group, "fl:{rule}:#{group}": the identity's
// group holds its pool in any of its ways, found by fingerprint and
// sluice_id), so a claim is one CAS on one key and an identity never holds
// two pools; with max_keys 0 a pool has its own key "fl:{rule}:={id}". A pool that cannot pay while the
// backend is healthy pauses the request and asks the RLS (fetchForRequest);
// one ask per key per VM is in flight, later requests for the same key wait
// for it. With the backend down, an exhausted or expired pool falls back per
// on_backend_down. Refills, returns and health live in fleet_sync.go.

// compiledFleet is the configuration's "fleet" block, prepared.
type compiledFleet struct {
	src      *policy.Fleet
	syncMS   int64
	ttlMS    int64
	leaseMin int64
	leaseMax int64
}

// ruleFleet is a global rule's fleet state.
type ruleFleet struct {
	fc          *compiledFleet
	lastHot     *hotPool // the pool this rule touched last (a cache of the VM's table)
	exactPrefix string   // "fl:<rule>:="
	m           fleetMetrics
	// downDetails are the details of a refusal decided by on_backend_down
	// (request.BackendDownDetails).
	downDetails string
	// tb is the lease's shape: the token bucket's own rate and burst, or
	// for a global fixed window or quota (windowed) its limit as the burst
	// (the most one lease may ask) and limit/period as the rate (the first
	// ask's size and the local share's refill while the backend is down).
	tb limiter.TokenBucket
	// windowed: leases count in the rate limit service's current window
	// (fleet_window.go): they lapse at its end and returns name it.
	windowed bool
	sliding  bool          // a sliding window: room comes back within a window (refusedWait)
	periodMS int64         // a lease's (sub-)window: a fixed or sliding window's length, a rolling window's sub-period; 0 for a quota
	quota    limiter.Quota // a quota's period and zone
}

// fleetMetrics are the per-rule fleet counters.
type fleetMetrics struct {
	granted, denied, returned, backendErrors, fallbackLocal, fetches, evicted, charged counter
}

func (vm *vmContext) fleetMetrics(rule string) fleetMetrics {
	p := "sluice.rule." + rule + "."
	return fleetMetrics{
		granted:       vm.counter(p + "global_granted"),
		denied:        vm.counter(p + "global_denied"),
		returned:      vm.counter(p + "global_returned"),
		backendErrors: vm.counter(p + "backend_errors"),
		fallbackLocal: vm.counter(p + "fallback_local"),
		fetches:       vm.counter(p + "global_fetches"),
		evicted:       vm.counter(p + "global_evicted"),
		charged:       vm.counter(p + "global_charged"),
	}
}

// compileFleet prepares the fleet block (nil without one).
func compileFleet(f *policy.Fleet) *compiledFleet {
	if f == nil {
		return nil
	}
	return &compiledFleet{
		src: f, syncMS: int64(f.SyncIntervalMS), ttlMS: int64(f.LeaseTTLMS),
		leaseMin: int64(f.LeaseMin), leaseMax: int64(f.LeaseMax),
	}
}

// compileRuleFleet is the hook in compileRule for "scope": "global".
func (cc *compiledConfig) compileRuleFleet(cr *compiledRule, r *policy.Rule, vm *vmContext) {
	if !r.Global || cc.fleet == nil {
		return
	}
	cr.groupPrefix = "fl:" + r.Name + ":#" // the pools' groups
	cr.fleet = &ruleFleet{
		fc:          cc.fleet,
		exactPrefix: "fl:" + r.Name + ":=",
		m:           vm.fleetMetrics(r.Name),
		downDetails: request.BackendDownDetails(r),
		tb:          cr.tb,
	}
	cr.fleet.compileWindow(cr) // fleet_window.go
}

// compileFleetOverride gives an override of a global rule (a copy of the
// rule with the override's limits) its own lease shape: what it asks, its
// local share while the backend is down and the rate it sends. Its pools
// stay the rule's (same keys, same table).
func (cr *compiledRule) compileFleetOverride() {
	if cr.fleet == nil {
		return
	}
	f := *cr.fleet
	f.lastHot, f.tb = nil, cr.tb
	f.compileWindow(cr) // fleet_window.go
	cr.fleet = &f
}

// addFleetOverride records that the identity (as the request path builds
// it) of global rule cr is decided by ov: the sync finds pools by their
// sluice_id, and refills an override's pools with its own lease shape.
func (cr *compiledRule) addFleetOverride(identity []byte, ov *compiledRule) {
	if cr.fleet == nil {
		return
	}
	if cr.fleetOverrides == nil {
		cr.fleetOverrides = map[[idLen]byte]*compiledRule{}
	}
	var id [idLen]byte
	state.AppendSluiceID(id[:0], string(identity))
	cr.fleetOverrides[id] = ov
}

// fleetRule returns the rule deciding the pool of sluice_id id of global
// rule r at nowMS (Unix milliseconds): its override, or r.
func (r *compiledRule) fleetRule(id [idLen]byte, nowMS int64) *compiledRule {
	if ov := r.fleetOverrides[id]; ov != nil && ov.overrideAt(nowMS*1e6) {
		return ov
	}
	return r
}

// fleetApp is a global rule's part of an application (one request).
type fleetApp struct {
	id      [idLen]byte
	pool    state.Pool
	exists  bool       // our pool was read
	stored  bool       // the key exists: write with cas
	cas     uint32     // cas of the read
	way     int        // the way of a's group (a.grp) holding the pool, or to claim (bounded mode)
	evict   bool       // the claim replaces a live pool of another identity
	prev    state.Pool // the claim replaces a local-share bucket (hasPrev): its state
	hasPrev bool
	v       verdict
	next    state.Pool
}

// poolKey is the shared-data key of a's pool: its group's key, or with
// max_keys 0 its own, "fl:{rule}:={sluice_id}".
func (a *application) poolKey() string {
	if a.rule.maxKeys > 0 {
		return a.groupKey()
	}
	a.slotKeyOf = 0 // slotBuf is about to hold an exact pool key
	a.slotBuf = append(append(a.slotBuf[:0], a.rule.fleet.exactPrefix...), a.fl.id[:]...)
	return bytesView(a.slotBuf)
}

// fleetLoad is phase 1 for a global rule: read the pool and decide (no
// writes). Errors fail open like local rules.
func (p *pluginContext) fleetLoad(a *application, now float64, noFetch bool) {
	if a.fl.id[0] == 0 {
		// The sluice_id is the same in every proxy of the fleet (the RLS
		// counts by it), so it is not keyed by this deployment's hash key.
		state.AppendSluiceID(a.fl.id[:0], a.identity)
	}
	if err := p.readPool(a, now); err != nil {
		p.failOpen(a, err)
		return
	}
	p.vm.fleet.touchPool(a, int64(now*1000))
	env := p.poolEnv(a, now, noFetch)
	cost := a.cost
	if env.admitOnly = a.rule.respCost; a.rule.respStatus {
		cost = a.rule.fixedCost // what a counted response will cost must be left
	}
	a.fl.next, a.fl.v, a.dec.Remaining, a.dec.Wait = decidePool(a.fl.pool, a.fl.exists, cost, &env)
	a.dec.Allowed = a.fl.v == vSpend || a.fl.v == vAdmit || a.fl.v == vAllowDown || a.fl.v == vShare || a.fl.v == vFetch
	a.dec.Reset = 0
	a.next = state.Bucket{Tokens: float64(a.fl.next.Tokens) / micro, LastRefill: now}
	if a.dec.Allowed {
		a.dec.Reset = a.rule.fleet.poolReset(a.dec.Remaining, a.fl.v == vSpend || a.fl.v == vAdmit, a.fl.next.Stamp, now)
	}
}

// poolReset is the RateLimit reset (seconds) of a pool holding left tokens
// at now: a windowed lease's end (its stamp), else the time the rule's rate
// takes to refill its burst; 0 without a rate.
func (rf *ruleFleet) poolReset(left float64, lease bool, stamp int64, now float64) float64 {
	switch {
	case rf.tb.Rate <= 0:
		return 0
	case rf.windowed && lease:
		return max(0, float64(stamp)/1000-now) // the window's end
	}
	return max(0, (rf.tb.Burst-left)/rf.tb.Rate)
}

// poolEnv gathers what decidePool needs: this VM's view of the backend's
// health (refreshed on every tick and call) and the local share.
func (p *pluginContext) poolEnv(a *application, now float64, noFetch bool) poolEnv {
	fs := &p.vm.fleet
	n := float64(fs.fleetSize(a.rule.fleet.fc))
	return poolEnv{
		nowMS:    int64(now * 1000),
		healthy:  fs.healthy,
		noFetch:  noFetch,
		down:     a.rule.fleet.fc.src.OnBackendDown,
		share:    limiter.TokenBucket{Rate: a.rule.fleet.tb.Rate / n, Burst: a.rule.fleet.tb.Burst / n},
		syncMS:   a.rule.fleet.fc.syncMS,
		leaseTTL: a.rule.fleet.fc.ttlMS,
		prev:     a.fl.prev,
		hasPrev:  a.fl.hasPrev,
	}
}

// readPool finds a's pool in its group (one get), or the way a new pool
// would take (state.Group.Claim: a way the group does not have yet while
// it has room, else the first undecodable or stale one), else the way of
// the live pool that holds the fewest tokens, evicted (state.Group.Evict).
// When the way taken holds a local-share bucket (stale or evicted), its
// state is kept in a.fl.prev: the new pool's share continues it
// (sharePool), so claims never mint a fresh burst. A claim is a CAS on the
// group as read, so two VMs that claim for one identity at once cannot
// both win: the loser re-reads and finds the winner's pool.
func (p *pluginContext) readPool(a *application, now float64) error {
	a.fl.exists, a.fl.way, a.fl.evict, a.fl.hasPrev = false, -1, false, false
	a.fl.pool, a.fl.prev = state.Pool{}, state.Pool{}
	pl, way, r, err := a.findPool()
	a.fl.stored, a.fl.cas = r.stored, r.cas
	if err != nil || way >= 0 || a.rule.maxKeys == 0 {
		a.fl.pool, a.fl.exists, a.fl.way = pl, way >= 0, way
		return err
	}
	nowMS, ttlMS := int64(now*1000), a.rule.fleet.fc.ttlMS
	way, _, _ = a.grp.Claim(a.rule.ways, func(rec []byte) (decoded, idle bool) {
		s, err := state.DecodePool(rec)
		return err == nil, err == nil && stalePool(s.Pool, nowMS, ttlMS)
	})
	if way < 0 { // every way is a live pool of another identity
		way, a.fl.evict = a.grp.Evict(poolRank), true
	}
	a.fl.way = way
	if way < a.grp.Len() {
		if s, err := state.DecodePool(a.grp.Way(way)); err == nil && s.Pool.Mode == state.PoolShare {
			a.fl.prev, a.fl.hasPrev = s.Pool, true
		}
	}
	return nil
}

// findPool reads a's pool: the group (into a.grp) and the way holding the
// pool, or its exact key (way 0); way -1 when there is none. r says how to
// write the key back (stored, cas).
func (a *application) findPool() (pl state.Pool, way int, r bucketRead, err error) {
	var s state.PoolSlot
	decode := func(rec []byte) (uint64, []byte, bool) {
		var derr error
		s, derr = state.DecodePool(rec)
		return s.Fingerprint, s.Identity, derr == nil
	}
	if a.rule.maxKeys == 0 {
		v, err := a.readKey(a.poolKey(), &r)
		if err != nil || !r.stored {
			return pl, -1, r, err
		}
		if _, id, ok := decode(v); ok && string(id) == string(a.fl.id[:]) {
			return s.Pool, 0, r, nil
		}
		return pl, -1, r, nil
	}
	_, err = a.readGroup(&r) // a group that does not parse reads as empty: the write replaces it
	if err != nil {
		return pl, -1, r, err
	}
	if way = a.grp.Find(a.fp, bytesView(a.fl.id[:]), decode); way >= 0 {
		pl = s.Pool
	}
	return pl, way, r, nil
}

// putPool writes pool pl of a in way (bounded mode: into a's group as
// read, in place since pools of one rule have one length) or at its exact
// key, with the cas of the read (or as a creation).
func (p *pluginContext) putPool(a *application, way int, pl state.Pool, stored bool, cas uint32) error {
	p.recBuf = state.EncodePool(p.recBuf[:0], a.fp, pl, a.fl.id[:])
	if a.rule.maxKeys == 0 {
		return writeKey(a.poolKey(), p.recBuf, stored, cas)
	}
	return p.writeWay(a, way, stored, cas)
}

// poolRank orders the live pools a claim may evict: the one holding the
// fewest tokens goes (a lease's tokens are lost with it; a fallback
// bucket's level passes on to the claim).
func poolRank(rec []byte) int64 {
	s, err := state.DecodePool(rec)
	if err != nil {
		return math.MinInt64
	}
	return s.Pool.Tokens
}

// stalePool: a pool whose lease expired, or a fallback bucket untouched for
// a lease TTL (its last refill, i.e. its last admission, more than
// lease_ttl_ms ago). Reusing its slot loses no leased token that can still
// be spent; a fallback bucket's share is not necessarily full again after a
// TTL (burst/rate may exceed it), so readPool passes it on to the claim.
func stalePool(p state.Pool, nowMS, ttlMS int64) bool {
	if p.Mode == state.PoolLease {
		return p.Stamp <= nowMS
	}
	return nowMS-p.Stamp > ttlMS
}

// fleetCommit is phase 2 for a global rule: write the pool with CAS; on a
// mismatch re-read and re-decide. A re-decision that would need a fetch
// refuses (the pool ran dry under our feet; the next request asks).
func (p *pluginContext) fleetCommit(a *application, now float64) commitResult {
	for attempt := 1; ; attempt++ {
		err := p.writePool(a)
		if err == nil {
			p.countFleetDecision(a)
			return commitOK
		}
		if !p.mayRetry(a, attempt, err) {
			return commitFailed
		}
		p.fleetLoad(a, now, true)
		if a.failed {
			return commitFailed
		}
		if !a.dec.Allowed || a.fl.v == vFetch {
			a.dec.Allowed = false
			return commitRefused
		}
	}
}

// writePool stores a.fl.next (for vSpend and vShare; the other verdicts
// write nothing).
func (p *pluginContext) writePool(a *application) error {
	if a.fl.v != vSpend && a.fl.v != vShare {
		return nil
	}
	if a.fl.stored && a.fl.cas == 0 {
		return errZeroCAS
	}
	if a.fl.evict {
		a.rule.fleet.m.evicted.inc()
	}
	return p.putPool(a, a.fl.way, a.fl.next, a.fl.stored, a.fl.cas)
}

func (p *pluginContext) countFleetDecision(a *application) {
	if a.fl.v == vShare || a.fl.v == vAllowDown {
		a.rule.fleet.m.fallbackLocal.inc()
		p.vm.fleet.fallbackUsed = true
	}
}

// fleetRefund gives a committed spend back to the pool (a later rule
// refused the request).
func (p *pluginContext) fleetRefund(a *application) bool {
	if a.fl.v != vSpend && a.fl.v != vShare {
		return true
	}
	costU := a.fl.next.Spent - a.fl.pool.Spent
	for attempt := 0; attempt < maxAttempts; attempt++ {
		pl, way, r, err := a.findPool()
		if err != nil {
			return false
		}
		if way < 0 || pl.Mode != a.fl.next.Mode {
			return true // the pool is gone or changed mode: nothing to give back to
		}
		pl.Tokens += costU
		pl.Spent = max(0, pl.Spent-costU)
		err = p.putPool(a, way, pl, true, r.cas)
		if err == nil {
			return true
		}
		if !errors.Is(err, types.ErrorStatusCasMismatch) {
			return false
		}
	}
	return false
}

// fleetRejectCounts counts a global rule's refusal by cause.
func (p *pluginContext) fleetRejectCounts(a *application) {
	if p.fellBack(a) {
		a.rule.fleet.m.fallbackLocal.inc()
		p.vm.fleet.fallbackUsed = true
	}
}

// fellBack reports whether global rule a's refusal was decided by
// on_backend_down: the local share spent, or a refusal while the rate
// limit service does not answer.
func (p *pluginContext) fellBack(a *application) bool {
	return a.fl.v == vShareDeny || (a.fl.v == vDeny && !p.vm.fleet.healthy)
}

// ---- Request-path fetch ----

type fetchResult uint8

const (
	fetchNone   fetchResult = iota // no global rule needs a lease: go on
	fetchPaused                    // the request waits for the RLS
	fetchRedo                      // nothing could be sent: decide again without fetching
)

// fetchIfNeeded pauses h for the global rules whose pool cannot pay.
func (p *pluginContext) fetchIfNeeded(h *httpContext, apps []application) fetchResult {
	need := false
	for i := range apps {
		if a := &apps[i]; !a.failed && a.rule.fleet != nil && a.fl.v == vFetch {
			need = true
		}
	}
	switch {
	case !need:
		return fetchNone
	case p.fetchForRequest(h, apps):
		return fetchPaused
	}
	h.fleetFetched = true
	return fetchRedo
}

// hasGlobalRules reports whether fleet mode is in use.
func (cc *compiledConfig) hasGlobalRules() bool {
	if cc.fleet == nil {
		return false
	}
	for _, r := range cc.rules {
		if r.fleet != nil {
			return true
		}
	}
	return false
}

// pendingFetch is one ask for one key in flight from this VM, and the
// requests waiting for it.
type pendingFetch struct {
	waiters []*httpContext
}

// fetchForRequest pauses h until the RLS answered for every global rule of
// the request whose pool cannot pay (a.fl.v == vFetch). It joins asks
// already in flight for the same key. It returns false when nothing could
// be sent (the caller then decides again without fetching).
func (p *pluginContext) fetchForRequest(h *httpContext, apps []application) bool {
	fs := &p.vm.fleet
	var batch *syncBatch
	for i := range apps {
		a := &apps[i]
		if a.failed || a.fl.v != vFetch || a.rule.fleet == nil {
			continue
		}
		key := a.rule.name + ":" + string(a.fl.id[:])
		if pf := fs.pending[key]; pf != nil {
			pf.waiters = append(pf.waiters, h)
			h.fleetWaits++
			continue
		}
		if batch == nil {
			batch = &syncBatch{requestPath: true}
		}
		pk := poolRef{rule: a.rule.name, id: a.fl.id, fp: a.fp}
		fs.addOwed(batch, a.rule, pk) // the debt first: the ask is decided after it
		p.addBlock(batch, a, pk)      // then the block: fleet_block.go
		ask := p.requestAsk(a, int64(fs.nowMS()))
		batch.add(a.rule, pk, opFetch, ask, a.fl.pool.Spent)
		a.rule.fleet.m.fetches.inc()
		fs.pending[key] = &pendingFetch{waiters: []*httpContext{h}}
		batch.pending = append(batch.pending, key)
		h.fleetWaits++
	}
	if batch != nil && !p.dispatch(batch) {
		// Nothing was sent (counted as a backend error, health is down):
		// drop our asks; the caller decides again without fetching.
		for _, key := range batch.pending {
			delete(fs.pending, key)
			h.fleetWaits--
		}
	}
	return h.fleetWaits > 0
}

// requestAsk sizes a request-path ask: the pool's demand (askFor), and at
// least the request's cost. A rule charged from the response asks for what
// an answer is expected to cost (default_cost; a response_status rule's
// fixed_cost) instead: the service's take is all or nothing, so a large
// demand-sized ask could be refused while the bucket still holds enough
// for this request, and the answer's true cost is booked whatever the
// lease (what it cannot pay is charged); the sync refills busy pools to
// their demand between requests. lease_max and the burst bound it, as they
// bound every lease.
func (p *pluginContext) requestAsk(a *application, nowMS int64) int64 {
	r := a.rule
	if !r.respCost {
		return max(p.askFor(r, a.fl.pool, nowMS), int64(math.Ceil(a.cost)))
	}
	expected := r.defaultCost
	if r.respStatus {
		expected = r.fixedCost
	}
	return max(1, min(int64(math.Ceil(expected)), r.fleet.fc.leaseMax, int64(r.fleet.tb.Burst)))
}

// resolvePending ends the asks of batch and resumes the requests that no
// longer wait for anything.
func (p *pluginContext) resolvePending(batch *syncBatch) {
	fs := &p.vm.fleet
	for _, key := range batch.pending {
		pf := fs.pending[key]
		delete(fs.pending, key)
		if pf == nil {
			continue
		}
		for _, w := range pf.waiters {
			if w.fleetWaits--; w.fleetWaits == 0 && !w.fleetDone {
				w.resumeAfterFetch()
			}
		}
	}
}

// resumeAfterFetch decides a paused request again, without fetching, and
// continues it or sends the 429.
func (h *httpContext) resumeAfterFetch() {
	defer func() {
		if r := recover(); r != nil {
			h.p.vm.recovered("fleet resume", r)
			_ = resumeRequest()
		}
	}()
	if err := setEffectiveContext(h.id); err != nil {
		return // the stream is gone
	}
	h.fleetFetched = true
	if h.p.cfg == nil || h.p.decide(h) == types.ActionContinue {
		_ = resumeRequest()
	}
}

// fleetForget removes a finished stream from every ask it waited for.
func (vm *vmContext) fleetForget(h *httpContext) {
	if h.fleetWaits == 0 {
		return
	}
	h.fleetDone = true
	for _, pf := range vm.fleet.pending {
		for i := 0; i < len(pf.waiters); i++ {
			if pf.waiters[i] == h {
				pf.waiters = append(pf.waiters[:i], pf.waiters[i+1:]...)
				i--
			}
		}
	}
}
