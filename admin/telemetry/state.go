package telemetry

import (
	"container/list"
	"log/slog"
	"sync"
	"time"
)

// Options bound and tune a State. Zero values take the defaults.
type Options struct {
	// History is how far back the per-second rings reach (default 15 min).
	History time.Duration
	// MaxBytes bounds the estimated memory of the nodes, VMs, (VM, rule)
	// baselines, series and rules held (default 64 MiB; budget.go). The
	// bucket states and fleet views have their own bounds below.
	MaxBytes int64
	// MaxNodes, MaxVMsPerNode, MaxRules and MaxSeries bound what is
	// remembered. Past a bound (or MaxBytes) a new item takes the place of
	// the least recently reported one if that one has been idle for
	// IdleAfter, and is refused otherwise: what reports keeps updating.
	// Series are (rule, node) rings. Past MaxBuckets the least recently
	// reported bucket state is forgotten (bucket states come and go with
	// traffic).
	MaxNodes      int // default 1000
	MaxVMsPerNode int // default 256
	MaxRules      int // default 1000
	MaxSeries     int // default 2000
	MaxBuckets    int // default 10000
	// MaxFleetRules bounds the (rule, node) entries of the nodes' fleet
	// views (the reports' "fleet" objects, one per node); past it the
	// least recently reported node's view is forgotten (default 2000).
	MaxFleetRules int
	// NodeTTL forgets a node (and its VMs and series) not heard from for
	// that long (default 10 min). A VM not heard from for NodeTTL is
	// forgotten too.
	NodeTTL time.Duration
	// FreshVM: the first report of a VM the admin has not seen is counted
	// in full when the VM started at most this long before the report was
	// sent (default 1 min); an older VM (the admin restarted, or forgot it)
	// only sets the baseline, and its counters count from its next report.
	FreshVM time.Duration
	// Versions maps configuration hashes to policy versions (optional).
	Versions VersionLookup
	// Logger receives a warning, at most once a minute, while new items
	// are refused (optional).
	Logger *slog.Logger
	// Now is the clock of the Prometheus collector, the one reader that is
	// not handed the time (default time.Now).
	Now func() time.Time
}

// VersionLookup maps the config_hash of a report to the policy version
// with that configuration (VersionIndex implements it).
type VersionLookup interface {
	Lookup(hash string) (version int64, ok bool)
}

// Defaults.
const (
	DefaultHistory    = 15 * time.Minute
	DefaultMaxBytes   = 64 << 20
	DefaultMaxNodes   = 1000
	DefaultMaxVMs     = 256
	DefaultMaxRules   = 1000
	DefaultMaxSeries  = 2000
	DefaultMaxBuckets = 10000
	DefaultMaxFleet   = 2000
	DefaultNodeTTL    = 10 * time.Minute
	DefaultFreshVM    = time.Minute

	// sweepEvery is how often expired nodes, VMs, series and buckets are
	// dropped (piggybacked on Ingest and Overview).
	sweepEvery = 5 * time.Second
)

func (o *Options) fill() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	defd(&o.History, DefaultHistory)
	if o.History < time.Minute {
		o.History = time.Minute
	}
	def(&o.MaxNodes, DefaultMaxNodes)
	def(&o.MaxVMsPerNode, DefaultMaxVMs)
	def(&o.MaxRules, DefaultMaxRules)
	def(&o.MaxSeries, DefaultMaxSeries)
	def(&o.MaxBuckets, DefaultMaxBuckets)
	def(&o.MaxFleetRules, DefaultMaxFleet)
	defd(&o.NodeTTL, DefaultNodeTTL)
	defd(&o.FreshVM, DefaultFreshVM)
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Result is what Ingest did with a report.
type Result int

const (
	// Accepted: the report's deltas and buckets were applied.
	Accepted Result = iota
	// Duplicate: the VM already sent a report with this seq or a later one
	// (a retry, or reordered delivery); nothing was applied.
	Duplicate
	// Refused: the report's node or VM is new and the state is full of
	// items that report (the bounds, MaxBytes); nothing was applied.
	Refused
)

func (r Result) String() string {
	switch r {
	case Duplicate:
		return "duplicate"
	case Refused:
		return "refused"
	}
	return "accepted"
}

