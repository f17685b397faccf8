package telemetry

import (
	"container/list"
	"encoding/json"
	"time"
)

// The telemetry state is bounded in total by Options.MaxBytes: every node,
// VM, (VM, rule) baseline, (rule, node) series and rule is charged an
// estimate of the bytes it keeps (below) when it is created and refunded
// when it goes. A new item that does not fit is refused, unless an item
// idle for IdleAfter can be forgotten to make room: items in use always
// keep updating, and a flood of new nodes, VMs or rule names can neither
// grow the heap past the budget nor push out what is reporting.
//
// Nodes, VMs, series and rules are each kept in a list in order of last
// report (oldest at the front), so the oldest of each kind is found in
// O(1): making room and expiring never scan the state.

// IdleAfter is how long an item must have gone without a report before it
// may be forgotten to make room for a new one (the count bounds and the
// byte budget).
const IdleAfter = 30 * time.Second

// refusalLogEvery spaces the log lines about refused items.
const refusalLogEvery = time.Minute

// The estimated bytes each item keeps: generous upper bounds of the Go
// structures, map entries (at their worst load) and list elements.
const (
	costNode   = 640 // node struct, its two maps' headers, map entry, list element
	costVM     = 320 // vmState, its counters map header, map entry, list element
	costVMRule = 160 // one (VM, rule) baseline: a map entry of a string and a vmRule, at worst load
	costSeries = 224 // series struct, map entry, list element (plus its ring)
	costRule   = 256 // ruleAgg, map entry, list element (plus its rings and name)
	costRing   = 320 // a ring's header and its slots' rounding to a size class (plus 24 bytes a second)
)

// ringCost is the estimated size of one ring of seconds slots.
func ringCost(seconds int) int64 { return costRing + 24*int64(seconds) }

// What could be refused, the values of sluice_telemetry_refused_total's
// "what" label.
const (
	RefusedNode = iota // a node never seen
	RefusedVM          // a VM never seen of a known node
	RefusedRule        // a rule of a VM whose counts could not be kept (its baseline, series or rule)
	numRefused
)

var refusedNames = [numRefused]string{"node", "vm", "rule"}

// Refusals counts what the bounds refused, by kind.
type Refusals [numRefused]uint64

// Total is every refusal.
func (r Refusals) Total() uint64 { return satSum(r[:]...) }

// kindLists holds each kind of item in order of last report.
type kindLists struct {
	nodes, vms, series, rules list.List
	fleet                     list.List // nodes with a fleet view, by the view's report
}

func (k *kindLists) init() {
	k.fleet.Init()
	k.nodes.Init()
	k.vms.Init()
	k.series.Init()
	k.rules.Init()
}

// lastOf is when an item of the lists last reported.
func lastOf(e *list.Element) time.Time {
	switch v := e.Value.(type) {
	case *node:
		return v.last
	case *vmState:
		return v.last
	case *series:
		return v.last
	case *ruleAgg:
		return v.last
	}
	return time.Time{}
}

// idle tells whether the item at e (nil: none) may be forgotten at now.
func idle(e *list.Element, now time.Time) bool {
	return e != nil && now.Sub(lastOf(e)) >= IdleAfter
}

// charge takes cost bytes from the budget, first forgetting idle items
// while it does not fit; false (nothing charged) when it still does not.
func (s *State) charge(cost int64, now time.Time) bool {
	for s.used+cost > s.opts.MaxBytes {
		if !s.forgetIdlest(now) {
			return false
		}
	}
	s.used += cost
	return true
}

// forgetIdlest forgets the item reported least recently, of any kind, if
// it is idle.
func (s *State) forgetIdlest(now time.Time) bool {
	var oldest *list.Element
	for _, l := range []*list.List{&s.lists.nodes, &s.lists.vms, &s.lists.series, &s.lists.rules} {
		if f := l.Front(); f != nil && (oldest == nil || lastOf(f).Before(lastOf(oldest))) {
			oldest = f
		}
	}
	if !idle(oldest, now) {
		return false
	}
	s.forget(oldest)
	return true
}

// forget drops the item at e.
func (s *State) forget(e *list.Element) {
	switch v := e.Value.(type) {
	case *node:
		s.dropNode(v)
	case *vmState:
		s.dropVM(v)
	case *series:
		s.dropSeries(v)
	case *ruleAgg:
		s.dropRule(v)
	}
	s.gen++
}

func (s *State) dropNode(n *node) {
	for _, vm := range n.vms {
		s.dropVM(vm)
	}
	for _, se := range n.series {
		s.dropSeries(se)
	}
	s.dropFleet(n)
	s.lists.nodes.Remove(n.el)
	delete(s.nodes, n.id)
	s.used -= n.cost
}

func (s *State) dropVM(vm *vmState) {
	s.lists.vms.Remove(vm.el)
	delete(vm.node.vms, vm.id)
	s.used -= vm.cost
}

func (s *State) dropSeries(se *series) {
	s.lists.series.Remove(se.el)
	delete(se.node.series, se.rule)
	s.nseries--
	s.used -= se.cost
}

func (s *State) dropRule(ra *ruleAgg) {
	s.lists.rules.Remove(ra.el)
	delete(s.rules, ra.name)
	s.used -= ra.cost
}

// refuse counts a refused item and logs it, at most once a minute.
func (s *State) refuse(what int, now time.Time) {
	s.refused[what]++
	if now.Unix() != s.lastRefused.Unix() {
		s.gen++ // the dashboard's notice changes (at most once a second)
	}
	s.lastRefused = now
	if s.opts.Logger == nil || (!s.lastRefusalLog.IsZero() && now.Sub(s.lastRefusalLog) < refusalLogEvery && !now.Before(s.lastRefusalLog)) {
		return
	}
	var since Refusals
	for i := range since {
		since[i] = s.refused[i] - s.loggedRefused[i]
	}
	s.lastRefusalLog, s.loggedRefused = now, s.refused
	s.opts.Logger.Warn("telemetry bounds reached: new nodes, VMs or rules are refused while the ones reporting keep updating; raise -telemetry-max-bytes if this is real traffic",
		"refused_nodes", since[RefusedNode], "refused_vms", since[RefusedVM], "refused_rules", since[RefusedRule],
		"used_bytes", s.used, "max_bytes", s.opts.MaxBytes, "nodes", len(s.nodes), "series", s.nseries, "rules", len(s.rules))
}

// The saturating arithmetic of counters: a total stops at 2^64-1 instead
// of wrapping to a small number.

func satAdd(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return ^uint64(0)
}

func satSum(v ...uint64) uint64 {
	var s uint64
	for _, x := range v {
		s = satAdd(s, x)
	}
	return s
}

// MarshalJSON writes the refusals as an object keyed by kind.
func (r Refusals) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]uint64{"node": r[RefusedNode], "vm": r[RefusedVM], "rule": r[RefusedRule]})
}
