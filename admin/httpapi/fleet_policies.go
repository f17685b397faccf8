package httpapi

import (
	"context"
	"sync"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/shared/policy"
)

// fleetPolicyInfo is what the Global rules section needs of a policy
// version: its global rules and limits, and what its plugins do with the
// backend down.
type fleetPolicyInfo struct {
	limits map[string]fleet.Limit
	names  []string // in policy order
	mode   string   // on_backend_down; "" without a fleet block
}

// maxFleetPolicies bounds the cache: the versions the nodes run are few.
const maxFleetPolicies = 32

// fleetPolicyCache reads and parses each version once: versions never
// change, so the cache is exact, and a dashboard render (every second per
// viewer) costs no database read.
type fleetPolicyCache struct {
	mu        sync.Mutex
	byVersion map[int64]fleetPolicyInfo
}

// get returns version's info; empty for version 0 (a configuration that
// is not a saved version) or when the version cannot be read (not cached:
// the next render tries again).
func (c *fleetPolicyCache) get(ctx context.Context, p Policies, version int64) fleetPolicyInfo {
	if version <= 0 {
		return fleetPolicyInfo{}
	}
	c.mu.Lock()
	info, ok := c.byVersion[version]
	c.mu.Unlock()
	if ok {
		return info
	}
	v, err := p.Get(ctx, version)
	if err != nil {
		return fleetPolicyInfo{}
	}
	info = parseFleetPolicy(v.JSON)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byVersion == nil || len(c.byVersion) >= maxFleetPolicies {
		c.byVersion = map[int64]fleetPolicyInfo{}
	}
	c.byVersion[version] = info
	return info
}

func parseFleetPolicy(doc []byte) fleetPolicyInfo {
	info := fleetPolicyInfo{}
	info.limits, info.names = fleet.GlobalRules(doc)
	if cfg, err := policy.Parse(doc); err == nil && cfg != nil && cfg.Fleet != nil {
		info.mode = cfg.Fleet.OnBackendDown
	}
	return info
}
