package filter

import (
	"strings"

	"github.com/sluice-rl/sluice/plugin/headermap"
	"github.com/sluice-rl/sluice/shared/bodyscan"
	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/shared/state"
)

// compiledConfig is a policy.Config prepared for the request path: key and
// match sources resolved to cache indexes, per-rule header values and
// metric handles computed once, so a request allocates as little as
// possible. It is immutable after compile; a reconfiguration builds a new
// one in a new root context (buckets live in shared data, keyed by rule
// name, and are untouched).
type compiledConfig struct {
	src *policy.Config

	policies [][]*compiledRule // per policy, its rules in order
	rules    []*compiledRule   // all rules, in order

	// Distinct names per source kind; sourceRef.idx indexes these.
	headerNames []string
	queryNames  []string
	claimNames  []string
	cookieNames []string
	metaPaths   []string // serialized property paths of metadata sources
	netBits     []string // the prefix lengths of ip:network sources ("24:64")
	netMasks    [][2]int // netBits parsed: IPv4 and IPv6 bits
	// cookieHeader is the headerNames index of "cookie", which cookie
	// sources read (valid when cookieNames is not empty).
	cookieHeader int

	// readNames are the distinct request headers the configuration can
	// read: headerNames and the headers behind the other sources
	// (fixedNames). headerRead and fixedRead hold 1 + their index in it
	// (0: not read); readSet is readNames compiled for headermap.Index
	// (pairs.go); readsSeveral: two or more, so a request's headers are
	// read in one call.
	readNames    []string
	headerRead   []int // by headerNames index
	fixedRead    [numFixed]int
	readSet      *headermap.Names
	readsSeveral bool

	rejectStatus    uint32
	rejectGRPC      int32 // the gRPC status of a limit rejection (Envoy uses it for gRPC requests only)
	responseHeaders bool
	legacyHeaders   bool      // also the older limit, remaining and reset fields (headers.go)
	legacyNames     [3]string // their names: RateLimit-Limit, ... or X-RateLimit-Limit, ...
	shadowHeader    string
	trustedHops     int
	anyShadow       bool // some shadow rule marks the upstream request (compiledRule.mark)
	anyDelay        bool // some rule has max_delay_ms (delay.go)
	anyPending      bool // some rule settles after the request: a response's cost (charge.go), a place (concurrency.go)

	telemetry *policy.Telemetry // nil: no reports (telemetry.go)
	hash      string            // config_hash of the configuration bytes

	// Fleet mode (fleet.go): nil without a "fleet" block.
	fleet  *compiledFleet
	byName map[string]*compiledRule
}