// State is the admin's in-memory view of the telemetry. It is safe for
// concurrent use.
type State struct {
	opts    Options
	seconds int

	mu        sync.Mutex
	nodes     map[string]*node
	rules     map[string]*ruleAgg
	nseries   int
	nfleet    int // (rule, node) entries of the nodes' fleet views
	buckets   buckets
	lastSweep time.Time
	gen       uint64 // changes with every applied report or sweep
	accepted  uint64
	dups      uint64
	rejected  uint64 // invalid reports (RecordRejected)
	evicted   uint64 // buckets evicted by the MaxBuckets bound

	used           int64     // estimated bytes held (budget.go)
	lists          kindLists // nodes, VMs, series, rules in order of last report
	refused        Refusals
	lastRefused    time.Time // the last refusal
	lastRefusalLog time.Time
	loggedRefused  Refusals // refused as of the last log line

	cache  overviewCache
	search searchCache
}

type node struct {
	id         string
	el         *list.Element // in State.lists.nodes
	cost       int64         // its own bytes (its VMs and series are charged apart)
	first      time.Time
	last       time.Time
	intervalMS int64
	configHash string
	vms        map[string]*vmState
	series     map[string]*series // by rule
	received   uint64
	duplicates uint64
	rejected   uint64
	dropped    uint64     // reports the plugin failed to deliver (sum of deltas)
	fleet      *nodeFleet // the last report's "fleet" object (fleetstate.go)
}

type vmState struct {
	id          string
	node        *node
	el          *list.Element // in State.lists.vms
	cost        int64         // bytes, its baselines included
	refused     bool          // a rule of it was refused: a rule it has no baseline for only sets one
	startMS     int64
	seq         uint64
	last        time.Time
	counters    map[string]vmRule // rule -> its numbers in the last report
	dropped     uint64            // last cumulative reports_dropped
	overflowing bool              // some rule of the last report has overflow_identities > 0
}

// vmRule is one rule of a VM's last report.
type vmRule struct {
	c          Counts // cumulative
	overflowed uint64 // cumulative
	identities uint64 // overflow_identities: a gauge
	mark       uint64 // the report that carried it last (State.accepted then)
	acts       Actions
	resp       ResponseCosts
}

// restarted tells whether a cumulative counter went down since prev: the
// VM's counters started again from zero.
func (v *vmRule) restarted(prev *vmRule) bool {
	for k := range v.c {
		if v.c[k] < prev.c[k] {
			return true
		}
	}
	_, respRestarted := v.resp.since(prev.resp)
	_, actsRestarted := v.acts.since(prev.acts)
	return v.overflowed < prev.overflowed || actsRestarted || respRestarted
}

// series is one rule on one node.
type series struct {
	node       *node
	rule       string
	el         *list.Element // in State.lists.series
	cost       int64
	ring       *ring
	total      Counts  // since the admin first saw it
	overflowed uint64  // requests decided by an overflow limit, since the admin first saw it
	acts       Actions // exempted, denied, overridden, key missing, since the admin first saw it
	resp       ResponseCosts
	last       time.Time
}

// ruleAgg is one rule, every node merged.
type ruleAgg struct {
	name  string
	el    *list.Element // in State.lists.rules
	cost  int64
	acts  Actions // exempted, denied, overridden since the admin first saw the rule
	resp  ResponseCosts
	ring  *ring
	total Counts
	// ovf counts the requests decided by an overflow limit per second, in
	// its Counts' first place; nil until the rule first overflows (most
	// rules never do).
	ovf      *ring
	ovfTotal uint64
	first    time.Time
	last     time.Time
}

// NewState returns an empty State.
func NewState(opts Options) *State {
	opts.fill()
	s := &State{
		opts:    opts,
		seconds: int(opts.History / time.Second),
		nodes:   map[string]*node{},
		rules:   map[string]*ruleAgg{},
	}
	s.buckets.init(opts.MaxBuckets)
	s.lists.init()
	return s
}

// Options returns the options in force (defaults filled in).
func (s *State) Options() Options { return s.opts }

