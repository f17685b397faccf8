package telemetry

import (
	"container/list"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// nodeFleet is the "fleet" object of a node's last report (plugin fleet
// mode). Every VM of a node reports the same process-wide view, so the
// latest report of any VM is the node's view: nothing is summed.
type nodeFleet struct {
	at             time.Time
	backendHealthy bool
	fleetSize      int64
	rules          []FleetRule
	el             *list.Element // in State.lists.fleet, in order of report
}

// NodeFleet is one node's fleet mode as its plugin last reported it.
type NodeFleet struct {
	Node           string      `json:"node"`
	Reported       time.Time   `json:"reported"`        // when the admin received the view
	Stale          bool        `json:"stale"`           // the node has not reported for 3 intervals (at least 5 s)
	Version        int64       `json:"version"`         // the policy version the node runs; 0 if none matches
	BackendHealthy bool        `json:"backend_healthy"` // the rate limit service answered the node's last call
	FleetSize      int64       `json:"fleet_size"`      // N of the node's local share
	Rules          []FleetRule `json:"rules"`           // by rule name
}

// setFleet records the fleet object of an accepted report. A report
// without one clears the node's view: its configuration has no global
// rule any more.
func (s *State) setFleet(n *node, f *Fleet, now time.Time) {
	s.dropFleet(n)
	if f == nil {
		return
	}
	rules := f.Rules
	if len(rules) > s.opts.MaxFleetRules {
		rules = rules[:s.opts.MaxFleetRules]
	}
	for s.nfleet+len(rules) > s.opts.MaxFleetRules && s.evictFleet() {
	}
	n.fleet = &nodeFleet{at: now, backendHealthy: f.BackendHealthy, fleetSize: f.FleetSize, rules: slices.Clone(rules)}
	n.fleet.el = s.lists.fleet.PushBack(n)
	s.nfleet += len(rules)
}

// dropFleet forgets a node's fleet view.
func (s *State) dropFleet(n *node) {
	if n.fleet != nil {
		s.lists.fleet.Remove(n.fleet.el)
		s.nfleet -= len(n.fleet.rules)
		n.fleet = nil
	}
}

// evictFleet forgets the least recently reported fleet view (the front of
// their list); false when there is none.
func (s *State) evictFleet() bool {
	f := s.lists.fleet.Front()
	if f == nil {
		return false
	}
	s.dropFleet(f.Value.(*node))
	return true
}

// Fleet returns the fleet views of the nodes that sent one, sorted by
// node, rules by name.
func (s *State) Fleet(now time.Time) []NodeFleet {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeSweep(now)
	return s.fleetViews(now)
}

func (s *State) fleetViews(now time.Time) []NodeFleet {
	var out []NodeFleet
	for _, n := range s.nodes {
		if n.fleet == nil {
			continue
		}
		nv := s.nodeView(n, now, 0, -1)
		rules := slices.Clone(n.fleet.rules)
		slices.SortFunc(rules, func(a, b FleetRule) int { return strings.Compare(a.Rule, b.Rule) })
		out = append(out, NodeFleet{
			Node: n.id, Reported: n.fleet.at, Stale: nv.Stale, Version: nv.Version,
			BackendHealthy: n.fleet.backendHealthy, FleetSize: n.fleet.fleetSize, Rules: rules,
		})
	}
	slices.SortFunc(out, func(a, b NodeFleet) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// The nodes' view of fleet mode in Prometheus. Series exist per node (and
// rule) while the node reports: a stale node's leases have expired or are
// about to, so its series go at once rather than with the node.
var (
	descFleetLease = prometheus.NewDesc("sluice_fleet_lease_tokens",
		"Tokens the node holds in leases of the global rule (its hot pools), as its plugin last reported.", []string{"rule", "node"}, nil)
	descFleetPools = prometheus.NewDesc("sluice_fleet_lease_pools",
		"Pools (keys) of the global rule the node's plugin holds leases for.", []string{"rule", "node"}, nil)
	descFleetFallback = prometheus.NewDesc("sluice_fleet_fallback_active",
		"1 when the node serves the global rule without the rate limit service (backend down, or a pool on its local share).", []string{"rule", "node"}, nil)
	descFleetBackend = prometheus.NewDesc("sluice_fleet_plugin_backend_up",
		"1 when the rate limit service answered the node's last call, as the node's plugin sees it.", []string{"node"}, nil)
	descFleetSize = prometheus.NewDesc("sluice_fleet_plugin_fleet_size",
		"N of the node's local share (fleet_size configured, else reported by the rate limit service, else 1).", []string{"node"}, nil)
)

func describeFleet(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFleetLease, descFleetPools, descFleetFallback, descFleetBackend, descFleetSize} {
		ch <- d
	}
}

func collectFleet(ch chan<- prometheus.Metric, fleet []NodeFleet) {
	for _, nf := range fleet {
		if nf.Stale {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descFleetBackend, prometheus.GaugeValue, boolGauge(nf.BackendHealthy), nf.Node)
		ch <- prometheus.MustNewConstMetric(descFleetSize, prometheus.GaugeValue, float64(nf.FleetSize), nf.Node)
		for _, r := range nf.Rules {
			ch <- prometheus.MustNewConstMetric(descFleetLease, prometheus.GaugeValue, r.LeaseTokens, r.Rule, nf.Node)
			ch <- prometheus.MustNewConstMetric(descFleetPools, prometheus.GaugeValue, float64(r.Pools), r.Rule, nf.Node)
			ch <- prometheus.MustNewConstMetric(descFleetFallback, prometheus.GaugeValue, boolGauge(r.FallbackActive), r.Rule, nf.Node)
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