type compiledRule struct {
	name   string
	shadow bool
	// mark: a shadow rule, or a rule enforced on a share of its
	// identities, that names itself in the shadow header when it would
	// have refused a request it does not refuse ("shadow_mark", default
	// true); false for other rules and for those that only count.
	mark bool
	// partial: an enforce rule with "enforce_percent" under 100 refuses
	// only the identities request.Enforced chooses at enforcePct; the
	// others' applications are spared (treated as in shadow mode).
	partial    bool
	enforcePct float64
	// timed: the rule applies only during its bounds ("from", "until")
	// or its schedule's windows (schedule.go); selectRules reads the clock
	// for such rules only.
	timed      bool
	during     policy.Bounds
	sched      *policy.Schedule
	schedCache scheduleCache
	keys       []sourceRef
	match      []compiledMatch
	// oneHeader is 1 + the header cache index when match is one exact
	// condition on a header (its value oneValue, never ""), else 0:
	// selectRules then decides a rule whose header is read already without
	// calling matches.
	oneHeader int
	oneValue  string
	tb        limiter.TokenBucket
	// win is the rule's windowed algorithm (window.go), nil for
	// token_bucket: its state is a state.Window under keyPrefix "fw:",
	// "sw:" or "rw:" instead of a state.Bucket under "tb:".
	win limiter.Window
	// quota is the rule's calendar quota (window.go), also in win; its
	// zero value for other algorithms.
	quota limiter.Quota
	// exactRetry: Retry-After is the wait itself, without jitter (quotas).
	exactRetry bool
	// noReset: the RateLimit field has no t (concurrency rules).
	noReset bool
	// concurrent: a concurrency rule; an admitted request gives its place
	// back when its stream ends (concurrency.go).
	concurrent bool
	// blockSecs is the token bucket's block_seconds (block.go), 0 for none.
	blockSecs float64
	// nearLimit: an admitted request leaving less than this is counted in
	// near_limit (metrics.go); 0 for a global rule, whose local pool says
	// little about the fleet's limit.
	nearLimit float64
	// Response-charged rules (charge.go): the cost comes from the response
	// header (or trailer, respTrailer) respName, or is fixedCost for a
	// response whose status is in statuses (respStatus; respGRPC: whose
	// gRPC status is in grpcCodes); charged down to -maxDebt.
	respCost    bool
	respTrailer bool
	respStatus  bool
	respGRPC    bool
	respName    string
	respJSON    bool // the cost is at jsonPaths of the body (body.go)
	respBytes   bool // the cost is the body's size (body.go)
	jsonPaths   bodyscan.Paths
	statuses    policy.StatusSet
	grpcCodes   policy.GRPCCodeSet
	maxDebt     float64
	cm          chargeMetrics
	algorithm   string // policy.Algorithm*, for telemetry
	reason      string // X-RateLimit-Reason: "<algorithm>_exceeded"

	costKind    policy.CostKind
	costSrc     sourceRef // for header/query costs
	fixedCost   float64
	defaultCost float64

	// Precomputed strings (see headers.go).
	keyPrefix string // "tb:<rule>:" — state.BucketKey(rule, ""); "fw:", "sw:" or "rw:" for windows

	// maxKeys is the rule's max_keys: > 0 keeps the buckets of that many
	// identities in groups of ways (keys groupPrefix+"<group>"), 0 stores
	// one exact key per identity (store.go).
	maxKeys     int
	groups      int    // state.Groups(maxKeys)
	ways        int    // state.GroupWays(maxKeys): buckets per group
	groupPrefix string // "tb:<rule>:#" — state.SlotKey(rule, n) without n
	limitHdr    string // RateLimit-Limit: floor(burst)
	policyHdr   string // RateLimit-Policy: "<rule>";q=<burst>;w=<window>
	rlPrefix    string // RateLimit: `"<rule>";r=`
	bodyPre     string // `{"error":"rate_limited","rule":"<rule>","retry_after":`
	// details is what the rule's local reply passes as Envoy's response
	// code details (%RESPONSE_CODE_DETAILS% in access logs):
	// sluice_rate_limited{<rule>}, or sluice_denied{<rule>} for a deny
	// rule. Built once: a rejection allocates nothing for it.
	details string
	// reply is the rejection's custom body and content type ("reject_body",
	// "reject_content_type"; a deny rule's own JSON when it has none), nil
	// for a limit rule that sends the JSON body bodyPre begins.
	reply *localReply
	// ownNames are the names of its own limit, remaining and reset fields
	// ("limit_headers"; "" for one not sent), ownFields whether it has any
	// (limit_headers.go).
	ownNames  [3]string
	ownFields bool
	// rejectStatus is the HTTP status of its rejections (a limit rule's
	// "reject_status", else the configuration's).
	rejectStatus uint32
	// rejectHeaders are the fields of your own its rejections carry
	// ("reject_headers"; Config.RejectHeadersOf), after the filter's.
	rejectHeaders [][2]string

	m ruleMetrics

	fleet *ruleFleet // "scope": "global" (fleet.go); nil for a local rule

	// Actions and overrides (actions.go).
	action     ruleAction
	denyStatus uint32
	overrides  map[string]*compiledRule // identity -> this rule with its override's limits
	overridden bool                     // this is such an override of a rule
	// active is when such an override applies (always, for most):
	// outside, the identity has the rule's limits.
	active      overrideTime
	activeCache scheduleCache // active's schedule, read once per window
	// fleetOverrides finds a global rule's overrides by sluice_id, the
	// name under which its pools are synced (fleet.go).
	fleetOverrides map[[idLen]byte]*compiledRule

	// Telemetry (telemetry.go).
	tc            *ruleTally         // the VM's cumulative counters for this rule name
	clearIdentity bool               // "telemetry_identity": "clear"
	srcKeys       []policy.KeySource // limit_keys, for displayIdentity
}

type compiledMatch struct {
	src sourceRef
	request.Match
	// exact is set for an "exact" condition (the commonest, and what a
	// trial's tier rules use): matches compares value itself instead of
	// calling Holds, which saves a call per rule and request in wasm.
	exact bool
	value string
}