// Ingest applies a validated report received at now: per-rule deltas from
// the cumulative counters, bucket states, node health. A report of a new
// node or VM that the bounds refuse changes nothing but the refusal counts
// (Refused); a new rule of a known VM that they refuse is skipped.
func (s *State) Ingest(r *Report, now time.Time) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeSweep(now)

	n := s.nodes[r.Node]
	if n == nil {
		if n = s.newNode(r.Node, now); n == nil {
			s.refuse(RefusedNode, now)
			return Refused
		}
	}
	vm := n.vms[r.VM]
	fresh := false // count the first counters in full
	switch {
	case vm == nil:
		if vm = s.newVM(n, r.VM, now); vm == nil {
			s.refuse(RefusedVM, now)
			return Refused
		}
		age := time.Duration(r.SentAtMS-r.VMStartMS) * time.Millisecond
		fresh = age <= s.opts.FreshVM
	case vm.startMS != r.VMStartMS: // the VM restarted: its counters restarted at zero
		s.used -= costVMRule * int64(len(vm.counters))
		vm.cost -= costVMRule * int64(len(vm.counters))
		clear(vm.counters)
		vm.dropped = 0
		vm.refused = false
		fresh = true
	case r.Seq <= vm.seq:
		s.touchNode(n, now)
		s.touchVM(vm, now)
		n.duplicates++
		s.dups++
		return Duplicate
	default:
		fresh = !vm.refused // known VM: a rule it has no baseline for is new, from zero
	}
	s.touchNode(n, now)
	s.touchVM(vm, now)
	n.intervalMS = r.IntervalMS
	n.configHash = r.ConfigHash
	vm.startMS, vm.seq = r.VMStartMS, r.Seq
	n.received++
	s.accepted++
	s.gen++
	mark := s.accepted

	// Reports dropped by the plugin: always counted in full (they are what
	// the admin did not see), restarts from zero.
	if r.ReportsDropped >= vm.dropped {
		n.dropped = satAdd(n.dropped, r.ReportsDropped-vm.dropped)
	} else {
		n.dropped = satAdd(n.dropped, r.ReportsDropped)
	}
	vm.dropped = r.ReportsDropped

	sec := now.Unix()
	vm.overflowing = false
	kept := 0 // baselines this report updated
	for i := range r.Rules {
		rc := &r.Rules[i]
		cur := vmRule{
			c:          Counts{rc.Allowed, rc.Rejected, rc.ShadowRejected, rc.FailOpen},
			overflowed: rc.Overflowed, identities: rc.OverflowIdentities, mark: mark,
			acts: Actions{Exempted: rc.Exempted, Denied: rc.Denied, Overridden: rc.Overridden, KeyMissing: rc.KeyMissing, Blocked: rc.Blocked},
			resp: ResponseCosts{Charged: rc.ResponseCharged, Default: rc.ResponseDefault, Invalid: rc.ResponseInvalid},
		}
		prev, known := vm.counters[rc.Rule]
		if !known && !s.charge(costVMRule, now) {
			vm.refused = true
			s.refuse(RefusedRule, now)
			continue
		}
		ra, se := s.seriesOf(n, rc.Rule, now)
		if !known {
			vm.cost += costVMRule
			if ra == nil || se == nil {
				// No place for its counts: neither for its baseline.
				s.used -= costVMRule
				vm.cost -= costVMRule
				vm.refused = true
				s.refuse(RefusedRule, now)
				continue
			}
		}
		name := rc.Rule
		if ra != nil {
			name = ra.name // one string per rule name, whatever the VMs
		}
		vm.counters[name] = cur
		kept++
		vm.overflowing = vm.overflowing || cur.identities > 0
		if ra == nil || se == nil {
			continue // its counts are lost this time; the baseline moved on
		}
		var d Counts
		var overflowed uint64
		var acts Actions
		var resp ResponseCosts
		switch {
		case !known && !fresh:
			// baseline only
		case !known || cur.restarted(&prev):
			d, overflowed, acts, resp = cur.c, cur.overflowed, cur.acts, cur.resp // new, or its counters restarted: from zero
		default:
			resp, _ = cur.resp.since(prev.resp)
			for k := range d {
				d[k] = cur.c[k] - prev.c[k]
			}
			overflowed = cur.overflowed - prev.overflowed
			acts, _ = cur.acts.since(prev.acts)
		}
		s.addDelta(ra, se, sec, now, &d, overflowed)
		ra.acts.add(acts)
		se.acts.add(acts)
		ra.resp.add(resp)
		se.resp.add(resp)
	}
	if len(vm.counters) > kept { // rules gone from the configuration
		for name, vr := range vm.counters {
			if vr.mark != mark {
				delete(vm.counters, name)
				vm.cost -= costVMRule
				s.used -= costVMRule
			}
		}
	}

	for i := range r.Buckets {
		s.buckets.put(&r.Buckets[i], r.Node, now, &s.evicted)
	}
	s.setFleet(n, r.Fleet, now)
	return Accepted
}

