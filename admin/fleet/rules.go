// Package fleet is the admin's side of Sluice's fleet mode: rules with
// "scope": "global" hold one limit across every Envoy connected to the same
// backend. The admin serves Envoy's rate limit service API v3
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over gRPC;
// the plugins lease tokens from it, and it keeps the buckets in Redis
// (admin/fleet/redisgcra) or PostgreSQL (admin/fleet/pggcra), so any
// number of admin replicas can serve the same fleet. See docs/fleet.md for the protocol.
package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// Limit is a global rule's rate and burst (the GCRA parameters of the
// Redis backend, which the PostgreSQL backend shares). Packages above
// fleet name it through here rather than importing a backend.
type Limit = redisgcra.Limit

// Rules looks up the limit of a global rule by name in the current policy.
type Rules interface {
	GlobalLimit(rule string) (redisgcra.Limit, bool)
}

// WindowRules is implemented by Rules that also hold global fixed windows
// and quotas (PolicyRules, StaticRules): the server counts them in window
// counters (Window).
type WindowRules interface {
	GlobalWindow(rule string) (Window, bool)
}

// IdentityRules is implemented by Rules that hold per-identity overrides
// of global rules (PolicyRules): the limit of one identity of a rule, by
// the sluice_id the filter sends for it, is its override's or else the
// rule's.
type IdentityRules interface {
	IdentityLimit(rule, id string, now time.Time) (redisgcra.Limit, bool)
	IdentityWindow(rule, id string, now time.Time) (Window, bool)
}

// PolicyRules follows the admin's current policy: it sits in the chain of
// policies.Publisher and keeps the global rules of the last published
// version, with their overrides.
type PolicyRules struct {
	cur atomic.Pointer[ruleSet]
}

type ruleSet struct {
	version int64
	limits  map[string]redisgcra.Limit
	windows map[string]Window
	names   []string // in policy order, for the dashboard
	// The overrides of global rules, by rule and sluice_id.
	limitOverrides  map[ruleIdentity]timed[redisgcra.Limit]
	windowOverrides map[ruleIdentity]timed[Window]
	overrideCounts  map[string]int // per rule, for the dashboard
}

// ruleIdentity names one identity of a rule: the rule's name and the
// identity's sluice_id (state.SluiceIDOfKey of an override's key).
type ruleIdentity struct{ rule, id string }

// IdentityLimit returns the rate, burst, debt and block that identity id
// (a sluice_id) of the global token-bucket rule has at now: its
// override's, if it applies then, or the rule's.
func (p *PolicyRules) IdentityLimit(rule, id string, now time.Time) (redisgcra.Limit, bool) {
	s := p.cur.Load()
	if s == nil {
		return redisgcra.Limit{}, false
	}
	if o, ok := s.limitOverrides[ruleIdentity{rule, id}]; ok && o.activeAt(now) {
		return o.v, true
	}
	l, ok := s.limits[rule]
	return l, ok
}

// IdentityWindow returns the window or quota that identity id (a
// sluice_id) of the global window or quota rule has at now: its
// override's, if it applies then, or the rule's.
func (p *PolicyRules) IdentityWindow(rule, id string, now time.Time) (Window, bool) {
	s := p.cur.Load()
	if s == nil {
		return Window{}, false
	}
	if o, ok := s.windowOverrides[ruleIdentity{rule, id}]; ok && o.activeAt(now) {
		return o.v, true
	}
	w, ok := s.windows[rule]
	return w, ok
}

// timed is an override's limit with the override, which says when it
// applies (its bounds and weekly schedule: policy.Override.AppliesAt).
type timed[T any] struct {
	v  T
	ov *policy.Override
}

func (t timed[T]) activeAt(now time.Time) bool { return t.ov.AppliesAt(now.UnixNano()) }

// GlobalWindow returns the global fixed window or quota named rule in the
// current policy.
func (p *PolicyRules) GlobalWindow(rule string) (Window, bool) {
	s := p.cur.Load()
	if s == nil {
		return Window{}, false
	}
	w, ok := s.windows[rule]
	return w, ok
}

// GlobalLimit returns the rate and burst of the global token-bucket rule
// named rule in the current policy.
func (p *PolicyRules) GlobalLimit(rule string) (redisgcra.Limit, bool) {
	s := p.cur.Load()
	if s == nil {
		return redisgcra.Limit{}, false
	}
	l, ok := s.limits[rule]
	return l, ok
}

// Names returns the global rules of the current policy, in policy order.
func (p *PolicyRules) Names() []string {
	if s := p.cur.Load(); s != nil {
		return s.names
	}
	return nil
}

// Version is the policy version the rules come from (0 before the first).
func (p *PolicyRules) Version() int64 {
	if s := p.cur.Load(); s != nil {
		return s.version
	}
	return 0
}

// Set replaces the rules with those of a policy JSON document.
func (p *PolicyRules) Set(version int64, doc []byte) {
	cfg, err := policy.Parse(doc)
	if err != nil {
		cfg = nil // the admin stores only documents it accepted
	}
	limits, names := globalBuckets(cfg)
	windows, windowNames := globalWindows(cfg)
	s := &ruleSet{version: version, limits: limits, windows: windows, names: append(names, windowNames...)}
	s.limitOverrides, s.windowOverrides, s.overrideCounts = globalOverrides(cfg)
	p.cur.Store(s)
}

// Overrides returns how many overrides the global rule named rule has in
// the current policy.
func (p *PolicyRules) Overrides(rule string) int {
	if s := p.cur.Load(); s != nil {
		return s.overrideCounts[rule]
	}
	return 0
}

