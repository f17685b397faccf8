// Package simulate answers "what would the filter do with this request?"
// without a proxy: which rule of each policy applies and why the others do
// not, the identity and cost each applying rule uses, each rule's decision
// from a given bucket state, and the response the filter would send.
//
// It runs the filter's own pure code: request attributes, match
// conditions, composite keys and masked identities from shared/request,
// the algorithms from shared/limiter, the header values from
// request.RuleFields and request.RejectTimes. What it does itself is the
// filter's control flow over them (plugin/filter: selectRules and decide),
// which a test checks against the compiled filter request by request.
//
// It does not model what needs a proxy: shared-data failures (fail open),
// CAS races, a global rule's lease pool (a global rule is decided as a
// local bucket of its limit, and says so), and a delayed request's hold.
package simulate

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/request"
	"github.com/sluice-rl/sluice/shared/state"
)

// Request is the simulated request, as the filter sees it.
type Request struct {
	Method string
	// Path is the :path, with its query string.
	Path string
	// Host is the :authority.
	Host string
	// Headers are the request headers by lower-case name (one value each).
	// A bearer token for jwt: sources goes in "authorization".
	Headers map[string]string
	// ClientAddress is the downstream peer's address (Envoy's
	// source.address, with or without a port).
	ClientAddress string
	// PeerPrincipal is the first URI SAN of the client's TLS certificate
	// (Envoy's connection.uri_san_peer_certificate), "" without one.
	PeerPrincipal string
	// Route is the name of the Envoy route the request matched (Envoy's
	// xds.route_name), "" for none.
	Route string
	// Cluster is the upstream cluster the request's route sends it to
	// (Envoy's xds.cluster_name), "" for none.
	Cluster string
	// Connection is the downstream connection's number (Envoy's
	// connection.id) in decimal, "" for none.
	Connection string
	// Metadata is the request's Envoy dynamic metadata (filter_metadata),
	// for metadata: sources: by namespace, each a JSON object as
	// encoding/json decodes it (metadata.go).
	Metadata map[string]map[string]any
	// Response, when set, is a sample of the upstream's answer: the rules
	// whose cost comes from the response are charged for it (RuleResult's
	// Response).
	Response *Response
}

// Properties are the request's Envoy properties the filter reads, by
// dotted path, as a test host takes them.
func (r Request) Properties() map[string][]byte {
	p := map[string][]byte{"source.address": []byte(r.ClientAddress)}
	if r.PeerPrincipal != "" {
		p[PeerPrincipalProperty] = []byte(r.PeerPrincipal)
	}
	if r.Route != "" {
		p[RouteProperty] = []byte(r.Route)
	}
	if r.Cluster != "" {
		p[ClusterProperty] = []byte(r.Cluster)
	}
	if n, err := strconv.ParseUint(r.Connection, 10, 64); err == nil {
		p[ConnectionProperty] = binary.LittleEndian.AppendUint64(nil, n)
	}
	for ns, st := range r.Metadata {
		addMetadataProperties(p, "metadata.filter_metadata."+ns, map[string]any(st))
	}
	return p
}

// The Envoy properties behind "peer:principal", "route", "cluster" and
// "connection" (a uint64, which Envoy hands over as 8 little-endian bytes).
const (
	PeerPrincipalProperty = "connection.uri_san_peer_certificate"
	RouteProperty         = "xds.route_name"
	ClusterProperty       = "xds.cluster_name"
	ConnectionProperty    = "connection.id"
)

// State is a rule's stored state for one identity: Bucket for a token
// bucket, Window for a windowed rule.
type State struct {
	Bucket state.Bucket
	Window state.Window
}

// Lookup returns the state of rule r for the identity (as shown to
// operators, request.DisplayIdentity), and whether it is known. An unknown
// state is a new one: a full bucket, an empty window.
type Lookup func(r *policy.Rule, identity string) (State, bool)

// Options are the simulation's inputs besides the request.
type Options struct {
	Now    float64 // unix seconds, read as the filter reads its clock (limiter.Seconds)
	Lookup Lookup  // nil: every state is new
}

