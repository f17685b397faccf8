package telemetry

import (
	"sync"
	"time"
)

// Options bound and tune a State. Zero values take the defaults.
type Options struct {
	// History is how far back the per-second rings reach (default 15 min).
	History time.Duration
	// MaxNodes, MaxVMsPerNode, MaxRules, MaxSeries and MaxBuckets bound
	// what is remembered; past a bound the least recently reported item is
	// forgotten. Series are (rule, node) rings.
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
)

func (r Result) String() string {
	if r == Duplicate {
		return "duplicate"
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

	cache  overviewCache
	search searchCache
}

type node struct {
	id         string
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
	acts       Actions
}

// restarted tells whether a cumulative counter went down since prev: the
// VM's counters started again from zero.
func (v *vmRule) restarted(prev *vmRule) bool {
	for k := range v.c {
		if v.c[k] < prev.c[k] {
			return true
		}
	}
	return v.overflowed < prev.overflowed || v.acts.Exempted < prev.acts.Exempted ||
		v.acts.Denied < prev.acts.Denied || v.acts.Overridden < prev.acts.Overridden
}

// series is one rule on one node.
type series struct {
	ring       *ring
	total      Counts // since the admin first saw it
	overflowed uint64 // requests decided by an overflow limit, since the admin first saw it
	last       time.Time
}

// ruleAgg is one rule, every node merged.
type ruleAgg struct {
	acts  Actions // exempted, denied, overridden since the admin first saw the rule
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
	return s
}

// Options returns the options in force (defaults filled in).
func (s *State) Options() Options { return s.opts }

// Ingest applies a validated report received at now: per-rule deltas from
// the cumulative counters, bucket states, node health.
func (s *State) Ingest(r *Report, now time.Time) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeSweep(now)

	n := s.nodes[r.Node]
	if n == nil {
		if len(s.nodes) >= s.opts.MaxNodes {
			s.evictNode()
		}
		n = &node{id: r.Node, first: now, vms: map[string]*vmState{}, series: map[string]*series{}}
		s.nodes[r.Node] = n
	}
	n.last = now
	n.intervalMS = r.IntervalMS
	n.configHash = r.ConfigHash

	vm := n.vms[r.VM]
	fresh := false // count the first counters in full
	switch {
	case vm == nil:
		if len(n.vms) >= s.opts.MaxVMsPerNode {
			evictVM(n)
		}
		vm = &vmState{counters: make(map[string]vmRule, len(r.Rules))}
		n.vms[r.VM] = vm
		age := time.Duration(r.SentAtMS-r.VMStartMS) * time.Millisecond
		fresh = age <= s.opts.FreshVM
	case vm.startMS != r.VMStartMS: // the VM restarted: its counters restarted at zero
		clear(vm.counters)
		vm.dropped = 0
		fresh = true
	case r.Seq <= vm.seq:
		vm.last = now
		n.duplicates++
		s.dups++
		return Duplicate
	default:
		fresh = true // known VM: a rule it has no baseline for is new, from zero
	}
	vm.startMS, vm.seq, vm.last = r.VMStartMS, r.Seq, now
	n.received++
	s.accepted++
	s.gen++

	// Reports dropped by the plugin: always counted in full (they are what
	// the admin did not see), restarts from zero.
	if r.ReportsDropped >= vm.dropped {
		n.dropped += r.ReportsDropped - vm.dropped
	} else {
		n.dropped += r.ReportsDropped
	}
	vm.dropped = r.ReportsDropped

	sec := now.Unix()
	vm.overflowing = false
	for i := range r.Rules {
		rc := &r.Rules[i]
		cur := vmRule{
			c:          Counts{rc.Allowed, rc.Rejected, rc.ShadowRejected, rc.FailOpen},
			overflowed: rc.Overflowed, identities: rc.OverflowIdentities,
			acts: Actions{Exempted: rc.Exempted, Denied: rc.Denied, Overridden: rc.Overridden},
		}
		prev, known := vm.counters[rc.Rule]
		vm.counters[rc.Rule] = cur
		vm.overflowing = vm.overflowing || cur.identities > 0
		var d Counts
		var overflowed uint64
		var acts Actions
		switch {
		case !known && !fresh:
			// baseline only
		case !known || cur.restarted(&prev):
			d, overflowed, acts = cur.c, cur.overflowed, cur.acts // new, or its counters restarted: from zero
		default:
			for k := range d {
				d[k] = cur.c[k] - prev.c[k]
			}
			overflowed = cur.overflowed - prev.overflowed
			acts = Actions{cur.acts.Exempted - prev.acts.Exempted, cur.acts.Denied - prev.acts.Denied, cur.acts.Overridden - prev.acts.Overridden}
		}
		s.addDelta(n, rc.Rule, sec, now, &d, overflowed)
		if ra := s.rules[rc.Rule]; ra != nil {
			ra.acts.add(acts)
		}
	}
	if len(vm.counters) > len(r.Rules) { // rules gone from the configuration
		for name := range vm.counters {
			if !hasRule(r.Rules, name) {
				delete(vm.counters, name)
			}
		}
	}

	for i := range r.Buckets {
		s.buckets.put(&r.Buckets[i], r.Node, now, &s.evicted)
	}
	s.setFleet(n, r.Fleet, now)
	return Accepted
}

