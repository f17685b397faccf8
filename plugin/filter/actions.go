package filter

import (
	"strconv"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
	telfmt "github.com/sluice-rl/sluice/shared/telemetry"
)

// This file holds the rule actions and per-identity overrides:
//
//   - An exempt rule that applies (first match of its policy, limit keys, if
//     any, present) exempts the request from every rule of every policy,
//     deny rules included; counted in sluice.rule.<rule>.exempted. In
//     shadow mode it exempts the request from shadow rules only (limit,
//     deny and exempt rules of every policy, before or after it), never
//     from enforced ones, so a draft tried in shadow keeps its own
//     exemptions without changing enforcement; counted the same way.
//   - An unlimited rule that applies ends its policy: the policy's later
//     rules are not tried, so the policy limits nothing for this request,
//     and the other policies apply as usual; counted in
//     sluice.rule.<rule>.exempted. Its mode changes nothing: it limits
//     nothing either way.
//   - A deny rule that applies rejects the request at once with its
//     deny_status and X-RateLimit-Reason: denied, touching no bucket;
//     counted in sluice.rule.<rule>.denied. In shadow mode it only marks the
//     request (the shadow header) and counts shadow_rejected.
//   - An override gives one identity of a limit rule its own limits: the
//     identity is looked up in a hash table (no scan, whatever the number
//     of overrides) and the request is decided by a copy of the rule with
//     those limits. The copy keeps the rule's name and so its bucket key:
//     the identity's state carries over when its override changes (a
//     token bucket's level is cut down to a lowered burst by Take; a
//     quota keeps the period's count, so a lowered limit rejects until the
//     reset).
//     Counted in sluice.rule.<rule>.overridden.

type ruleAction uint8

const (
	actLimit ruleAction = iota
	actExempt
	actUnlimited
	actDeny
)

const reasonDenied = "denied"

// compileAction sets the rule's action, its deny reply and the counters
// only exempt and deny rules need.
func (cr *compiledRule) compileAction(r *policy.Rule, vm *vmContext) {
	p := "sluice.rule." + r.Name + "."
	switch r.Action {
	case policy.ActionExempt:
		cr.action = actExempt
		cr.m.exempted = vm.counter(p + "exempted")
	case policy.ActionUnlimited: // counted as exempted: from its policy
		cr.action = actUnlimited
		cr.m.exempted = vm.counter(p + "exempted")
	case policy.ActionDeny:
		cr.action = actDeny
		cr.denyStatus = uint32(r.DenyStatus)
		if cr.denyStatus < 200 || cr.denyStatus > 599 {
			cr.denyStatus = policy.DefaultDenyStatus
		}
		if cr.reply == nil {
			cr.reply = &localReply{body: []byte(`{"error":"denied","rule":"` + r.Name + `"}`), contentType: contentTypeJSON}
		}
		cr.m.denied = vm.counter(p + "denied")
	}
}

// overrideLimits identifies an override's limits, so identities with the
// same limits (a plan) share one compiled rule.
type overrideLimits struct {
	rate, burst, limit, perPeriod float64
	block                         int          // a token bucket's block_seconds
	active                        overrideTime // when it applies
}

// overrideTime is when an override applies: within its bounds and in its
// weekly schedule's windows (schedule nil: every day, all day).
type overrideTime struct {
	bounds   policy.Bounds
	schedule *policy.Schedule
}

func timeOf(o *policy.Override) overrideTime { return overrideTime{o.Bounds, o.Schedule} }

// timed reports whether the override applies only at some times: only
// those read the clock.
func (t overrideTime) timed() bool { return t.bounds.Bounded() || t.schedule != nil }

// overrideAt reports whether ov, an override's copy of its rule, applies
// at now (Unix nanoseconds); a schedule's answer is kept for its window.
func (ov *compiledRule) overrideAt(now int64) bool {
	t := &ov.active
	return t.bounds.ActiveAt(now) && (t.schedule == nil || ov.activeCache.in(t.schedule, now))
}

