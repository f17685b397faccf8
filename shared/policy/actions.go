package policy

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file parses a rule's "action" (limit, exempt, unlimited, deny) with deny_status,
// and a limit rule's per-identity "overrides".

// Rule actions.
const (
	ActionLimit  = "limit"  // the default: the rule's algorithm limits the request
	ActionExempt = "exempt" // a matching request is limited by no rule of any policy
	// ActionUnlimited: a matching request is not limited by this rule's
	// policy (its later rules are not tried); the other policies apply.
	ActionUnlimited = "unlimited"
	ActionDeny      = "deny" // a matching request is rejected at once with deny_status
)

// Defaults and bounds of actions and overrides.
const (
	DefaultDenyStatus = 403
	// MaxOverrides bounds a rule's overrides. The filter looks an identity
	// up in a hash table, so their number does not slow requests; the
	// configuration's size is what limits it (docs/configuration.md).
	MaxOverrides = 100000
	// MaxOverrideKey bounds an override's key in bytes.
	MaxOverrideKey = 1024
)

var (
	actions        = []string{ActionLimit, ActionExempt, ActionUnlimited, ActionDeny}
	overrideFields = []string{"key", "algorithm_config", "from", "until", "schedule"}
	// What an override's algorithm_config may set: the limits, never what
	// shapes the state (window lengths) or the cost.
	tokenBucketOverrideFields = []string{"tokens_per_second", "rps", "burst", "block_seconds"}
	windowOverrideFields      = []string{"limit"}
	rollingOverrideFields     = []string{"limit", "max_per_period"}
	// A quota's identities share its calendar period and time zone (one
	// period boundary per rule): only the limit differs per identity.
	quotaOverrideFields = []string{"limit"}
)

// Override is one entry of a rule's "overrides": the identity Key (the
// composite key as the rule builds it from its limit_keys) gets these
// limits instead of the rule's. TokenBucket, Window or Quota (after the
// rule's algorithm) is the rule's algorithm_config with the override's
// fields applied, complete and validated.
type Override struct {
	Key         string
	TokenBucket *TokenBucket
	Window      *Window
	Quota       *Quota
	// Bounds say when the override applies ("from", "until"); outside,
	// the identity has the rule's limits, with no push needed.
	Bounds
	// Schedule is "schedule" (schedule.go): the days and times of day the
	// override applies, week after week, within its bounds; nil: always.
	Schedule *Schedule
}

// Timed reports whether the override applies only at some times: it has
// bounds or a schedule.
func (o *Override) Timed() bool { return o.Bounded() || o.Schedule != nil }

// AppliesAt reports whether now (Unix nanoseconds) is within the
// override's bounds and schedule. The filter, the simulator and the rate
// limit service all decide with it.
func (o *Override) AppliesAt(now int64) bool {
	return o.Bounds.ActiveAt(now) && (o.Schedule == nil || o.Schedule.ActiveAt(now))
}

// Bounds are when a rule or an override applies, in Unix nanoseconds (0: no
// bound): from From, inclusive, until Until, exclusive. The filter, the
// simulator and the rate limit service all decide with ActiveAt.
type Bounds struct{ From, Until int64 }

// ActiveAt reports whether now (Unix nanoseconds) is within the bounds.
func (b Bounds) ActiveAt(now int64) bool {
	return (b.From == 0 || now >= b.From) && (b.Until == 0 || now < b.Until)
}

// Bounded reports whether there is a bound at all.
func (b Bounds) Bounded() bool { return b.From != 0 || b.Until != 0 }

// action reads "action" and "deny_status".
func (p *parser) action(path string, f map[string]*jvalue) (string, int) {
	act, status := ActionLimit, 0
	if av := f["action"]; av != nil {
		apath := join(path, "action")
		switch {
		case av.kind == jString && slices.Contains(actions, av.s):
			act = av.s
		case av.kind == jString:
			p.errorf(apath, "unknown action ", quoteShort(av.s), "; use one of: ", quoteList(actions))
			return "", 0
		default:
			p.errorf(apath, "must be a string, one of: ", quoteList(actions), "; got ", av.kind.String())
			return "", 0
		}
	}
	if dv := f["deny_status"]; dv != nil {
		dpath := join(path, "deny_status")
		if act != ActionDeny {
			p.errorf(dpath, `applies only to rules with "action": "deny"; remove it`)
		} else if n, ok := p.integer(dpath, dv, 200, 599, "an HTTP status code from 200 to 599 (default 403)"); ok {
			status = n
		}
	} else if act == ActionDeny {
		status = DefaultDenyStatus
	}
	return act, status
}