// compile prepares a parsed configuration. Metrics are defined through vm
// (once per VM and name).
func compile(c *policy.Config, vm *vmContext) *compiledConfig {
	cc := &compiledConfig{
		src:             c,
		rejectStatus:    uint32(c.RejectStatus),
		rejectGRPC:      int32(c.RejectGRPCStatus),
		responseHeaders: c.ResponseHeaders,
		legacyHeaders:   c.LegacyHeaders.On(),
		shadowHeader:    strings.ToLower(c.ShadowHeader),
		trustedHops:     c.TrustedHops,
		telemetry:       c.Telemetry,
		fleet:           compileFleet(c.Fleet), // fleet.go
		byName:          map[string]*compiledRule{},
	}
	cc.legacyNames[0], cc.legacyNames[1], cc.legacyNames[2] = c.LegacyHeaders.Names()
	if cc.rejectStatus < 400 || cc.rejectStatus > 599 {
		cc.rejectStatus = policy.DefaultRejectStatus
	}
	if cc.rejectGRPC < 1 || cc.rejectGRPC > 16 { // never OK (0) for a rejection
		cc.rejectGRPC = policy.DefaultRejectGRPCStatus
	}
	if cc.shadowHeader == "" {
		cc.shadowHeader = policy.DefaultShadowHeader
	}
	for _, p := range c.Policies {
		var rules []*compiledRule
		for i := range p.Rules {
			r := cc.compileRule(&p.Rules[i], vm)
			rules = append(rules, r)
			cc.rules = append(cc.rules, r)
			cc.byName[r.name] = r
			cc.anyShadow = cc.anyShadow || r.mark
			cc.anyDelay = cc.anyDelay || r.tb.MaxDelay > 0
			cc.anyPending = cc.anyPending || r.respCost || r.concurrent
		}
		cc.policies = append(cc.policies, rules)
	}
	cc.readSet = headermap.NewNames(cc.readNames...)
	cc.readsSeveral = len(cc.readNames) >= 2
	return cc
}

func (cc *compiledConfig) compileRule(r *policy.Rule, vm *vmContext) *compiledRule {
	cr := &compiledRule{
		name:      r.Name,
		shadow:    r.Mode == policy.ModeShadow,
		mark:      r.Marks(),
		partial:   r.Partial(),
		keyPrefix: keyPrefix(r.Algorithm) + r.Name + ":",
		algorithm: r.Algorithm,
		reason:    reasonTokenBucket,
		m:         vm.ruleMetrics(r.Name),
		tc:        vm.tally(r.Name),

		clearIdentity: r.ClearIdentity,
	}
	if cr.partial {
		cr.enforcePct = *r.EnforcePercent
	}
	cr.timed, cr.during, cr.sched = r.Timed(), r.Bounds, r.Schedule
	cr.maxKeys = r.MaxKeys
	if cr.maxKeys < 0 { // Parse never returns one; be defensive
		cr.maxKeys = policy.DefaultMaxKeys
	}
	if cr.maxKeys > policy.MaxMaxKeys {
		cr.maxKeys = policy.MaxMaxKeys
	}
	cr.groupPrefix = cr.keyPrefix + "#"
	cr.groups, cr.ways = state.Groups(cr.maxKeys), state.GroupWays(cr.maxKeys)
	cr.srcKeys = r.Keys
	for _, k := range r.Keys {
		cr.keys = append(cr.keys, cc.ref(k))
	}
	for i := range r.Match {
		cond := &r.Match[i].Cond
		cr.match = append(cr.match, compiledMatch{src: cc.ref(r.Match[i].Source), Match: request.CompileMatch(&r.Match[i]),
			exact: cond.Op == policy.MatchExact, value: cond.Value})
	}
	if len(cr.match) == 1 && cr.match[0].exact && cr.match[0].src.kind == policy.SourceHeader && cr.match[0].value != "" {
		cr.oneHeader, cr.oneValue = cr.match[0].src.idx+1, cr.match[0].value
	}
	costSrc, fixedCost, defaultCost := request.RuleCost(r)
	cr.costKind = costSrc.Kind
	switch costSrc.Kind {
	case policy.CostHeader:
		cr.costSrc = cc.ref(policy.KeySource{Kind: policy.SourceHeader, Name: costSrc.Name})
	case policy.CostQuery:
		cr.costSrc = cc.ref(policy.KeySource{Kind: policy.SourceQuery, Name: costSrc.Name})
	case policy.CostMetadata:
		cr.costSrc = cc.ref(policy.KeySource{Kind: policy.SourceMetadata, Name: costSrc.Name})
	}
	cr.fixedCost, cr.defaultCost = fixedCost, defaultCost
	cr.compileLimits(r)
	cr.concurrent = r.Algorithm == policy.AlgorithmConcurrency
	cr.bodyPre = `{"error":"rate_limited","rule":"` + r.Name + `","retry_after":`
	cr.details = request.ReplyDetails(r)
	if rp := cc.src.RejectReply(r); rp != nil {
		cr.reply = &localReply{body: []byte(rp.Body), contentType: rp.ContentType}
	}
	if l := r.LimitHeaders; l != nil {
		cr.ownNames, cr.ownFields = [3]string{l.Limit, l.Remaining, l.Reset}, true
	}
	cr.rejectStatus = cc.rejectStatus // checked in compile
	if s := r.RejectStatus; s >= 400 && s <= 599 {
		cr.rejectStatus = uint32(s)
	}
	for _, h := range cc.src.RejectHeadersOf(r) {
		cr.rejectHeaders = append(cr.rejectHeaders, [2]string{h.Name, h.Value})
	}
	cr.compileAction(r, vm)        // actions.go
	cc.compileRuleFleet(cr, r, vm) // fleet.go
	switch {
	case r.Quota != nil:
		cr.compileCharge(costSrc, r.Quota.MaxDebt, vm) // charge.go
	case r.Window == nil && r.TokenBucket != nil:
		cr.compileCharge(costSrc, r.TokenBucket.MaxDebt, vm) // charge.go
	}
	cr.compileOverrides(r, vm) // actions.go
	return cr
}

