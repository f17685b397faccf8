package httpapi

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/web"
)

// Fleet is fleet mode's rate limit service (admin/fleet.Server), for the
// dashboard's "Global rules" section.
type Fleet interface {
	Overview() fleet.Overview
}

// fleetSection merges the two views of fleet mode for the dashboard: the
// admin's RLS (s.Fleet: grants, Redis health) and the nodes' own reports
// (nodes: leases held, fallback, the backend as each node sees it). Either
// may be missing: a third-party RLS leaves only the nodes' view, nodes
// without fleet telemetry only the RLS's. nil when there is neither.
func (s *server) fleetSection(ctx context.Context, now time.Time, current int64, nodes []telemetry.NodeFleet) *web.FleetSection {
	if s.Fleet == nil && len(nodes) == 0 {
		return nil
	}
	f := &web.FleetSection{RLS: s.Fleet != nil, Telemetry: len(nodes) > 0}
	b := newFleetRules()
	if s.Fleet != nil {
		s.addRLS(f, b, now, s.Fleet.Overview())
	} else {
		// No RLS here: the rules and limits come from the current policy.
		info := s.versions.get(ctx, s.Policies, current)
		for _, name := range info.names {
			l := info.limits[name]
			b.rule(name, num(l.Rate)+"/s, burst "+num(l.Burst), true)
		}
	}
	s.addNodeViews(ctx, f, b, now, current, nodes)
	f.Rules = b.rules
	for i := range f.Rules {
		slices.SortFunc(f.Rules[i].Nodes, func(a, b web.FleetNode) int { return strings.Compare(a.ID, b.ID) })
	}
	return f
}

// addRLS fills the backend's health and each rule's grants per node from
// the admin's own rate limit service.
func (s *server) addRLS(f *web.FleetSection, b *fleetRules, now time.Time, ov fleet.Overview) {
	h := ov.Health
	f.Backend, f.Up, f.Nodes, f.Checked, f.Errors = ov.Backend, h.Up, ov.Nodes, "never", count(h.Errors)
	switch {
	case h.Checked.IsZero():
		f.Status = "not checked yet"
	case h.Up:
		f.Status = "up"
		f.Latency = strconv.FormatFloat(float64(h.Latency.Microseconds())/1000, 'f', 1, 64) + " ms"
	default:
		f.Status = "down"
	}
	if !h.Checked.IsZero() {
		f.Checked = ago(now.Sub(h.Checked))
	}
	if h.LastError != "" {
		f.LastError, f.ErrorAt = printableText(h.LastError), ago(now.Sub(h.ErrorAt))
	}
	for _, r := range ov.Rules {
		limit := "not in the current policy (limit override)"
		if r.Known {
			limit = num(r.Limit.Rate) + "/s, burst " + num(r.Limit.Burst)
		}
		if r.Overrides > 0 {
			limit += "; " + pluralCount(r.Overrides, "override")
		}
		if len(r.Usage) == 0 {
			b.rule(r.Name, limit, r.Known)
			continue
		}
		for _, u := range r.Usage {
			ri := b.add(web.FleetRule{Name: r.Name, Domain: printableText(u.Domain), Limit: limit, Known: r.Known,
				Granted: rate(u.GrantedPerSecond), Denied: rate(u.DeniedPerSecond), Returned: rate(u.ReturnedPerSecond),
				Charged: rate(u.ChargedPerSecond), Charges: u.ChargedPerSecond > 0})
			var blocked uint64
			for _, n := range u.Nodes {
				blocked += n.Blocked
			}
			if blocked > 0 {
				b.rules[ri].Blocked = pluralCount(int(blocked), "client")
			}
			for _, n := range u.Nodes {
				fn := b.node(ri, n.Node)
				fn.HasRLS, fn.LastLease, fn.Seen = true, count(n.LastLease), ago(now.Sub(n.LastSeen))
				fn.Granted, fn.Returned, fn.Denied, fn.Charged = count(n.Granted), count(n.Returned), count(n.Denied), count(n.Charged)
			}
		}
	}
}