// newNode adds a node within the bounds; nil when they refuse it.
func (s *State) newNode(id string, now time.Time) *node {
	if len(s.nodes) >= s.opts.MaxNodes {
		if f := s.lists.nodes.Front(); !idle(f, now) {
			return nil
		} else {
			s.forget(f)
		}
	}
	cost := costNode + int64(len(id))
	if !s.charge(cost, now) {
		return nil
	}
	n := &node{id: id, cost: cost, first: now, last: now, vms: map[string]*vmState{}, series: map[string]*series{}}
	n.el = s.lists.nodes.PushBack(n)
	s.nodes[id] = n
	return n
}

// newVM adds a VM to n within the bounds; nil when they refuse it.
func (s *State) newVM(n *node, id string, now time.Time) *vmState {
	if len(n.vms) >= s.opts.MaxVMsPerNode {
		// A node's VMs are few (MaxVMsPerNode): look for its oldest.
		var oldest *vmState
		for _, vm := range n.vms {
			if oldest == nil || vm.last.Before(oldest.last) {
				oldest = vm
			}
		}
		if !idle(oldest.el, now) {
			return nil
		}
		s.forget(oldest.el)
	}
	cost := costVM + int64(len(id))
	if !s.charge(cost, now) {
		return nil
	}
	vm := &vmState{id: id, node: n, cost: cost, last: now, counters: map[string]vmRule{}}
	vm.el = s.lists.vms.PushBack(vm)
	n.vms[id] = vm
	return vm
}

// seriesOf returns the rule's aggregate and n's series of it, creating
// them within the bounds (nil for what they refuse), and marks both as
// reported at now.
func (s *State) seriesOf(n *node, rule string, now time.Time) (*ruleAgg, *series) {
	ra := s.rules[rule]
	if ra == nil {
		ra = s.newRule(rule, now)
	} else {
		ra.last = now
		s.lists.rules.MoveToBack(ra.el)
	}
	if ra == nil {
		return nil, nil
	}
	se := n.series[ra.name]
	if se == nil {
		return ra, s.newSeries(n, ra.name, now)
	}
	se.last = now
	s.lists.series.MoveToBack(se.el)
	return ra, se
}

func (s *State) newRule(name string, now time.Time) *ruleAgg {
	if len(s.rules) >= s.opts.MaxRules {
		if f := s.lists.rules.Front(); !idle(f, now) {
			return nil
		} else {
			s.forget(f)
		}
	}
	cost := costRule + int64(len(name)) + ringCost(s.seconds)
	if !s.charge(cost, now) {
		return nil
	}
	ra := &ruleAgg{name: name, cost: cost, ring: newRing(s.seconds), first: now, last: now}
	ra.el = s.lists.rules.PushBack(ra)
	s.rules[name] = ra
	return ra
}

func (s *State) newSeries(n *node, rule string, now time.Time) *series {
	if s.nseries >= s.opts.MaxSeries {
		if f := s.lists.series.Front(); !idle(f, now) {
			return nil
		} else {
			s.forget(f)
		}
	}
	cost := costSeries + ringCost(s.seconds)
	if !s.charge(cost, now) {
		return nil
	}
	se := &series{node: n, rule: rule, cost: cost, ring: newRing(s.seconds), last: now}
	se.el = s.lists.series.PushBack(se)
	n.series[rule] = se
	s.nseries++
	return se
}

func (s *State) touchNode(n *node, now time.Time) {
	n.last = now
	s.lists.nodes.MoveToBack(n.el)
}

func (s *State) touchVM(vm *vmState, now time.Time) {
	vm.last = now
	s.lists.vms.MoveToBack(vm.el)
}