// ruleRejectStatus reads a rule's "reject_status": a limit rule's own
// status for its rejections.
func (p *parser) ruleRejectStatus(path string, v *jvalue, action string) int {
	spath := join(path, "reject_status")
	switch action {
	case ActionLimit:
		if n, ok := p.integer(spath, v, 400, 599, "an HTTP status code from 400 to 599 (default: the top-level reject_status)"); ok {
			return n
		}
	case ActionDeny:
		p.errorf(spath, `applies only to limit rules; a deny rule's status is "deny_status"`)
	default:
		p.errorf(spath, `does not apply to an "`, action, `" rule, which rejects nothing; remove it`)
	}
	return 0
}

// RejectStatusOf is the HTTP status of a limit rule's rejections: its own
// "reject_status", else the configuration's.
func (c *Config) RejectStatusOf(r *Rule) int {
	if r.RejectStatus != 0 {
		return r.RejectStatus
	}
	return c.RejectStatus
}

// LimitsNothing reports whether action is one of a rule without an
// algorithm: exempt, unlimited and deny rules.
func LimitsNothing(action string) bool {
	return action == ActionExempt || action == ActionUnlimited || action == ActionDeny
}

// RejectsNothing reports whether a rule of action never rejects a
// request: exempt and unlimited rules (no rejection body applies).
func RejectsNothing(action string) bool {
	return action == ActionExempt || action == ActionUnlimited
}

// actionRule checks an exempt, unlimited or deny rule: it limits nothing, so it takes
// none of a limit rule's fields.
func (p *parser) actionRule(path string, f map[string]*jvalue, r *Rule) {
	for _, name := range []string{"algorithm", "algorithm_config", "max_keys", "scope", "overrides", "enforce_percent"} {
		if f[name] != nil {
			p.errorf(join(path, name), "does not apply to an ", strconv.Quote(r.Action), ` rule, which limits nothing; remove it (or use "action": "limit")`)
		}
	}
	r.MaxKeys = 0
}

// overrides parses a limit rule's "overrides"; cfg is the rule's
// algorithm_config, already parsed into r.
func (p *parser) overrides(path string, v *jvalue, r *Rule, cfg *jvalue) []Override {
	switch {
	case v.kind != jArray:
		p.errorf(path, `must be an array such as [{"key": "customer-42", "algorithm_config": {"tokens_per_second": 50, "burst": 100}}], got `, v.kind.String())
		return nil
	case len(v.arr) > MaxOverrides:
		p.errorf(path, "has ", strconv.Itoa(len(v.arr)), " entries; at most ", strconv.Itoa(MaxOverrides), " are allowed per rule")
		return nil
	case cfg == nil || (r.TokenBucket == nil && r.Window == nil && r.Quota == nil):
		return nil // the rule's algorithm_config is missing or invalid: reported already
	}
	allowed := overrideFieldsFor(r.Algorithm)
	out := make([]Override, 0, len(v.arr))
	seen := make(map[string]int, len(v.arr))
	for i, ov := range v.arr {
		o, ok := fastOverride(ov, r, len(r.Keys))
		if _, dup := seen[o.Key]; ok && !dup {
			seen[o.Key] = i
		} else { // something is wrong with this entry: the full checks say what
			o, ok = p.override(path, i, ov, r, cfg, allowed, seen)
		}
		if ok && p.globalOverride(index(path, i), r, &o) {
			out = append(out, o)
		}
	}
	return out
}

// globalOverride applies to an override of a global rule the checks of
// its rule's limits (checkScopeAlgorithm): the rate limit service counts a
// global window in whole requests. True when o may be used.
func (p *parser) globalOverride(path string, r *Rule, o *Override) bool {
	if !r.Global {
		return true
	}
	before := len(p.errs)
	cfgPath := join(path, "algorithm_config")
	switch {
	case o.Window != nil:
		p.checkGlobalCount(join(cfgPath, "limit"), o.Window.Limit)
		if o.Window.MaxPerPeriod > 0 {
			p.checkGlobalCount(join(cfgPath, "max_per_period"), o.Window.MaxPerPeriod)
		}
	case o.Quota != nil:
		p.checkGlobalCount(join(cfgPath, "limit"), o.Quota.Limit)
	}
	return len(p.errs) == before
}