// addNodeViews adds what each node reports holding: its lease per rule,
// whether it is in fallback and in which mode (from the policy version it
// runs), and its view of the backend. Stale nodes are shown, marked, and
// left out of the sums.
func (s *server) addNodeViews(ctx context.Context, f *web.FleetSection, b *fleetRules, now time.Time, current int64, nodes []telemetry.NodeFleet) {
	leased := map[int]float64{}
	for _, nv := range nodes {
		mode := s.versions.get(ctx, s.Policies, nv.Version).mode
		inFallback := false
		for _, r := range nv.Rules {
			ri := b.first(r.Rule)
			if ri < 0 {
				// A rule the RLS has not seen (or no RLS): known if the
				// current policy has it.
				l, known := s.versions.get(ctx, s.Policies, current).limits[r.Rule]
				limit := "not in the current policy"
				if known {
					limit = num(l.Rate) + "/s, burst " + num(l.Burst)
				}
				ri = b.rule(r.Rule, limit, known)
			}
			fn := b.node(ri, nv.Node)
			fn.HasTelemetry, fn.BackendUp, fn.Stale = true, nv.BackendHealthy, nv.Stale
			fn.Held = num(r.LeaseTokens) + " in " + pluralCount(int(r.Pools), "pool")
			fn.Reported = ago(now.Sub(nv.Reported))
			fn.Fallback = r.FallbackActive
			if r.FallbackActive {
				fn.Mode = fallbackMode(mode, nv.FleetSize)
			}
			if nv.Stale {
				continue
			}
			leased[ri] += r.LeaseTokens
			if r.FallbackActive {
				b.rules[ri].Fallback++
				inFallback = true
			}
		}
		if nv.Stale {
			continue
		}
		f.ReportingNodes++
		if !nv.BackendHealthy {
			f.NodesDown++
		}
		if inFallback {
			f.NodesFallback++
		}
	}
	for i := range b.rules {
		b.rules[i].Leased = num(leased[i])
	}
}

// fallbackMode names what a node in fallback does, from its policy's
// on_backend_down ("" when its configuration is not a saved version).
func fallbackMode(mode string, fleetSize int64) string {
	switch mode {
	case "local_share":
		return "local share (1/" + strconv.FormatInt(max(fleetSize, 1), 10) + " of the limit)"
	case "":
		return "mode unknown"
	}
	return mode
}

// fleetRules collects the section's rules in order, with their nodes,
// addressed by index (the slice grows as rules are found).
type fleetRules struct {
	rules []web.FleetRule
	nodes []map[string]int // per rule: raw node id -> index in Nodes
}

func newFleetRules() *fleetRules { return &fleetRules{} }

// rule adds a rule without RLS use.
func (b *fleetRules) rule(name, limit string, known bool) int {
	return b.add(web.FleetRule{Name: name, Limit: limit, Known: known, Granted: rate(0), Denied: rate(0), Returned: rate(0)})
}

func (b *fleetRules) add(r web.FleetRule) int {
	b.rules = append(b.rules, r)
	b.nodes = append(b.nodes, map[string]int{})
	return len(b.rules) - 1
}

// first is the index of the rule's first entry (its first domain), -1 if
// none: a node's lease is shown once per rule even when the RLS saw the
// rule in several domains.
func (b *fleetRules) first(name string) int {
	for i := range b.rules {
		if b.rules[i].Name == name {
			return i
		}
	}
	return -1
}

// node returns rule ri's row for a node, added if missing; the pointer is
// valid until the rule's next node is added.
func (b *fleetRules) node(ri int, rawID string) *web.FleetNode {
	r := &b.rules[ri]
	if i, ok := b.nodes[ri][rawID]; ok {
		return &r.Nodes[i]
	}
	id := printableText(rawID)
	if id == "" {
		id = "(no id)"
	}
	b.nodes[ri][rawID] = len(r.Nodes)
	r.Nodes = append(r.Nodes, web.FleetNode{ID: id})
	return &r.Nodes[len(r.Nodes)-1]
}