// Result is the simulated outcome of one request.
type Result struct {
	Policies []PolicyResult
	// Status is the response status: 0 when the request goes upstream,
	// the configuration's reject_status when the filter rejects it.
	Status int
	// Rule is the rule that decided a rejection, or whose RateLimit fields
	// an allowed response carries ("" for neither).
	Rule string
	// Headers are the response header fields the filter sets, lower-case,
	// in the order the filter sets them.
	Headers [][2]string
	// Body is the rejection's body ("" when allowed).
	Body string
	// Details are the rejection's response code details, which Envoy's
	// access logs print for %RESPONSE_CODE_DETAILS% ("" when allowed).
	Details string
	// GRPCStatus is the gRPC status code a gRPC call receives when the
	// filter rejects it (0 when allowed): Envoy answers such a call with
	// HTTP 200, this code in grpc-status and Body in grpc-message.
	GRPCStatus int
	// Upstream are the header fields the filter sets on the request sent
	// upstream (the shadow header).
	Upstream [][2]string
	// DelayMS is the time an allowed request would be held (max_delay_ms).
	DelayMS int64
}

// PolicyResult is one policy: its rules in order.
type PolicyResult struct {
	Name  string
	Rules []RuleResult
	// Applied is the index in Rules of the rule that applies, -1 for none.
	Applied int
}

// RuleResult is one rule of a policy for the request.
type RuleResult struct {
	Name      string
	Mode      policy.Mode
	Algorithm string
	// Applies: the rule's match holds and its limit keys are present,
	// and no earlier rule of the policy applies. A shadow rule exempted by
	// an applying shadow exempt rule does not apply (Why says so).
	Applies bool
	// Why is, for a rule that does not apply, the reason in words.
	Why string
	// Identity is the applying rule's identity as the dashboard shows it
	// (sensitive components masked); Key is the same identity unmasked,
	// for whoever wrote the request (a policy test), never for a page.
	Identity string
	Key      string
	// Cost is the request's cost for the rule.
	Cost float64
	// Known reports whether Lookup knew the identity's state; Level is
	// the tokens (or quota) available before the request.
	Known bool
	Level float64
	// Decision is the rule's decision.
	Decision limiter.Decision
	// Next is the state the filter would store when the request is
	// admitted, rounded as shared data keeps it (unchanged when it is
	// rejected, and for a concurrency rule: a simulated request ends at
	// once, giving its place back).
	Next State
	// Held is, for a concurrency rule that admitted the request, the
	// state while it is still in flight (its place taken), as the filter
	// stores it on admission; nil otherwise.
	Held *State
	// Global: a fleet rule, decided here as a local bucket of its limit.
	Global bool
	// Action is the rule's action: policy.ActionLimit, ActionExempt (an
	// applying exempt rule lets the request through unlimited by any rule;
	// in shadow mode, unlimited by any shadow rule), ActionUnlimited (an
	// applying unlimited rule ends its policy: Why says so) or ActionDeny
	// (rejected at once with deny_status).
	Action string
	// Overridden: the identity has an entry in the rule's overrides, whose
	// limits decided instead of the rule's.
	Overridden bool
	// Spared: the rule enforces its limit on a share of its identities
	// ("enforce_percent") and not on this one, so it decides as a shadow
	// rule would: it never refuses the request, only marks it.
	Spared bool
	// ChargedLater: the rule's cost comes from the response
	// (response_header:, response_trailer: or response_status:). The
	// request is admitted while the bucket (or quota) is not in debt (a
	// response_status rule: while it holds that rule's cost) and nothing is
	// taken now; the filter charges the cost when the response
	// arrives, so Cost is only the default_cost charged when the response
	// reports none, or a response_status rule's fixed_cost for a response
	// of a status it counts.
	ChargedLater bool
	// Response is what a ChargedLater rule that admitted the request
	// charges for the request's sample Response (nil without one).
	Response *ResponseCharge
	// Blocked: the rule refused the request and, with block_seconds, put
	// the identity in a block; Next is the blocked bucket the filter stores
	// although the request is rejected (Stores).
	Blocked bool

	rule *policy.Rule
	// blocker is what a refusal of a token-bucket rule with block_seconds
	// needs to block (block), nil otherwise.
	blocker  *blocker
	fields   request.Fields
	composed string // the composite key (Retry-After's jitter seed)
}