// addDelta adds d (possibly zero: the rule is alive) and the requests
// decided by an overflow limit to the rule's rings.
func (s *State) addDelta(ra *ruleAgg, se *series, sec int64, now time.Time, d *Counts, overflowed uint64) {
	if overflowed > 0 {
		if ra.ovf == nil {
			if cost := ringCost(s.seconds); s.charge(cost, now) {
				ra.ovf = newRing(s.seconds)
				ra.cost += cost
			}
		}
		if ra.ovf != nil {
			ra.ovf.add(sec, &Counts{overflowed})
		}
		ra.ovfTotal = satAdd(ra.ovfTotal, overflowed)
		se.overflowed = satAdd(se.overflowed, overflowed)
	}
	if d.Sum() == 0 {
		return
	}
	ra.ring.add(sec, d)
	ra.total.add(*d)
	se.ring.add(sec, d)
	se.total.add(*d)
}

// aliveFor is how recently a VM of n must have reported to count as
// running: three intervals, at least 5 s.
func aliveFor(n *node) time.Duration {
	return max(3*time.Duration(n.intervalMS)*time.Millisecond, 5*time.Second)
}

// overflowIdentities calls f with each rule of n that has identities
// sharing an overflow limit: the most any running VM of n saw in its last
// report (VMs share nothing, so the largest is the best estimate).
func overflowIdentities(n *node, now time.Time, f func(rule string, identities uint64)) {
	var most map[string]uint64
	alive := aliveFor(n)
	for _, vm := range n.vms {
		if !vm.overflowing || now.Sub(vm.last) > alive {
			continue
		}
		for rule, vr := range vm.counters {
			if vr.identities > most[rule] {
				if most == nil {
					most = map[string]uint64{}
				}
				most[rule] = vr.identities
			}
		}
	}
	for rule, k := range most {
		f(rule, k)
	}
}

// RecordRejected counts a report refused as invalid. node is the report's
// node field if it could be read ("" otherwise); only a node already known
// is charged, so invalid reports cannot create nodes.
func (s *State) RecordRejected(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected++
	if n := s.nodes[node]; n != nil {
		n.rejected++
		s.gen++
	}
}

// Sweep drops what expired at now. Ingest and Overview call it every few
// seconds; tests call it directly.
func (s *State) Sweep(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
}

func (s *State) maybeSweep(now time.Time) {
	if now.Sub(s.lastSweep) >= sweepEvery || now.Before(s.lastSweep) {
		s.sweep(now)
	}
}

func (s *State) sweep(now time.Time) {
	s.lastSweep = now
	nodeCut := now.Add(-s.opts.NodeTTL)
	histCut := now.Add(-s.opts.History)
	changed := false
	expire := func(l *list.List, cut time.Time) {
		for f := l.Front(); f != nil && lastOf(f).Before(cut); f = l.Front() {
			s.forget(f)
			changed = true
		}
	}
	expire(&s.lists.nodes, nodeCut)
	expire(&s.lists.vms, nodeCut)
	expire(&s.lists.series, histCut)
	expire(&s.lists.rules, histCut)
	if s.buckets.expire(histCut) > 0 {
		changed = true
	}
	if changed {
		s.gen++
	}
}

// Stats are the state's counters and sizes.
type Stats struct {
	Accepted       uint64 `json:"reports_accepted"`
	Duplicates     uint64 `json:"reports_duplicate"`
	Rejected       uint64 `json:"reports_rejected"` // invalid
	Nodes          int    `json:"nodes"`
	VMs            int    `json:"vms"`
	Rules          int    `json:"rules"`
	Series         int    `json:"series"` // (rule, node) pairs
	Buckets        int    `json:"buckets"`
	BucketsEvicted uint64 `json:"buckets_evicted"`
	// UsedBytes is the estimated memory held by the nodes, VMs, baselines,
	// series and rules, within MaxBytes.
	UsedBytes int64 `json:"used_bytes"`
	MaxBytes  int64 `json:"max_bytes"`
	// Refused counts the new nodes, VMs and (VM, rule) pairs the bounds
	// refused; LastRefused is the last time (zero: never).
	Refused     Refusals  `json:"refused"`
	LastRefused time.Time `json:"last_refused"`
}

// Stats returns the counters and sizes.
func (s *State) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statsLocked()
}