// compileLimits sets the rule's algorithm and its precomputed header values
// from r: the rule itself, or a copy of it carrying an override's limits.
func (cr *compiledRule) compileLimits(r *policy.Rule) {
	cr.tb, cr.win = request.RuleLimiter(r)
	if q, ok := cr.win.(limiter.Quota); ok {
		cr.quota = q // its bounds cache is this VM's: one callback at a time
	}
	f := request.RuleFields(r)
	cr.limitHdr, cr.policyHdr, cr.reason, cr.rlPrefix = f.Limit, f.Policy, f.Reason, f.RatePrefix
	cr.exactRetry, cr.noReset = f.ExactRetry, f.NoReset
	cr.blockSecs = 0
	if r.TokenBucket != nil {
		cr.blockSecs = float64(r.TokenBucket.BlockSeconds)
	}
	cr.nearLimit = 0
	if !r.Global {
		cr.nearLimit = nearLimitShare * cr.capacity()
	}
}

// nearLimitShare is the part of its capacity a client has left when it is
// near its limit: envoyproxy/ratelimit's default near-limit ratio, 0.8 of
// the limit used.
const nearLimitShare = 0.2

// capacity is what an identity of the rule can spend at once, the most a
// decision's Remaining can be: the burst of a token bucket, the window's
// (or quota's) Capacity, which for a rolling window with max_per_period is
// the per-period cap.
func (cr *compiledRule) capacity() float64 {
	if cr.win != nil {
		return cr.win.Capacity()
	}
	return cr.tb.Burst
}