// Run simulates req against cfg.
func Run(cfg *policy.Config, req Request, opt Options) Result {
	src := newSources(cfg, req)
	res := Result{}
	var apps, denies []*RuleResult
	var exempt, shadowEx *RuleResult // the first applying exempt rule in each mode
	for pi := range cfg.Policies {
		p := &cfg.Policies[pi]
		pr := PolicyResult{Name: p.Name, Applied: -1, Rules: make([]RuleResult, len(p.Rules))}
		for i := range p.Rules {
			r := &p.Rules[i]
			rr := &pr.Rules[i]
			*rr = RuleResult{Name: r.Name, Mode: r.Mode, Algorithm: r.Algorithm, Global: r.Global, Action: r.Action, rule: r}
			if rr.Action == "" {
				rr.Action = policy.ActionLimit
			}
			if exempt != nil {
				rr.Why = "not evaluated: exempt rule " + strconv.Quote(exempt.Name) + " applies"
				continue
			}
			if pr.Applied >= 0 {
				rr.Why = "not evaluated: rule " + strconv.Quote(p.Rules[pr.Applied].Name) + " before it applies (first match wins)"
				continue
			}
			if now := nanos(opt.Now); !r.AppliesAt(now) {
				rr.Why = outOfTime(r, now)
				continue
			}
			if why := src.mismatch(r); why != "" {
				rr.Why = why
				continue
			}
			comps := make([]string, 0, len(r.Keys))
			for _, k := range r.Keys {
				v, ok := src.get(k)
				if !ok {
					rr.Why = "its match holds but limit key " + k.String() + " is missing (the next rule is tried)"
					break
				}
				comps = append(comps, v)
			}
			if rr.Why != "" {
				continue
			}
			composite, _ := request.AppendComposite(nil, nil, comps)
			rr.composed = string(composite)
			rr.Identity = request.DisplayIdentity(r.Keys, r.ClearIdentity, rr.composed)
			rr.Key = request.DisplayIdentity(r.Keys, true, rr.composed)
			rr.Spared = r.Partial() && !request.Enforced(rr.composed, *r.EnforcePercent)
			rr.Applies = true
			pr.Applied = i
			switch {
			case rr.Mode == policy.ModeShadow && shadowEx != nil:
				// exempted below
			case rr.Action == policy.ActionExempt && rr.Mode == policy.ModeShadow:
				shadowEx = rr
			case rr.Action == policy.ActionExempt:
				exempt = rr
			case rr.Action == policy.ActionUnlimited:
				rr.Why = "unlimited: policy " + strconv.Quote(p.Name) + " limits this request no further; the other policies apply"
			case rr.Action == policy.ActionDeny:
				denies = append(denies, rr)
			default:
				apps = append(apps, rr)
			}
		}
		res.Policies = append(res.Policies, pr)
	}
	if exempt != nil {
		// Through, limited by no rule: the rules of earlier policies that
		// apply decide nothing and the filter stores nothing for them.
		res.exemptFrom(exempt, false)
		return res
	}
	if shadowEx != nil {
		res.exemptFrom(shadowEx, true)
		apps = slices.DeleteFunc(apps, func(rr *RuleResult) bool { return !rr.Applies })
		denies = slices.DeleteFunc(denies, func(rr *RuleResult) bool { return !rr.Applies })
	}
	for _, a := range apps {
		a.decide(src, opt)
	}
	// The first enforced deny rule decides, else the first shadow one marks.
	var act *RuleResult
	for _, d := range denies {
		if act == nil || act.Mode == policy.ModeShadow && d.Mode != policy.ModeShadow {
			act = d
		}
	}
	if act != nil && act.Mode != policy.ModeShadow {
		res.deny(cfg, act)
		return res
	}
	res.finish(cfg, act, apps)
	return res
}