// override checks one entry of "overrides" fully, reporting every problem
// with its path; seen maps the keys so far to their index.
func (p *parser) override(path string, i int, ov *jvalue, r *Rule, cfg *jvalue, allowed []string, seen map[string]int) (Override, bool) {
	opath := index(path, i)
	if ov.kind != jObject {
		p.errorf(opath, `must be an object such as {"key": "customer-42", "algorithm_config": {...}}, got `, ov.kind.String())
		return Override{}, false
	}
	before := len(p.errs)
	f := p.object(opath, ov, overrideFields)
	o := Override{}
	kpath := join(opath, "key")
	switch kv := f["key"]; {
	case kv == nil:
		p.errorf(kpath, "missing; give the identity as the rule builds it from its limit_keys (values joined with |)")
	case kv.kind != jString:
		p.errorf(kpath, "must be a string (the identity as the rule builds it from its limit_keys), got ", kv.kind.String())
	default:
		if msg := checkOverrideKey(kv.s, len(r.Keys)); msg != "" {
			p.errorf(kpath, msg)
		} else if j, dup := seen[kv.s]; dup {
			p.errorf(kpath, "duplicate key ", quoteShort(kv.s), " (also at ", index(path, j), "); give each identity once")
		} else {
			seen[kv.s] = i
			o.Key = kv.s
		}
	}
	o.Bounds = p.bounds(opath, f, "override")
	if sv := f["schedule"]; sv != nil {
		o.Schedule = p.schedule(join(opath, "schedule"), sv)
	}
	cpath := join(opath, "algorithm_config")
	cv := f["algorithm_config"]
	switch {
	case cv == nil:
		p.errorf(cpath, "missing; give the identity's limits, e.g. {", strings.Join(allowed, ", "), "}")
	case cv.kind != jObject:
		p.errorf(cpath, "must be an object with some of: ", strings.Join(allowed, ", "), "; got ", cv.kind.String())
	case len(cv.obj) == 0:
		p.errorf(cpath, "is empty; set at least one of: ", strings.Join(allowed, ", "))
	default:
		if r.Quota != nil {
			cv = p.sharedQuotaFields(cpath, cv)
		}
		if p.object(cpath, cv, allowed); len(p.errs) != before {
			return o, false // a bad key or an unknown field: reported
		}
		merged := mergeConfig(cfg, cv)
		switch {
		case r.Quota != nil:
			o.Quota = p.quota(cpath, merged)
		case r.Window != nil:
			o.Window = p.window(cpath, merged, r.Algorithm)
		default:
			o.TokenBucket = p.tokenBucket(cpath, merged)
		}
		keepRuleDebt(&o, r)
	}
	return o, len(p.errs) == before
}

// bounds reads the "from" and "until" of a rule or an override (what) at
// path; a bound that is absent or wrong (reported) is 0.
func (p *parser) bounds(path string, f map[string]*jvalue, what string) Bounds {
	b := Bounds{From: p.boundTime(join(path, "from"), f["from"]), Until: p.boundTime(join(path, "until"), f["until"])}
	if b.From != 0 && b.Until != 0 && b.Until <= b.From {
		p.errorf(join(path, "until"), "must be after from (", f["from"].s, "); the ", what, " would never apply")
	}
	return b
}

// boundTime reads a "from" or "until": an RFC 3339 time, as Unix
// nanoseconds (0 when absent or wrong, which is reported).
func (p *parser) boundTime(path string, v *jvalue) int64 {
	if v == nil {
		return 0
	}
	const example = `such as "2026-12-24T18:00:00Z" or "2026-12-24T19:00:00+01:00"`
	if v.kind != jString {
		p.errorf(path, "must be an RFC 3339 time ", example, ", got ", v.kind.String())
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, v.s)
	switch {
	case err != nil:
		p.errorf(path, quoteShort(v.s), " is not an RFC 3339 time ", example)
		return 0
	case t.Year() < 1970 || t.Year() > 2200:
		p.errorf(path, quoteShort(v.s), " is out of range; give a time from 1970 to 2200")
		return 0
	}
	return t.UnixNano()
}