// compileOverrides builds the rule's override table: each distinct set of
// limits becomes one copy of the rule, each identity points to its copy.
func (cr *compiledRule) compileOverrides(r *policy.Rule, vm *vmContext) {
	if len(r.Overrides) == 0 {
		return
	}
	cr.m.overridden = vm.counter("sluice.rule." + r.Name + ".overridden")
	cr.overrides = make(map[string]*compiledRule, len(r.Overrides))
	shared := map[overrideLimits]*compiledRule{}
	var id []byte
	for i := range r.Overrides {
		o := &r.Overrides[i]
		var k overrideLimits
		switch {
		case o.TokenBucket != nil:
			k = overrideLimits{rate: o.TokenBucket.TokensPerSecond, burst: o.TokenBucket.Burst, block: o.TokenBucket.BlockSeconds}
		case o.Window != nil:
			k = overrideLimits{limit: o.Window.Limit, perPeriod: o.Window.MaxPerPeriod}
		case o.Quota != nil: // only the limit differs: period, zone and costs are the rule's
			k = overrideLimits{limit: o.Quota.Limit}
		default:
			continue
		}
		k.active = timeOf(o)
		ov := shared[k]
		if ov == nil {
			ov = new(compiledRule)
			*ov = *cr
			ov.overrides, ov.fleetOverrides, ov.overridden = nil, nil, true
			ov.active, ov.activeCache = k.active, scheduleCache{}
			wr := *r // the rule with the override's limits
			switch {
			case o.Quota != nil:
				wr.Quota = o.Quota
			case o.Window != nil:
				wr.Window = o.Window
			default:
				wr.TokenBucket = o.TokenBucket
			}
			ov.compileLimits(&wr)
			ov.compileFleetOverride() // fleet.go
			shared[k] = ov
		}
		// The identity exactly as the request path builds it (a long key
		// is hashed the same way).
		id = state.AppendIdentity(id[:0], o.Key)
		cr.overrides[string(id)] = ov
		cr.addFleetOverride(id, ov) // fleet.go
	}
}

// override returns the rule deciding identity: its override, or r.
// count: count the override's use (not when a request is decided again).
func (r *compiledRule) override(identity string, count bool) *compiledRule {
	// An override for a time reads the clock; the others never do.
	if ov := r.overrides[identity]; ov != nil && (!ov.active.timed() || ov.overrideAt(nowNanos())) {
		if count {
			r.m.overridden.inc()
			r.tc.overridden++
		}
		return ov
	}
	return r
}

// exempt lets a request exempted by rule r through, unlimited.
func (p *pluginContext) exempt(r *compiledRule) types.Action {
	r.m.exempted.inc()
	r.tc.exempted++
	p.markShadow(false)
	p.stripDelayHeader()
	return types.ActionContinue
}

// dropShadow removes the shadow rules from the applying rules, keeping the
// order of the others. Slots are swapped, not copied, so every slot keeps
// its own buffers.
func dropShadow(apps []application) []application {
	n := 0
	for i := range apps {
		if apps[i].rule.shadow {
			continue
		}
		if i != n {
			apps[n], apps[i] = apps[i], apps[n]
		}
		n++
	}
	return apps[:n]
}

// deny rejects a request at once for deny rule r (enforce mode).
func (p *pluginContext) deny(h *httpContext, r *compiledRule) types.Action {
	r.m.denied.inc()
	r.tc.denied++
	p.shadow = p.shadow[:0]
	h.local = true
	headers := append(p.replyHdrs[:0], [2]string{hdrReason, reasonDenied})
	if r.reply.contentType != "" {
		headers = append(headers, [2]string{hdrContentType, r.reply.contentType})
	}
	headers = append(headers, r.rejectHeaders...)
	p.replyHdrs = headers
	// No gRPC status: Envoy maps deny_status (403: permission_denied).
	if err := sendLocalResponse(r.denyStatus, r.details, headers, r.reply.body, grpcStatusFromHTTP); err != nil {
		h.local = false
		p.vm.logLimited(logFailOpen, "sluice: cannot send the denial: "+err.Error())
		return types.ActionContinue
	}
	return types.ActionPause
}

// shadowDeny records that shadow deny rule r would have rejected the
// request: the shadow header names it (unless it does not mark), the other
// rules still apply.
func (p *pluginContext) shadowDeny(r *compiledRule, count bool) {
	if count {
		r.m.shadowRejected.inc()
		r.tc.shadowRejected++
	}
	p.appendShadow(r)
}

// appendActionCounts appends a telemetry report's optional per-rule counts
// of exempted, denied and overridden requests, of response charges, of
// requests skipped for a missing key and of blocks, each only when
// non-zero (an admin that predates a field sees it only from a rule that
// needs the admin's own version to be pushed).
func appendActionCounts(b []byte, c *ruleTally) []byte {
	for _, f := range [...]struct {
		name string
		n    uint64
	}{
		{`,"` + telfmt.RuleFieldExempted + `":`, c.exempted},
		{`,"` + telfmt.RuleFieldDenied + `":`, c.denied},
		{`,"` + telfmt.RuleFieldOverridden + `":`, c.overridden},
		{`,"` + telfmt.RuleFieldResponseCharged + `":`, c.respCharged},
		{`,"` + telfmt.RuleFieldResponseDefault + `":`, c.respDefault},
		{`,"` + telfmt.RuleFieldResponseInvalid + `":`, c.respInvalid},
		{`,"` + telfmt.RuleFieldKeyMissing + `":`, c.keyMissing},
		{`,"` + telfmt.RuleFieldBlocked + `":`, c.blocked},
	} {
		if f.n > 0 {
			b = append(b, f.name...)
			b = strconv.AppendUint(b, f.n, 10)
		}
	}
	return b
}