// exemptFrom exempts the request from every rule that applies, in any
// policy, except ex itself; with shadowOnly (ex is an exempt rule in
// shadow mode), from shadow rules only. An exempted rule does not apply
// and says why.
func (res *Result) exemptFrom(ex *RuleResult, shadowOnly bool) {
	why := "exempted: exempt rule " + strconv.Quote(ex.Name) + " applies"
	if shadowOnly {
		why = "exempted: shadow exempt rule " + strconv.Quote(ex.Name) + " applies (it exempts the request from shadow rules only)"
	}
	for pi := range res.Policies {
		p := &res.Policies[pi]
		if p.Applied < 0 {
			continue
		}
		rr := &p.Rules[p.Applied]
		if rr == ex || shadowOnly && rr.Mode != policy.ModeShadow {
			continue
		}
		rr.Applies = false
		rr.Why = why
		p.Applied = -1
	}
}

// RuleNamed returns the result of the rule named name, or nil.
func (res *Result) RuleNamed(name string) *RuleResult {
	for i := range res.Policies {
		for j := range res.Policies[i].Rules {
			if rr := &res.Policies[i].Rules[j]; rr.Name == name {
				return rr
			}
		}
	}
	return nil
}

// deny is the filter's answer for an applying deny rule in enforce mode.
func (res *Result) deny(cfg *policy.Config, a *RuleResult) {
	res.Status = a.rule.DenyStatus
	if res.Status < 200 || res.Status > 599 {
		res.Status = policy.DefaultDenyStatus
	}
	res.Rule, res.Details = a.Name, request.ReplyDetails(a.rule)
	res.GRPCStatus = policy.GRPCStatusOfHTTP(res.Status) // the filter names none
	var contentType string
	res.Body, contentType = replyOf(cfg, a.rule, `{"error":"denied","rule":"`+a.Name+`"}`)
	res.Headers = [][2]string{{"x-ratelimit-reason", "denied"}}
	if contentType != "" {
		res.Headers = append(res.Headers, [2]string{"content-type", contentType})
	}
	res.addRejectHeaders(cfg, a.rule)
}

// addRejectHeaders adds the fields of your own a rejection by r carries
// ("reject_headers"), after the filter's.
func (res *Result) addRejectHeaders(cfg *policy.Config, r *policy.Rule) {
	for _, h := range cfg.RejectHeadersOf(r) {
		res.Headers = append(res.Headers, [2]string{h.Name, h.Value})
	}
}

// replyOf is the body and content type a rejection by r is sent with: its
// reject_body (Config.RejectReply), or the filter's JSON body def.
func replyOf(cfg *policy.Config, r *policy.Rule, def string) (body, contentType string) {
	if reply := cfg.RejectReply(r); reply != nil {
		return reply.Body, reply.ContentType
	}
	return def, policy.ContentTypeJSON
}

// nanos is now (unix seconds, in whole microseconds as limiter.Seconds
// reads the clock) in Unix nanoseconds, as bounds are.
func nanos(now float64) int64 { return int64(math.Round(now*1e6)) * 1000 }

// outOfTime says why a rule for a time does not apply at now: outside its
// bounds, or outside its schedule's windows (and when the next starts).
func outOfTime(r *policy.Rule, now int64) string {
	text := func(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }
	b := r.Bounds
	if s := r.Schedule; s != nil && b.ActiveAt(now) {
		start, _, _ := s.Window(now)
		return "not in its schedule (" + s.String() + "): the next window starts at " + text(start) + " (the next rule is tried)"
	}
	switch {
	case b.From == 0:
		return "not in its time: it ended at " + text(b.Until) + " (the next rule is tried)"
	case b.Until == 0:
		return "not in its time: it applies from " + text(b.From) + " (the next rule is tried)"
	}
	return "not in its time: it applies from " + text(b.From) + " until " + text(b.Until) + " (the next rule is tried)"
}

// limitsFor returns the rule deciding identity at now (unix seconds): r,
// or a copy of r with the limits of the identity's override (matched as
// the filter matches it: the key as the rule builds the identity), if it
// applies then.
func limitsFor(r *policy.Rule, identity string, now float64) (*policy.Rule, bool) {
	var id []byte
	for i := range r.Overrides {
		o := &r.Overrides[i]
		id = state.AppendIdentity(id[:0], o.Key)
		if string(id) != identity {
			continue
		}
		if !o.AppliesAt(nanos(now)) {
			return r, false
		}
		wr := *r
		if o.Quota != nil {
			wr.Quota = o.Quota
		} else if o.Window != nil {
			wr.Window = o.Window
		} else if o.TokenBucket != nil {
			wr.TokenBucket = o.TokenBucket
		} else {
			continue
		}
		return &wr, true
	}
	return r, false
}

