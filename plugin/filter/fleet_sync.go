package filter

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/shared/rls"
	"github.com/sluice-rl/sluice/shared/state"
	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

// Fleet mode, the RLS side: one ShouldRateLimit call (gRPC over an HTTP/2
// dispatch_http_call) per batch, the process-wide sync lock, the backend's
// health, and applying answers to pools. See docs/filter.md "Fleet mode".

// Shared-data keys of the process (per vm_id, like every key).
const (
	fleetLockKey   = "fl:sync-lock" // "{until_ms}:{holder}:{released_ms}"
	fleetHealthKey = "fl:health"    // "{0|1}:{fleet_size}"
	// maxBatch bounds the descriptors of one call.
	maxBatch = 64
	// maxHotPools bounds the keys one VM tracks for syncing.
	maxHotPools = 4096
)

// fleetState is a VM's fleet mode state; it outlives root contexts.
type fleetState struct {
	started      bool
	vmID         string
	node         string
	healthy      bool // the backend answered the last call (as seen by this VM)
	failed       int  // calls failed in a row (for the recovery line)
	reportedSize int  // x-sluice-fleet-size from the backend, 0 if never sent
	fallbackUsed bool
	pending      map[string]*pendingFetch
	hot          map[hotKeyFleet]*hotPool
	sync         *syncBatch // the tick's call in flight
	syncAtMS     int64
	resp         rls.Response
	stats        map[string]*fleetRuleStats // for telemetry, per rule name
	pubBuf       []byte                     // fleet_hot.go
	// Response costs owed to the service (fleet_charge.go), and the call
	// carrying them.
	owed     map[hotKeyFleet]*owedCharge
	owedCall *syncBatch
	owedAtMS int64
	// chargesHeldUntilMS: until then, owed charges are not sent: the
	// service refused them as an operation it does not know.
	chargesHeldUntilMS int64
	// blocksHeldUntilMS: until then, no block is sent (fleet_block.go),
	// for the same reason.
	blocksHeldUntilMS int64
}

// hotKeyFleet identifies a pool this VM spent from.
type hotKeyFleet struct {
	rule string
	id   [idLen]byte
}

// poolRef locates a pool: its rule, sluice_id and (keyed) fingerprint,
// which picks its group.
type poolRef struct {
	rule string
	id   [idLen]byte
	fp   uint64
}

// compareRefs orders pools by rule and sluice_id. Sorts of pools break
// ties with it, so that a batch or a published list is the same whatever
// the order in which a map handed them out.
func compareRefs(x, y poolRef) int {
	if c := strings.Compare(x.rule, y.rule); c != 0 {
		return c
	}
	return bytes.Compare(x.id[:], y.id[:])
}

type hotPool struct {
	ref        poolRef
	lastSeenMS int64
	hint       int64 // 1 + limit_remaining of the last refusal, 0 if none
	live       bool  // still in the table (a removed entry may linger in ruleFleet.lastHot)
}

// fleetRuleStats is what telemetry reports per global rule.
type fleetRuleStats struct {
	leaseTokens float64
	pools       int
	sharing     int
}

type fleetOp uint8

const (
	opFetch fleetOp = iota
	opReturn
	opCharge // a response's cost the pool could not pay (fleet_charge.go)
	opBlock  // block the identity if its bucket cannot pay a request (fleet_block.go)
)

type batchItem struct {
	rule        *compiledRule
	ref         poolRef
	op          fleetOp
	amount      int64 // whole tokens asked or returned
	spentAtSend int64
	window      int64 // a windowed return: the start (unix ms) of the window it was leased in
}

// syncBatch is one call: its descriptors in order.
type syncBatch struct {
	items       []batchItem
	pending     []string // request path: the asks this call answers
	requestPath bool
	owed        bool  // a call of owed charges only (fleet_charge.go)
	sentMS      int64 // when the call went out (windowed leases end relative to it)
}

func (b *syncBatch) add(r *compiledRule, ref poolRef, op fleetOp, amount, spent int64) {
	b.items = append(b.items, batchItem{rule: r, ref: ref, op: op, amount: amount, spentAtSend: spent})
}