// keepRuleDebt gives an override the rule's max_debt, even when the rule
// leaves it at its default (the rule's burst or limit, not the override's):
// max_debt belongs to the costs, which are the rule's; the normalized form
// writes the rule's default out, so an override must read it back the same
// after a save; and the fast path (a copy of the rule's limits) and the
// filter's charge (the rule's) use it too.
func keepRuleDebt(o *Override, r *Rule) {
	switch {
	case o.Quota != nil && r.Quota != nil:
		o.Quota.MaxDebt = r.Quota.MaxDebt
	case o.TokenBucket != nil && r.TokenBucket != nil:
		o.TokenBucket.MaxDebt = r.TokenBucket.MaxDebt
	}
}

// sharedQuotaFields refuses, with a reason, the quota fields every
// identity of the rule shares: the period and time zone define the
// period's bounds, which are the rule's (its fleet windows and its
// RateLimit-Policy), and the costs are the rule's as for every algorithm.
// It returns cv without the fields it reported (a copy; cv is left as it
// is), so the generic check does not report them twice.
func (p *parser) sharedQuotaFields(path string, cv *jvalue) *jvalue {
	kept := make([]jmember, 0, len(cv.obj))
	for _, m := range cv.obj {
		switch m.key {
		case "period", "time_zone":
			p.errorf(join(path, m.key), "cannot be overridden: every identity of a quota rule shares its period and time zone; "+
				`only "limit" may differ per identity (give identities with another period a quota rule of their own before this one)`)
		case "cost_source", "fixed_cost", "default_cost", "max_debt":
			p.errorf(join(path, m.key), `cannot be overridden: the rule's costs apply to every identity; only "limit" may differ per identity`)
		default:
			kept = append(kept, m)
		}
	}
	if len(kept) == len(cv.obj) {
		return cv
	}
	return &jvalue{kind: jObject, obj: kept}
}

// OverrideFields returns the fields an override's algorithm_config may set
// on a rule of the algorithm (the admin's CSV import names its columns).
func OverrideFields(algorithm string) []string {
	return slices.Clone(overrideFieldsFor(algorithm))
}

// overrideFieldsFor returns the fields an override's algorithm_config may
// set for the algorithm.
func overrideFieldsFor(alg string) []string {
	switch alg {
	case AlgorithmFixedWindow, AlgorithmSlidingWindow:
		return windowOverrideFields
	case AlgorithmRollingWindow:
		return rollingOverrideFields
	case AlgorithmConcurrency:
		return concurrencyOverrideFields
	case AlgorithmQuota:
		return quotaOverrideFields
	}
	return tokenBucketOverrideFields
}

// mergeConfig returns the rule's algorithm_config with the override's fields
// replacing its own (tokens_per_second and its alias rps replace each other).
func mergeConfig(rule, ov *jvalue) *jvalue {
	set := make(map[string]bool, len(ov.obj)+1)
	for _, m := range ov.obj {
		set[m.key] = true
		if m.key == "rps" || m.key == "tokens_per_second" {
			set["rps"], set["tokens_per_second"] = true, true
		}
	}
	out := &jvalue{kind: jObject, obj: make([]jmember, 0, len(rule.obj)+len(ov.obj))}
	for _, m := range rule.obj {
		if !set[m.key] {
			out.obj = append(out.obj, m)
		}
	}
	out.obj = append(out.obj, ov.obj...)
	return out
}

// checkOverrideKey checks an override key against a rule with n limit keys:
// n non-empty values joined by "|", with "\", "|" and "#" inside a value
// escaped by a backslash, as the filter builds the identity.
func checkOverrideKey(k string, n int) string {
	switch {
	case k == "":
		return "is empty; give the identity as the rule builds it from its limit_keys"
	case len(k) > MaxOverrideKey:
		return "is " + strconv.Itoa(len(k)) + " bytes long; an override key may have at most " + strconv.Itoa(MaxOverrideKey)
	}
	parts, start := 1, 0
	for i := 0; i < len(k); i++ {
		switch k[i] {
		case '\\':
			if i+1 == len(k) || (k[i+1] != '\\' && k[i+1] != '|' && k[i+1] != '#') {
				return quoteShort(k) + ` has a "\" that escapes nothing; inside a value write \\, \| and \# for \, | and #`
			}
			i++
		case '#':
			return quoteShort(k) + ` contains an unescaped "#"; write \# for a # inside a value`
		case '|':
			if i == start {
				return quoteShort(k) + " has an empty value; every limit key must have a value"
			}
			parts++
			start = i + 1
		}
	}
	switch {
	case start == len(k):
		return quoteShort(k) + " has an empty value; every limit key must have a value"
	case parts != n:
		return quoteShort(k) + " has " + strconv.Itoa(parts) + " values joined by |, but the rule has " + strconv.Itoa(n) +
			" limit_keys; give one value per limit key, in order (escape a | inside a value as \\|)"
	}
	return ""
}