// decide runs the rule's algorithm for the request.
func (rr *RuleResult) decide(src *sources, opt Options) {
	r := rr.rule
	r, rr.Overridden = limitsFor(r, rr.composed, opt.Now)
	rr.fields = request.RuleFields(r)
	costSrc, fixed, def := request.RuleCost(r)
	rr.Cost = fixed
	rr.ChargedLater = costSrc.FromResponse()
	byStatus := costSrc.ByStatus() // admitted while its cost is left
	switch costSrc.Kind {
	case policy.CostFixed, policy.CostResponseStatus, policy.CostResponseGRPCStatus: // fixed_cost: each request's, or each counted response's
	case policy.CostResponseHeader, policy.CostResponseTrailer, policy.CostResponseJSON:
		rr.Cost = def // what a response reporting no cost is charged
	case policy.CostResponseBytes:
		rr.Cost = 0 // the body's bytes, known when it has passed
	default: // a request header, query parameter or metadata value
		rr.Cost = def
		kind := map[policy.CostKind]policy.SourceKind{policy.CostHeader: policy.SourceHeader,
			policy.CostQuery: policy.SourceQuery, policy.CostMetadata: policy.SourceMetadata}[costSrc.Kind]
		if v, ok := src.get(policy.KeySource{Kind: kind, Name: costSrc.Name}); ok {
			if c, ok := limiter.ParseCost(v); ok {
				rr.Cost = c
			}
		}
	}
	var st State
	if opt.Lookup != nil {
		st, rr.Known = opt.Lookup(r, rr.Identity)
	}
	tb, win := request.RuleLimiter(r)
	if win != nil {
		w := st.Window
		probe := w
		rr.Level = win.Take(&probe, rr.Known, opt.Now, 0).Remaining // a copy: nothing taken
		if q, ok := win.(limiter.Quota); ok && rr.ChargedLater {
			if byStatus {
				rr.Decision = q.AdmitCost(&w, rr.Known, opt.Now, rr.Cost)
			} else {
				rr.Decision = q.Admit(&w, rr.Known, opt.Now)
			}
			rr.Next = st // the charge comes with the response
			rr.respond(src, r, st, tb, win, opt.Now)
			return
		}
		rr.Decision = win.Take(&w, rr.Known, opt.Now, rr.Cost)
		rr.Next = State{Window: w.Stored()}
		if rr.Decision.Allowed && r.Algorithm == policy.AlgorithmConcurrency {
			held := rr.Next
			rr.Held = &held
		}
		if !rr.Decision.Allowed || r.Algorithm == policy.AlgorithmConcurrency {
			rr.Next = st // refused; or a place, given back when the request ends
		}
		return
	}
	if rr.Known {
		rr.Level = tb.Level(st.Bucket, opt.Now)
	} else {
		rr.Level = tb.Burst
	}
	if rr.ChargedLater {
		var refill state.Bucket
		if byStatus {
			refill, rr.Decision = tb.AdmitCost(st.Bucket, rr.Known, opt.Now, rr.Cost)
		} else {
			refill, rr.Decision = tb.Admit(st.Bucket, rr.Known, opt.Now)
		}
		rr.Next = st // the charge comes with the response
		rr.respond(src, r, st, tb, win, opt.Now)
		cost := 0.0
		if byStatus {
			cost = rr.Cost
		}
		rr.mayBlock(r, tb, refill, cost)
		return
	}
	next, dec := tb.Take(st.Bucket, rr.Known, opt.Now, rr.Cost)
	rr.Decision = dec
	rr.mayBlock(r, tb, next, rr.Cost)
	rr.Next = State{Bucket: next.Stored()}
	if !dec.Allowed {
		rr.Next = st
	}
}