func (fs *fleetState) start() {
	if fs.started {
		return
	}
	fs.started, fs.healthy = true, true // unknown counts as healthy: ask first
	fs.vmID = strconv.FormatUint(rand.Uint64(), 16)
	fs.pending = map[string]*pendingFetch{}
	fs.hot = map[hotKeyFleet]*hotPool{}
	fs.stats = map[string]*fleetRuleStats{}
	fs.node = "unknown"
	if v, ok := getProperty("node\x00id", nil); ok && len(v) > 0 {
		fs.node = string(v[:min(len(v), 256)])
	}
}

func (fs *fleetState) nowMS() int64 { return int64(nowSeconds() * 1000) }

// fleetSize is N for the local share: configured, else reported, else 1.
func (fs *fleetState) fleetSize(fc *compiledFleet) int {
	switch {
	case fc.src.FleetSize > 0:
		return fc.src.FleetSize
	case fs.reportedSize > 0:
		return fs.reportedSize
	}
	return 1
}

// startFleet runs in on_configure when the configuration has a fleet block.
func (p *pluginContext) startFleet() {
	p.vm.fleet.start()
}

// touchPool records on the request path that this VM spends from a state.Pool,
// so its syncs refill it. A new key allocates once.
func (fs *fleetState) touchPool(a *application, nowMS int64) {
	rf := a.rule.fleet
	if e := rf.lastHot; e != nil && e.ref.id == a.fl.id && e.ref.rule == a.rule.name && e.live {
		e.lastSeenMS = nowMS // a hot key: no map lookup
		return
	}
	k := hotKeyFleet{rule: a.rule.name, id: a.fl.id}
	if e := fs.hot[k]; e != nil {
		e.lastSeenMS = nowMS
		rf.lastHot = e
		return
	}
	if len(fs.hot) >= maxHotPools {
		return // the request path still fetches for it when its pool is empty
	}
	e := &hotPool{
		ref:        poolRef{rule: a.rule.name, id: a.fl.id, fp: a.fp},
		lastSeenMS: nowMS,
		live:       true,
	}
	fs.hot[k] = e
	rf.lastHot = e
}

// askFor sizes a lease from the pool's observed demand: the tokens spent
// since its last sync, as a rate, times three sync intervals (so one ask
// covers the wait for this VM's next turn at the lock), within
// [lease_min, lease_max] and at most the burst (a GCRA never grants more).
func (p *pluginContext) askFor(r *compiledRule, pl state.Pool, nowMS int64) int64 {
	fc := r.fleet.fc
	var ask float64
	if pl.LastSync > 0 && nowMS > pl.LastSync {
		secs := max(float64(nowMS-pl.LastSync), float64(fc.syncMS)) / 1000
		ask = float64(pl.Spent) / micro / secs * 3 * float64(fc.syncMS) / 1000
	} else { // a new pool: this process's share of one sync interval
		ask = r.fleet.tb.Rate * float64(fc.syncMS) / 1000 / float64(p.vm.fleet.fleetSize(fc))
	}
	n := int64(math.Ceil(ask))
	n = max(n, fc.leaseMin)
	n = min(n, fc.leaseMax, int64(r.fleet.tb.Burst))
	return max(n, 1)
}

// ---- The tick ----

// fleetTick runs the process's sync when this VM gets the lock: refill
// pools running low or expiring, return the tokens of idle ones.
func (p *pluginContext) fleetTick() {
	fc, fs := p.cfg.fleet, &p.vm.fleet
	if fc == nil {
		return
	}
	now := fs.nowMS()
	fs.refreshHealth()
	fs.pruneHot(now, fc.ttlMS)
	p.publishHot(now) // fleet_hot.go: the lock holder syncs every VM's keys
	p.flushOwed(now)  // fleet_charge.go
	if fs.sync != nil {
		if now-fs.syncAtMS < 4*int64(fc.src.TimeoutMS)+fc.syncMS {
			return
		}
		fs.sync = nil // the host lost the callback: give up on it
	}
	if !p.acquireLock(now) {
		return
	}
	batch := p.buildSync(now, p.mergedHot(now))
	if len(batch.items) == 0 {
		p.releaseLock(now)
		return
	}
	if !p.dispatch(batch) {
		p.releaseLock(now)
		return
	}
	fs.sync, fs.syncAtMS = batch, now
}

type syncCandidate struct {
	item    batchItem
	urgency float64 // lower first
}