func hasRule(rs []RuleCounters, name string) bool {
	for i := range rs {
		if rs[i].Rule == name {
			return true
		}
	}
	return false
}

// addDelta adds d (possibly zero: the rule is alive) and the requests
// decided by an overflow limit to the rule's rings.
func (s *State) addDelta(n *node, rule string, sec int64, now time.Time, d *Counts, overflowed uint64) {
	ra := s.rules[rule]
	if ra == nil {
		if len(s.rules) >= s.opts.MaxRules {
			s.evictRule()
		}
		ra = &ruleAgg{ring: newRing(s.seconds), first: now}
		s.rules[rule] = ra
	}
	ra.last = now
	se := n.series[rule]
	if se == nil {
		if s.nseries >= s.opts.MaxSeries {
			s.evictSeries()
		}
		se = &series{ring: newRing(s.seconds)}
		n.series[rule] = se
		s.nseries++
	}
	se.last = now
	if overflowed > 0 {
		if ra.ovf == nil {
			ra.ovf = newRing(s.seconds)
		}
		ra.ovf.add(sec, &Counts{overflowed})
		ra.ovfTotal += overflowed
		se.overflowed += overflowed
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
	for id, n := range s.nodes {
		if n.last.Before(nodeCut) {
			s.nseries -= len(n.series)
			s.dropFleet(n)
			delete(s.nodes, id)
			changed = true
			continue
		}
		for vid, vm := range n.vms {
			if vm.last.Before(nodeCut) {
				delete(n.vms, vid)
				changed = true
			}
		}
		for rule, se := range n.series {
			if se.last.Before(histCut) {
				delete(n.series, rule)
				s.nseries--
				changed = true
			}
		}
	}
	for name, ra := range s.rules {
		if ra.last.Before(histCut) {
			delete(s.rules, name)
			changed = true
		}
	}
	if s.buckets.expire(histCut) > 0 {
		changed = true
	}
	if changed {
		s.gen++
	}
}

func (s *State) evictNode() {
	var oldest *node
	for _, n := range s.nodes {
		if oldest == nil || n.last.Before(oldest.last) {
			oldest = n
		}
	}
	if oldest != nil {
		s.nseries -= len(oldest.series)
		s.dropFleet(oldest)
		delete(s.nodes, oldest.id)
	}
}

func evictVM(n *node) {
	var oldestID string
	var oldest time.Time
	for id, vm := range n.vms {
		if oldestID == "" || vm.last.Before(oldest) {
			oldestID, oldest = id, vm.last
		}
	}
	delete(n.vms, oldestID)
}

func (s *State) evictRule() {
	var name string
	var oldest time.Time
	for k, ra := range s.rules {
		if name == "" || ra.last.Before(oldest) {
			name, oldest = k, ra.last
		}
	}
	delete(s.rules, name)
}

func (s *State) evictSeries() {
	var on *node
	var rule string
	var oldest time.Time
	for _, n := range s.nodes {
		for k, se := range n.series {
			if on == nil || se.last.Before(oldest) {
				on, rule, oldest = n, k, se.last
			}
		}
	}
	if on != nil {
		delete(on.series, rule)
		s.nseries--
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
}

// Stats returns the counters and sizes.
func (s *State) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statsLocked()
}