// blocker is a refusing token-bucket rule's block: its limits, the bucket
// refilled to the request's time, and the cost the refused request needed
// (limiter.TokenBucket.Block).
type blocker struct {
	tb      limiter.TokenBucket
	refill  state.Bucket
	cost    float64
	seconds float64
}

// mayBlock keeps what a refusal by rule r (its limits tb, after overrides)
// needs to block the identity, when r blocks.
func (rr *RuleResult) mayBlock(r *policy.Rule, tb limiter.TokenBucket, refill state.Bucket, cost float64) {
	if rr.Decision.Allowed || r.TokenBucket == nil || r.TokenBucket.BlockSeconds <= 0 {
		return
	}
	rr.blocker = &blocker{tb: tb, refill: refill, cost: cost, seconds: float64(r.TokenBucket.BlockSeconds)}
}

// block puts the identity of a refusing rule in its block, as the filter
// does once the request is decided by limits (plugin/filter/block.go): the
// refusal's wait covers the block, and Next is the blocked bucket.
func (rr *RuleResult) block() {
	b := rr.blocker
	if b == nil {
		return
	}
	if next, ok := b.tb.Block(&rr.Decision, b.refill, b.cost, b.seconds); ok {
		rr.Blocked, rr.Next = true, State{Bucket: next.Stored()}
	}
}

// finish decides the request from its applying rules, as the filter does:
// any enforce rule refusing rejects it (the one with the longest wait
// answers); otherwise the enforce rule with the fewest tokens left gives
// the RateLimit fields, and shadow rules refusing mark the upstream request
// (those with "shadow_mark": false only count).
func (res *Result) finish(cfg *policy.Config, shadowDeny *RuleResult, apps []*RuleResult) {
	var reject, best *RuleResult
	var shadow []string
	if shadowDeny != nil && shadowDeny.marks() { // a deny rule in shadow mode only marks the request
		shadow = append(shadow, shadowDeny.Name)
	}
	for _, a := range apps {
		if a.Decision.Allowed {
			continue
		}
		a.block()
		if a.shadow() {
			if a.marks() {
				shadow = append(shadow, a.Name)
			}
			continue
		}
		if reject == nil || a.Decision.Wait > reject.Decision.Wait {
			reject = a
		}
	}
	if reject != nil {
		res.reject(cfg, reject)
		return
	}
	for _, a := range apps {
		if a.shadow() {
			continue
		}
		if best == nil || a.Decision.Remaining < best.Decision.Remaining {
			best = a
		}
		if d := a.Decision.Delay; d > 0 {
			res.DelayMS = max(res.DelayMS, int64(d*1000+0.999999))
		}
	}
	if anyShadow(cfg) {
		name := cfg.ShadowHeader
		if name == "" {
			name = policy.DefaultShadowHeader
		}
		if len(shadow) > 0 {
			res.Upstream = append(res.Upstream, [2]string{strings.ToLower(name), strings.Join(shadow, ",")})
		}
	}
	if best == nil || !cfg.ResponseHeaders {
		return
	}
	res.Rule = best.Name
	remaining := strconv.FormatInt(request.WholeTokens(best.Decision.Remaining), 10)
	reset := strconv.FormatInt(request.CeilSeconds(best.Decision.Reset), 10)
	f := best.fields
	rl := f.RatePrefix + remaining + ";t=" + reset
	if f.NoReset {
		rl, reset = f.RatePrefix+remaining, "0"
	}
	res.Headers = append(res.Headers,
		[2]string{"ratelimit", rl},
		[2]string{"ratelimit-policy", f.Policy})
	if cfg.LegacyHeaders.On() {
		limit, rem, rst := cfg.LegacyHeaders.Names()
		res.Headers = append(res.Headers,
			[2]string{limit, f.Limit},
			[2]string{rem, remaining},
			[2]string{rst, reset})
	}
	for _, a := range apps {
		if a.shadow() || a.rule == nil || a.rule.LimitHeaders == nil {
			continue
		}
		reset := request.CeilSeconds(a.Decision.Reset)
		if a.fields.NoReset {
			reset = 0 // as in RateLimit
		}
		res.addOwnHeaders(a, strconv.FormatInt(request.WholeTokens(a.Decision.Remaining), 10), strconv.FormatInt(reset, 10))
	}
}