// buildSync picks, among the process's hot keys, the pools to refill or
// return, lowest first.
func (p *pluginContext) buildSync(now int64, hot map[hotKeyFleet]*hotPool) *syncBatch {
	fc := p.cfg.fleet
	var cands []syncCandidate
	for k, e := range hot {
		r := p.cfg.byName[k.rule]
		if r == nil || r.fleet == nil {
			continue
		}
		a := refApp(r.fleetRule(k.id, now), e.ref)
		if err := p.readPool(&a, float64(now)/1000); err != nil {
			continue
		}
		idle := now-e.lastSeenMS > 2*fc.syncMS
		if c, ok := p.syncAction(&a, e, idle, now); ok {
			cands = append(cands, c)
		}
	}
	slices.SortFunc(cands, func(x, y syncCandidate) int {
		switch {
		case x.urgency < y.urgency:
			return -1
		case x.urgency > y.urgency:
			return 1
		}
		return compareRefs(x.item.ref, y.item.ref)
	})
	batch := &syncBatch{}
	for _, c := range cands[:min(len(cands), maxBatch)] {
		if c.item.op == opReturn && !p.takeForReturn(c.item, now) {
			continue
		}
		batch.items = append(batch.items, c.item)
	}
	return batch
}

// syncAction decides what one pool needs.
func (p *pluginContext) syncAction(a *application, e *hotPool, idle bool, now int64) (syncCandidate, bool) {
	fc := a.rule.fleet.fc
	pl := a.fl.pool
	lease := a.fl.exists && pl.Mode == state.PoolLease && pl.Stamp > now
	if idle {
		if lease && pl.Tokens >= micro {
			it := batchItem{rule: a.rule, ref: e.ref, op: opReturn, amount: pl.Tokens / micro,
				window: a.rule.fleet.windowStart(pl.Stamp)}
			return syncCandidate{item: it, urgency: 1e18}, true // returns go last
		}
		return syncCandidate{}, false
	}
	if lease && pl.DenyUntil > now {
		return syncCandidate{}, false // refused lately: the refusal's wait is not over
	}
	target := p.askFor(a.rule, pl, now)
	if e.hint > 0 {
		target = max(1, min(target, e.hint-1))
	}
	have := int64(0)
	if lease {
		have = pl.Tokens / micro
	}
	// A lease about to expire is renewed, except a window's: its end is
	// the window's, and a renewal would lapse with it.
	expiring := lease && pl.Stamp-now < 2*fc.syncMS && !a.rule.fleet.windowed
	if lease && !expiring && have*2 >= target {
		return syncCandidate{}, false
	}
	ask := max(target-have, fc.leaseMin, 1)
	ask = min(ask, int64(a.rule.fleet.tb.Burst))
	it := batchItem{rule: a.rule, ref: e.ref, op: opFetch, amount: ask, spentAtSend: pl.Spent}
	return syncCandidate{item: it, urgency: float64(have) / float64(max(target, 1))}, true
}

// takeForReturn removes the whole tokens to return from the pool before
// the call: returned tokens must not also be spent.
func (p *pluginContext) takeForReturn(it batchItem, now int64) bool {
	a := p.poolApp(it)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err := p.readPool(&a, float64(now)/1000); err != nil || !a.fl.exists {
			return false
		}
		pl := a.fl.pool
		if pl.Mode != state.PoolLease || pl.Tokens < it.amount*micro {
			return false
		}
		pl.Tokens -= it.amount * micro
		pl.LastSync = now
		if p.putPool(&a, a.fl.way, pl, true, a.fl.cas) == nil {
			return true
		}
	}
	return false
}

func (p *pluginContext) poolApp(it batchItem) application {
	return refApp(it.rule, it.ref)
}

// refApp is an application of rule r to the pool ref locates, for the
// sync path's reads and writes: its group in r's table as it is now (a
// configuration update may have resized it).
func refApp(r *compiledRule, ref poolRef) application {
	a := application{appState: appState{rule: r, fp: ref.fp, group: state.GroupOf(ref.fp, r.groups)}}
	a.fl.id = ref.id
	return a
}

func (p *pluginContext) statPool(rule string, pl state.Pool, exists bool, now int64) {
	fs := &p.vm.fleet
	st := fs.stats[rule]
	if st == nil {
		st = &fleetRuleStats{}
		fs.stats[rule] = st
	}
	if !exists {
		return
	}
	st.pools++
	if pl.Mode == state.PoolShare {
		st.sharing++
	} else if pl.Stamp > now {
		st.leaseTokens += float64(pl.Tokens) / micro
	}
}

