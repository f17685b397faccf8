package fleet

import "github.com/sluice-rl/sluice/admin/fleet/redisgcra"

// RuleLister is implemented by Rules that can list their global rules
// (PolicyRules): the dashboard then shows rules nobody has used yet.
type RuleLister interface {
	Names() []string
}

// OverrideCounter is implemented by Rules that know how many overrides
// each global rule has (PolicyRules).
type OverrideCounter interface {
	Overrides(rule string) int
}

// Overview is what the dashboard shows of fleet mode.
type Overview struct {
	Backend string // where the buckets are, for people: "redis 10.0.0.7:6379"
	Health  Health
	Nodes   int // distinct nodes seen in the last NodeWindow, all domains
	Rules   []RuleOverview
}

// RuleOverview is one global rule: its limit and its use in each domain.
type RuleOverview struct {
	Name  string
	Limit redisgcra.Limit
	Known bool // in the current policy (else only seen in calls)
	// Overrides is the number of identities with limits of their own.
	Overrides int
	Usage     []RuleUsage // per domain; empty when unused recently
}

// Overview returns the rules of the current policy with their recent use,
// and the backend's health.
func (s *Server) Overview() Overview {
	o := Overview{Backend: s.backendName, Health: s.Health(), Nodes: s.fleet.nodeCount()}
	byName := map[string]int{}
	if rl, ok := s.rules.(RuleLister); ok {
		for _, name := range rl.Names() {
			l, known := s.globalLimit(name)
			byName[name] = len(o.Rules)
			o.Rules = append(o.Rules, RuleOverview{Name: name, Limit: l, Known: known})
		}
	}
	if oc, ok := s.rules.(OverrideCounter); ok {
		for i := range o.Rules {
			o.Rules[i].Overrides = oc.Overrides(o.Rules[i].Name)
		}
	}
	for _, u := range s.Usage() {
		i, ok := byName[u.Rule]
		if !ok {
			l, known := s.globalLimit(u.Rule)
			i = len(o.Rules)
			byName[u.Rule] = i
			o.Rules = append(o.Rules, RuleOverview{Name: u.Rule, Limit: l, Known: known})
		}
		o.Rules[i].Usage = append(o.Rules[i].Usage, u)
	}
	return o
}

// globalLimit is a rule's limit for the dashboard: a token bucket's, or a
// window's as a rate (its limit per window, burst the whole limit).
func (s *Server) globalLimit(rule string) (redisgcra.Limit, bool) {
	if l, ok := s.rules.GlobalLimit(rule); ok {
		return l, true
	}
	if wr, ok := s.rules.(WindowRules); ok {
		if w, ok := wr.GlobalWindow(rule); ok {
			return redisgcra.Limit{Rate: float64(w.Limit) / float64(w.length()), Burst: float64(w.Limit)}, true
		}
	}
	return redisgcra.Limit{}, false
}