// addOwnHeaders adds a rule's own fields ("limit_headers"): its limit,
// and remaining and reset as given.
func (res *Result) addOwnHeaders(a *RuleResult, remaining, reset string) {
	if a.rule == nil || a.rule.LimitHeaders == nil {
		return
	}
	l := a.rule.LimitHeaders
	for _, h := range [][2]string{{l.Limit, a.fields.Limit}, {l.Remaining, remaining}, {l.Reset, reset}} {
		if h[0] != "" {
			res.Headers = append(res.Headers, h)
		}
	}
}

func (res *Result) reject(cfg *policy.Config, a *RuleResult) {
	res.Status = cfg.RejectStatusOf(a.rule)
	if res.Status < 400 || res.Status > 599 {
		res.Status = policy.DefaultRejectStatus
	}
	res.GRPCStatus = cfg.RejectGRPCStatus
	res.Rule, res.Details = a.Name, request.ReplyDetails(a.rule)
	retry, t := request.RejectTimes(a.Decision.Wait, a.composed)
	if a.fields.ExactRetry {
		retry = t // a quota: the time to the reset, without jitter
	}
	rs, ts := strconv.FormatInt(retry, 10), strconv.FormatInt(t, 10)
	var contentType string
	res.Body, contentType = replyOf(cfg, a.rule, `{"error":"rate_limited","rule":"`+a.Name+`","retry_after":`+rs+`}`)
	f := a.fields
	rl := f.RatePrefix + "0;t=" + ts
	if f.NoReset {
		rl = f.RatePrefix + "0"
	}
	res.Headers = [][2]string{
		{"retry-after", rs},
		{"ratelimit", rl},
		{"ratelimit-policy", f.Policy},
		{"x-ratelimit-reason", f.Reason},
	}
	if contentType != "" {
		res.Headers = append(res.Headers, [2]string{"content-type", contentType})
	}
	if cfg.LegacyHeaders.On() {
		limit, rem, rst := cfg.LegacyHeaders.Names()
		res.Headers = append(res.Headers,
			[2]string{limit, f.Limit},
			[2]string{rem, "0"},
			[2]string{rst, ts})
	}
	res.addOwnHeaders(a, "0", ts) // nothing remaining; reset: until the cost is available
	res.addRejectHeaders(cfg, a.rule)
}

// shadow reports whether the rule refuses nothing for this request: it
// is in shadow mode, or spares the identity.
func (rr *RuleResult) shadow() bool { return rr.Mode == policy.ModeShadow || rr.Spared }

// marks reports whether the rule, in shadow mode, names itself in the
// shadow header when it would have refused ("shadow_mark").
func (rr *RuleResult) marks() bool { return rr.rule == nil || !rr.rule.Unmarked }

// anyShadow reports whether some shadow rule (or rule enforced on a share
// of its identities) marks the upstream request:
// only then does the filter set (or remove) the shadow header.
func anyShadow(cfg *policy.Config) bool {
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			if r.Marks() {
				return true
			}
		}
	}
	return false
}

// Store is one state the filter writes for an admitted request.
type Store struct {
	Rule     string
	Identity string // as shown to operators
	State    State
}

// Stores returns the states the filter would write for the request: every
// admitting rule's, or none when the request is rejected (a rejected
// request consumes from no rule), and the blocked bucket of every rule
// whose refusal blocked its identity (block_seconds) either way. A rule whose cost comes from the
// response stores its charge for the request's sample Response (its state
// unchanged without one). Feeding them back through Lookup simulates a
// sequence of requests.
func (res *Result) Stores() []Store {
	var out []Store
	for _, p := range res.Policies {
		if p.Applied < 0 {
			continue
		}
		r := &p.Rules[p.Applied]
		if r.Blocked { // the one write of a refusal
			out = append(out, Store{Rule: r.Name, Identity: r.Identity, State: r.Next})
			continue
		}
		if res.Status != 0 {
			continue
		}
		if r.Decision.Allowed {
			next := r.Next
			if r.Response != nil {
				next = r.Response.Next
			}
			out = append(out, Store{Rule: r.Name, Identity: r.Identity, State: next})
		}
	}
	return out
}