// globalOverrides returns the overrides of the global rules of cfg by rule
// and sluice_id, checked as the rules themselves (an override the service
// could not apply is left out: the identity keeps the rule's limit), and
// how many each rule has.
func globalOverrides(cfg *policy.Config) (map[ruleIdentity]timed[redisgcra.Limit], map[ruleIdentity]timed[Window], map[string]int) {
	limits, windows, counts := map[ruleIdentity]timed[redisgcra.Limit]{}, map[ruleIdentity]timed[Window]{}, map[string]int{}
	for _, r := range globalRulesOf(cfg) {
		counts[r.Name] = len(r.Overrides)
		for i := range r.Overrides {
			o := &r.Overrides[i]
			k := ruleIdentity{r.Name, state.SluiceIDOfKey(o.Key)}
			wr := *r // the rule with the override's limits
			switch {
			case o.TokenBucket != nil && r.TokenBucket != nil:
				// The override's rate, burst and block (the rule's when
				// it sets none: the parser fills them in), the rule's
				// debt: costs, and so how far below empty they may go,
				// are the rule's.
				l := redisgcra.Limit{Rate: o.TokenBucket.TokensPerSecond, Burst: o.TokenBucket.Burst, MaxDebt: chargeDebt(r.TokenBucket),
					BlockSeconds: o.TokenBucket.BlockSeconds}
				if l.Valid() {
					limits[k] = timed[redisgcra.Limit]{l, o}
				}
				continue
			case o.Window != nil:
				wr.Window = o.Window
			case o.Quota != nil:
				wr.Quota = o.Quota
			}
			if w, ok := windowOf(wr); ok {
				// The override's limit, the rule's debt (as for a bucket).
				w.MaxDebt = quotaDebt(r.Quota)
				windows[k] = timed[Window]{w, o}
			}
		}
	}
	return limits, windows, counts
}

// globalRulesOf lists the global rules of cfg (none for nil) in policy
// order.
func globalRulesOf(cfg *policy.Config) []*policy.Rule {
	if cfg == nil {
		return nil
	}
	var out []*policy.Rule
	for _, p := range cfg.Policies {
		for i := range p.Rules {
			if p.Rules[i].Global {
				out = append(out, &p.Rules[i])
			}
		}
	}
	return out
}

// Publisher returns a policies.Publisher that records each version and
// then hands it to next (which may be nil).
func (p *PolicyRules) Publisher(next policies.Publisher) policies.Publisher {
	return rulesPublisher{p, next}
}

type rulesPublisher struct {
	p    *PolicyRules
	next policies.Publisher
}

func (r rulesPublisher) Publish(ctx context.Context, v policies.Version) error {
	r.p.Set(v.Number, v.JSON)
	if r.next == nil {
		return nil
	}
	return r.next.Publish(ctx, v)
}

// GlobalRules returns the global token-bucket rules of a policy document
// by name, and their names in policy order, read with the same parser the
// plugin uses. A document the parser refuses has none (the admin stores
// only documents it accepted).
func GlobalRules(doc []byte) (map[string]redisgcra.Limit, []string) {
	cfg, err := policy.Parse(doc)
	if err != nil {
		cfg = nil
	}
	return globalBuckets(cfg)
}

func globalBuckets(cfg *policy.Config) (map[string]redisgcra.Limit, []string) {
	limits := map[string]redisgcra.Limit{}
	var names []string
	for _, r := range globalRulesOf(cfg) {
		if r.TokenBucket == nil {
			continue
		}
		l := redisgcra.Limit{Rate: r.TokenBucket.TokensPerSecond, Burst: r.TokenBucket.Burst, MaxDebt: chargeDebt(r.TokenBucket),
			BlockSeconds: r.TokenBucket.BlockSeconds}
		if !l.Valid() {
			continue
		}
		limits[r.Name] = l
		names = append(names, r.Name)
	}
	return limits, names
}

// chargeDebt is the debt a charge may take a global token bucket into:
// its max_debt when its costs are read from the response (the plugin then
// charges them after the fact), else 0 (a charge empties it at most).
func chargeDebt(tb *policy.TokenBucket) float64 {
	if !tb.Cost.FromResponse() {
		return 0
	}
	return tb.MaxDebt
}

// GlobalWindows returns the global window and quota rules of a
// policy document by name, and their names in policy order (none for a
// document the parser refuses).
func GlobalWindows(doc []byte) (map[string]Window, []string) {
	cfg, err := policy.Parse(doc)
	if err != nil {
		cfg = nil
	}
	return globalWindows(cfg)
}

func globalWindows(cfg *policy.Config) (map[string]Window, []string) {
	windows := map[string]Window{}
	var names []string
	for _, r := range globalRulesOf(cfg) {
		if w, ok := windowOf(*r); ok {
			windows[r.Name] = w
			names = append(names, r.Name)
		}
	}
	return windows, names
}

// StaticRules is a fixed rule table (tests, benchmarks).
type StaticRules struct {
	mu      sync.RWMutex
	Limits  map[string]redisgcra.Limit
	Windows map[string]Window
}

// GlobalWindow implements WindowRules.
func (s *StaticRules) GlobalWindow(rule string) (Window, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w, ok := s.Windows[rule]
	return w, ok
}

// GlobalLimit implements Rules.
func (s *StaticRules) GlobalLimit(rule string) (redisgcra.Limit, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.Limits[rule]
	return l, ok
}
