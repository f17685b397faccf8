package httpapi

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/shared/policy"
)

// versionFacts is what the dashboard needs of a policy version: for the
// Global rules section its global rules and limits, and what its plugins
// do with the backend down; for the rule cards, its rules for a time.
type versionFacts struct {
	limits map[string]fleet.Limit
	names  []string // in policy order
	mode   string   // on_backend_down; "" without a fleet block
	timed  map[string]*policy.Rule
}

// maxCachedVersions bounds the cache: the versions the nodes run are few.
const maxCachedVersions = 32

// versionFactsCache reads and parses each version once: versions never
// change, so the cache is exact, and a dashboard render (every second per
// viewer) costs no database read.
type versionFactsCache struct {
	mu        sync.Mutex
	byVersion map[int64]versionFacts
}

// get returns version's info; empty for version 0 (a configuration that
// is not a saved version) or when the version cannot be read (not cached:
// the next render tries again).
func (c *versionFactsCache) get(ctx context.Context, p Policies, version int64) versionFacts {
	if version <= 0 {
		return versionFacts{}
	}
	c.mu.Lock()
	info, ok := c.byVersion[version]
	c.mu.Unlock()
	if ok {
		return info
	}
	v, err := p.Get(ctx, version)
	if err != nil {
		return versionFacts{}
	}
	info = parseVersionFacts(v.JSON)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byVersion == nil || len(c.byVersion) >= maxCachedVersions {
		c.byVersion = map[int64]versionFacts{}
	}
	c.byVersion[version] = info
	return info
}

func parseVersionFacts(doc []byte) versionFacts {
	info := versionFacts{}
	info.limits, info.names = fleet.GlobalRules(doc)
	cfg, err := policy.Parse(doc)
	if err != nil || cfg == nil {
		return info
	}
	if cfg.Fleet != nil {
		info.mode = cfg.Fleet.OnBackendDown
	}
	for _, p := range cfg.Policies {
		for i := range p.Rules {
			if r := &p.Rules[i]; r.Timed() {
				if info.timed == nil {
					info.timed = map[string]*policy.Rule{}
				}
				info.timed[r.Name] = r
			}
		}
	}
	return info
}

// ruleTimeText says when a rule for a time applies, for its card, and
// whether it does at now: a rule with no traffic outside its time is not
// a rule that is broken.
func ruleTimeText(r *policy.Rule, now time.Time) (string, bool) {
	ns := now.UnixNano()
	var parts []string
	switch b := r.Bounds; {
	case b.From != 0 && ns < b.From:
		parts = append(parts, "starts "+timeText(time.Unix(0, b.From)))
	case b.Until != 0 && ns >= b.Until:
		parts = append(parts, "ended "+timeText(time.Unix(0, b.Until)))
	case b.Until != 0:
		parts = append(parts, "until "+timeText(time.Unix(0, b.Until)))
	case b.From != 0:
		parts = append(parts, "since "+timeText(time.Unix(0, b.From)))
	}
	if s := r.Schedule; s != nil {
		start, end, in := s.Window(ns)
		switch {
		case in:
			parts = append(parts, "weekly "+s.String()+", this window until "+timeText(time.Unix(0, end)))
		default:
			parts = append(parts, "weekly "+s.String()+", the next window from "+timeText(time.Unix(0, start)))
		}
	}
	return "For a time: " + strings.Join(parts, "; "), r.AppliesAt(ns)
}