// ref resolves a key source to a cache slot, assigning one index per
// distinct header, query parameter or claim name, and notes the request
// header it reads in readNames.
func (cc *compiledConfig) ref(k policy.KeySource) sourceRef {
	if f, ok := fixedOf(k.Kind, cc.trustedHops); ok {
		cc.fixedRead[f] = cc.read(fixedNames[f])
	}
	switch k.Kind {
	case policy.SourceHeader:
		name := strings.ToLower(k.Name)
		idx := indexOf(&cc.headerNames, name)
		if idx == len(cc.headerRead) {
			cc.headerRead = append(cc.headerRead, cc.read(name))
		}
		return sourceRef{kind: k.Kind, idx: idx}
	case policy.SourceQuery:
		return sourceRef{kind: k.Kind, idx: indexOf(&cc.queryNames, k.Name)}
	case policy.SourceJWT:
		return sourceRef{kind: k.Kind, idx: indexOf(&cc.claimNames, k.Name)}
	case policy.SourceCookie:
		cc.cookieHeader = cc.ref(policy.KeySource{Kind: policy.SourceHeader, Name: "cookie"}).idx
		return sourceRef{kind: k.Kind, idx: indexOf(&cc.cookieNames, k.Name)}
	case policy.SourceMetadata:
		return sourceRef{kind: k.Kind, idx: indexOf(&cc.metaPaths, strings.Join(policy.MetadataPath(k.Name), "\x00"))}
	case policy.SourceIPNetwork:
		idx := indexOf(&cc.netBits, k.Name)
		if idx == len(cc.netMasks) {
			v4, v6 := k.NetworkBits()
			cc.netMasks = append(cc.netMasks, [2]int{v4, v6})
		}
		return sourceRef{kind: k.Kind, idx: idx}
	}
	return sourceRef{kind: k.Kind}
}

// read adds a request header name to readNames and returns 1 + its index.
func (cc *compiledConfig) read(name string) int {
	return 1 + indexOf(&cc.readNames, name)
}

// The request headers behind the sources that are not headers
// (requestSources.get), by compiledConfig.fixedRead index.
const (
	fixedPath   = iota // :path, for path and query sources
	fixedMethod        // :method
	fixedHost          // :authority
	fixedAuthz         // authorization, for JWT claims
	fixedXFF           // x-forwarded-for, for the client address when xff_trusted_hops > 0
	numFixed
)

var fixedNames = [numFixed]string{":path", ":method", ":authority", "authorization", "x-forwarded-for"}

// fixedOf is the fixed header a source of kind k reads, if any (the peer
// address reads none).
func fixedOf(k policy.SourceKind, trustedHops int) (int, bool) {
	switch k {
	case policy.SourceQuery, policy.SourcePath:
		return fixedPath, true
	case policy.SourceMethod:
		return fixedMethod, true
	case policy.SourceHost:
		return fixedHost, true
	case policy.SourceJWT:
		return fixedAuthz, true
	case policy.SourceIP, policy.SourceIPNetwork:
		return fixedXFF, trustedHops > 0
	}
	return 0, false
}

func indexOf(names *[]string, n string) int {
	for i, x := range *names {
		if x == n {
			return i
		}
	}
	*names = append(*names, n)
	return len(*names) - 1
}

// matches reports whether every condition of the rule holds
// (policy.Condition.Holds: a missing value satisfies only "present": false
// and negations).
//
// A header already read for this request is taken from the cache here, and
// an exact condition compared here: a rule that does not apply (say, each
// rule of a shadow trial) then costs no call at all, where every Go call
// costs in wasm.
func (r *compiledRule) matches(rs *requestSources) bool {
	for i := range r.match {
		m := &r.match[i]
		var v string
		var ok bool
		if c := rs.cachedHeader(m.src); c != nil {
			v, ok = c.v, c.state == present
		} else {
			v, ok = rs.get(m.src)
		}
		if m.exact {
			if !ok || v != m.value {
				return false
			}
			continue
		}
		if !m.Holds(v, ok) {
			return false
		}
	}
	return true
}

// cost returns the request's cost for this rule: the fixed cost, or the
// header, query or metadata value parsed by limiter.ParseCost, falling back
// to the default cost when that value is absent, not a number, not
// positive, NaN, infinite or absurdly large.
func (r *compiledRule) cost(rs *requestSources) float64 {
	switch r.costKind {
	case policy.CostFixed:
		return r.fixedCost
	case policy.CostResponseHeader, policy.CostResponseTrailer, policy.CostResponseJSON, policy.CostResponseBytes, policy.CostResponseStatus, policy.CostResponseGRPCStatus:
		return 0 // charged from the response (charge.go)
	}
	if v, ok := rs.get(r.costSrc); ok {
		if c, ok := limiter.ParseCost(v); ok {
			return c
		}
	}
	return r.defaultCost
}

// wholeTokens floors a token count for a header (request.WholeTokens).
func wholeTokens(v float64) int64 { return request.WholeTokens(v) }

// ceilSeconds rounds a duration up to whole seconds (request.CeilSeconds).
func ceilSeconds(v float64) int64 { return request.CeilSeconds(v) }
