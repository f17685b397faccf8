// Package fleet is the admin's side of Sluice's fleet mode: rules with
// "scope": "global" hold one limit across every Envoy connected to the same
// backend. The admin serves Envoy's rate limit service API v3
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over gRPC;
// the plugins lease tokens from it, and it keeps the buckets in Redis
// (admin/fleet/redisgcra), so any number of admin replicas can serve the
// same fleet. See docs/fleet.md for the protocol.
package fleet

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/shared/policy"
)

// ScopeGlobal is the rule option "scope" that makes a rule fleet-wide.
const ScopeGlobal = "global"

// Rules looks up the limit of a global rule by name in the current policy.
type Rules interface {
	GlobalLimit(rule string) (redisgcra.Limit, bool)
}

// PolicyRules follows the admin's current policy: it sits in the chain of
// policies.Publisher and keeps the global token-bucket rules of the last
// published version.
type PolicyRules struct {
	cur atomic.Pointer[ruleSet]
}

type ruleSet struct {
	version int64
	limits  map[string]redisgcra.Limit
	names   []string // in policy order, for the dashboard
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
	limits, names := GlobalRules(doc)
	p.cur.Store(&ruleSet{version: version, limits: limits, names: names})
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

// ruleDoc is the part of a stored (normalized) policy this package reads.
// The admin stores only documents that shared/policy.Parse accepted, so
// this decoder can be lenient: it reads "scope" without depending on the
// parser's Rule type, and skips what it does not know.
type ruleDoc struct {
	Policies []struct {
		Rules []struct {
			Name      string `json:"name"`
			Scope     string `json:"scope"`
			Algorithm string `json:"algorithm"`
			Config    *struct {
				TokensPerSecond float64 `json:"tokens_per_second"`
				Burst           float64 `json:"burst"`
			} `json:"algorithm_config"`
		} `json:"rules"`
	} `json:"policies"`
}

// GlobalRules returns the global token-bucket rules of a policy document
// by name, and their names in order. A document it cannot read has none.
func GlobalRules(doc []byte) (map[string]redisgcra.Limit, []string) {
	var d ruleDoc
	limits := map[string]redisgcra.Limit{}
	var names []string
	if json.Unmarshal(doc, &d) != nil {
		return limits, nil
	}
	for _, p := range d.Policies {
		for _, r := range p.Rules {
			if r.Scope != ScopeGlobal || r.Algorithm != policy.AlgorithmTokenBucket || r.Config == nil {
				continue
			}
			l := redisgcra.Limit{Rate: r.Config.TokensPerSecond, Burst: r.Config.Burst}
			if _, dup := limits[r.Name]; dup || !l.Valid() {
				continue
			}
			limits[r.Name] = l
			names = append(names, r.Name)
		}
	}
	return limits, names
}

// StaticRules is a fixed rule table (tests, benchmarks).
type StaticRules struct {
	mu     sync.RWMutex
	Limits map[string]redisgcra.Limit
}

// GlobalLimit implements Rules.
func (s *StaticRules) GlobalLimit(rule string) (redisgcra.Limit, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	l, ok := s.Limits[rule]
	return l, ok
}