// ---- The process lock ----

// acquireLock takes the process's sync lock unless another VM holds it.
// Whoever holds it syncs every VM's published keys (fleet_hot.go).
func (p *pluginContext) acquireLock(now int64) bool {
	fs, fc := &p.vm.fleet, p.cfg.fleet
	v, cas, st := getSharedData(fleetLockKey, nil)
	stored := st == statusOK
	if st != statusOK && st != statusNotFound {
		return false
	}
	if stored {
		if until, _, _ := parseLock(v); until > now {
			return false
		}
	}
	until := now + int64(fc.src.TimeoutMS)*4 + fc.syncMS
	return writeKey(fleetLockKey, lockValue(until, fs.vmID, 0), stored, cas) == nil
}

func (p *pluginContext) releaseLock(now int64) {
	v, cas, st := getSharedData(fleetLockKey, nil)
	if st != statusOK {
		return
	}
	if _, holder, _ := parseLock(v); holder != p.vm.fleet.vmID {
		return
	}
	_ = setSharedData(fleetLockKey, lockValue(0, p.vm.fleet.vmID, now), cas)
}

func lockValue(until int64, holder string, released int64) []byte {
	b := strconv.AppendInt(nil, until, 10)
	b = append(append(b, ':'), holder...)
	b = append(b, ':')
	return strconv.AppendInt(b, released, 10)
}

func parseLock(v []byte) (until int64, holder string, released int64) {
	n, used, ok := parseInt(v)
	if !ok || used >= len(v) || v[used] != ':' {
		return 0, "", 0
	}
	rest := v[used+1:]
	i := slices.Index(rest, ':')
	if i < 0 {
		return n, "", 0
	}
	r, _, _ := parseInt(rest[i+1:])
	return n, string(rest[:i]), r
}

// appendFleetReport adds the fleet object to a telemetry report (only
// when the configuration has global rules): per global rule, the lease
// tokens in the process's hot pools (at most maxReportPools read), how many
// pools, and whether a fallback is active. Every VM of a process reports
// the same process-wide view.
func (p *pluginContext) appendFleetReport(b []byte) []byte {
	fs := &p.vm.fleet
	p.fleetStats(fs.nowMS())
	b = append(b, `,"`+telfmt.FieldFleet+`":{"`+telfmt.FleetFieldBackendHealthy+`":`...)
	b = strconv.AppendBool(b, fs.healthy)
	b = append(b, `,"`+telfmt.FleetFieldSize+`":`...)
	b = strconv.AppendInt(b, int64(fs.fleetSize(p.cfg.fleet)), 10)
	b = append(b, `,"`+telfmt.FleetFieldRules+`":[`...)
	first := true
	for _, r := range p.cfg.rules {
		if r.fleet == nil {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		st := fs.stats[r.name]
		if st == nil {
			st = &fleetRuleStats{}
		}
		b = append(b, `{"`+telfmt.FleetRuleFieldRule+`":`...)
		b = appendJSONString(b, r.name)
		b = append(b, `,"`+telfmt.FleetRuleFieldLeaseTokens+`":`...)
		b = appendJSONFloat(b, st.leaseTokens)
		b = append(b, `,"`+telfmt.FleetRuleFieldPools+`":`...)
		b = strconv.AppendInt(b, int64(st.pools), 10)
		b = append(b, `,"`+telfmt.FleetRuleFieldFallbackActive+`":`...)
		b = strconv.AppendBool(b, !fs.healthy || st.sharing > 0)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// maxReportPools bounds the pools read for one telemetry report.
const maxReportPools = 256

// fleetStats recomputes the per-rule telemetry numbers from the process's
// hot pools.
func (p *pluginContext) fleetStats(now int64) {
	fs := &p.vm.fleet
	clear(fs.stats)
	n := 0
	for k, e := range p.mergedHot(now) {
		r := p.cfg.byName[k.rule]
		if r == nil || r.fleet == nil {
			continue
		}
		if n++; n > maxReportPools {
			break
		}
		a := refApp(r, e.ref)
		if p.readPool(&a, float64(now)/1000) == nil {
			p.statPool(r.name, a.fl.pool, a.fl.exists, now)
		}
	}
}