// fastOverride reads a well-formed override without building paths or
// field maps (a contract table has thousands); ok is false for anything
// unusual, which the full checks of overrides then report.
func fastOverride(v *jvalue, r *Rule, nkeys int) (Override, bool) {
	var o Override
	var cfg *jvalue
	if v.kind != jObject || len(v.obj) != 2 {
		return o, false
	}
	for _, m := range v.obj {
		switch {
		case m.key == "key" && m.val.kind == jString && o.Key == "":
			o.Key = m.val.s
		case m.key == "algorithm_config" && m.val.kind == jObject && cfg == nil:
			cfg = m.val
		default:
			return o, false
		}
	}
	if cfg == nil || len(cfg.obj) == 0 || checkOverrideKey(o.Key, nkeys) != "" {
		return o, false
	}
	nums := [5]float64{-1, -1, -1, -1, -1} // tokens_per_second, rps, burst, limit, max_per_period
	for _, m := range cfg.obj {
		i := -1
		switch m.key {
		case "tokens_per_second":
			i = 0
		case "rps":
			i = 1
		case "burst":
			i = 2
		case "limit":
			i = 3
		case "max_per_period":
			i = 4
		}
		if i < 0 || nums[i] >= 0 || m.val.kind != jNumber {
			return o, false
		}
		x, err := strconv.ParseFloat(m.val.s, 64)
		if err != nil || !(x > 0) || x > MaxBurst {
			return o, false
		}
		nums[i] = x
	}
	if tb := r.TokenBucket; tb != nil {
		if nums[3] >= 0 || nums[4] >= 0 || (nums[0] >= 0 && nums[1] >= 0) {
			return o, false
		}
		t := *tb // the rule's costs, max_delay_ms, block_seconds and max_debt (keepRuleDebt)
		if nums[0] >= 0 {
			t.TokensPerSecond = nums[0]
		} else if nums[1] >= 0 {
			t.TokensPerSecond = nums[1]
		}
		if nums[2] >= 0 {
			t.Burst = nums[2]
		}
		if t.Burst < t.TokensPerSecond || t.FixedCost > t.Burst || t.DefaultCost > t.Burst {
			return o, false
		}
		o.TokenBucket = &t
		return o, true
	}
	if q := r.Quota; q != nil {
		if nums[3] < 0 || nums[0] >= 0 || nums[1] >= 0 || nums[2] >= 0 || nums[4] >= 0 {
			return o, false
		}
		c := *q // the rule's period, zone, costs and max_debt
		c.Limit = nums[3]
		if c.FixedCost > c.Limit || c.DefaultCost > c.Limit {
			return o, false
		}
		o.Quota = &c
		return o, true
	}
	if r.Window == nil {
		return o, false
	}
	w := *r.Window
	if nums[0] >= 0 || nums[1] >= 0 || nums[2] >= 0 || (nums[4] >= 0 && r.Algorithm != AlgorithmRollingWindow) {
		return o, false
	}
	if nums[3] >= 0 {
		w.Limit = nums[3]
	}
	if r.Algorithm == AlgorithmConcurrency && !validConcurrencyLimit(w.Limit) {
		return o, false // the parser says why
	}
	if nums[4] >= 0 {
		w.MaxPerPeriod = nums[4]
	}
	capacity := w.Limit
	if w.MaxPerPeriod > 0 {
		capacity = w.MaxPerPeriod
	}
	if w.MaxPerPeriod > w.Limit || w.FixedCost > capacity || w.DefaultCost > capacity {
		return o, false
	}
	o.Window = &w
	return o, true
}
