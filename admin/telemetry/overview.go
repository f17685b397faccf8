package telemetry

import (
	"slices"
	"strings"
	"time"
)

// RateWindow is the span over which the current rates are averaged.
const RateWindow = 10 * time.Second

// OverviewOptions choose what Overview computes. Zero values take the
// defaults.
type OverviewOptions struct {
	Window time.Duration // how far back the charts reach (default 5 min; 1 min to History)
	Points int           // chart points per rule (default 150); the step is a whole number of seconds
	TopN   int           // hottest keys listed (default 25, at most 1000)
}

// Overview is everything the dashboard shows, computed at one instant.
// Overviews are cached and shared: treat one as read-only.
type Overview struct {
	Now    time.Time `json:"now"`
	Window int       `json:"window_seconds"`
	Step   int       `json:"step_seconds"`
	Start  int64     `json:"start"` // first second of the window (unix)
	End    int64     `json:"end"`   // last complete second (unix)

	Totals Counts `json:"totals"` // every rule, over the window
	Rates  Rates  `json:"rates"`  // every rule, over the last RateWindow

	Rules   []RuleView `json:"rules"`
	Nodes   []NodeView `json:"nodes"`
	TopKeys []KeyView  `json:"top_keys"`
	Stats   Stats      `json:"stats"`

	// Fleet is the nodes' view of fleet mode (global rules), from the
	// reports' "fleet" objects; empty when no node sends one.
	Fleet []NodeFleet `json:"fleet,omitempty"`

	// Gen changes whenever the state does (a report applied, something
	// expired): an unchanged Gen means the same numbers.
	Gen uint64 `json:"-"`
}

// RuleView is one rule, every node merged.
type RuleView struct {
	Name   string   `json:"rule"`
	First  int64    `json:"first_seen"` // the second the admin first heard of the rule (unix)
	Window Counts   `json:"window"`     // over the window
	Rates  Rates    `json:"rates"`      // over the last RateWindow
	Total  Counts   `json:"total"`      // since the admin first saw the rule
	Points []Counts `json:"points"`     // per step, oldest first (len = Window/Step)
	Nodes  int      `json:"nodes"`      // nodes reporting the rule
	// Overflow: the requests of the rule decided by a group's overflow
	// limit (each also counted in its decision), and how many identities
	// share one.
	Overflow Overflow `json:"overflow"`
	// Actions: requests let through by the rule as an exempt rule,
	// rejected as a deny rule, or decided by one of its overrides, since
	// the admin first saw the rule.
	Actions Actions `json:"actions"`
	// ResponseCosts: the charges of a rule whose cost comes from the
	// response, since the admin first saw the rule (all 0 for others).
	ResponseCosts ResponseCosts `json:"response_costs"`
}

// ResponseCosts counts a rule's charges of costs the response reports:
// every charge, those of default_cost (the response reported none, or the
// stream ended first), and reports that were not a cost (also in Default).
type ResponseCosts struct {
	Charged uint64 `json:"charged"`
	Default uint64 `json:"default"`
	Invalid uint64 `json:"invalid"`
}

func (r *ResponseCosts) add(d ResponseCosts) {
	r.Charged = satAdd(r.Charged, d.Charged)
	r.Default = satAdd(r.Default, d.Default)
	r.Invalid = satAdd(r.Invalid, d.Invalid)
}

// since is r less prev, and whether any count went down (the VM's
// counters started again: then r itself).
func (r ResponseCosts) since(prev ResponseCosts) (ResponseCosts, bool) {
	if r.Charged < prev.Charged || r.Default < prev.Default || r.Invalid < prev.Invalid {
		return r, true
	}
	return ResponseCosts{r.Charged - prev.Charged, r.Default - prev.Default, r.Invalid - prev.Invalid}, false
}

// Actions counts what a rule's action and overrides decided, and the
// requests it matched but could not key.
type Actions struct {
	Exempted   uint64 `json:"exempted"`
	Denied     uint64 `json:"denied"`
	Overridden uint64 `json:"overridden"`
	// KeyMissing: requests the rule matched but skipped, a limit key
	// having no value.
	KeyMissing uint64 `json:"key_missing"`
	// Blocked: identities the rule's refusals blocked (block_seconds).
	Blocked uint64 `json:"blocked"`
}

func (a *Actions) add(d Actions) {
	a.Exempted = satAdd(a.Exempted, d.Exempted)
	a.Denied = satAdd(a.Denied, d.Denied)
	a.Overridden = satAdd(a.Overridden, d.Overridden)
	a.KeyMissing = satAdd(a.KeyMissing, d.KeyMissing)
	a.Blocked = satAdd(a.Blocked, d.Blocked)
}

// since returns a's counts since prev, and whether one of them went back
// (the VM's counters restarted).
func (a Actions) since(prev Actions) (Actions, bool) {
	if a.Exempted < prev.Exempted || a.Denied < prev.Denied || a.Overridden < prev.Overridden || a.KeyMissing < prev.KeyMissing ||
		a.Blocked < prev.Blocked {
		return a, true
	}
	return Actions{a.Exempted - prev.Exempted, a.Denied - prev.Denied, a.Overridden - prev.Overridden, a.KeyMissing - prev.KeyMissing,
		a.Blocked - prev.Blocked}, false
}

// Overflow is what a rule's overflow limits decided: requests whose
// identity found no place in its group of the plugin's bounded table and
// shared the group's overflow limit with the other identities left out.
type Overflow struct {
	Window uint64  `json:"window"` // requests over the window
	Rate   float64 `json:"rate"`   // per second over the last RateWindow
	Total  uint64  `json:"total"`  // since the admin first saw the rule
	// Identities is the largest estimated number of distinct identities
	// sharing one overflow limit: the most any running VM (of any node)
	// saw in its last report; 0 when none overflows.
	Identities uint64 `json:"identities"`
}

// NodeView is the health of one node.
type NodeView struct {
	ID         string    `json:"node"`
	LastReport time.Time `json:"last_report"`
	IntervalMS int64     `json:"interval_ms"`
	Stale      bool      `json:"stale"`       // no report for 3 intervals (at least 5 s)
	ConfigHash string    `json:"config_hash"` // "" if the reports carry none
	Version    int64     `json:"version"`     // the policy version with that hash; 0 if none matches
	VMs        int       `json:"vms"`         // VMs that reported within 3 intervals
	Received   uint64    `json:"reports_received"`
	Duplicates uint64    `json:"reports_duplicate"`
	Rejected   uint64    `json:"reports_rejected"`
	Dropped    uint64    `json:"reports_dropped"` // reports the plugin failed to deliver
	Rates      Rates     `json:"rates"`           // every rule, over the last RateWindow
	Total      Counts    `json:"total"`           // every rule, since the admin first saw the node
}

func (o *OverviewOptions) fill(history time.Duration) {
	if o.Window <= 0 {
		o.Window = 5 * time.Minute
	}
	o.Window = min(max(o.Window.Truncate(time.Second), time.Minute), history)
	if o.Points <= 0 {
		o.Points = 150
	}
	o.Points = min(o.Points, int(o.Window/time.Second))
	if o.TopN <= 0 {
		o.TopN = 25
	}
	o.TopN = min(o.TopN, 1000)
}

// searchCache holds the last search: every viewer of the same search
// within a second shares it.
type searchCache struct {
	q     string
	limit int
	gen   uint64
	sec   int64
	keys  []KeyView
	total int
}

type overviewCache struct {
	opts OverviewOptions
	gen  uint64
	sec  int64
	ov   *Overview
}

// Overview computes the dashboard's view at now. Within one second and
// without new reports it returns the same (cached) Overview.
func (s *State) Overview(now time.Time, opts OverviewOptions) *Overview {
	opts.fill(s.opts.History)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeSweep(now)
	c := &s.cache
	if c.ov != nil && c.opts == opts && c.gen == s.gen && c.sec == now.Unix() {
		return c.ov
	}
	ov := s.overview(now, opts)
	*c = overviewCache{opts: opts, gen: s.gen, sec: now.Unix(), ov: ov}
	return ov
}

func (s *State) overview(now time.Time, opts OverviewOptions) *Overview {
	windowSec := int(opts.Window / time.Second)
	step := max(1, (windowSec+opts.Points-1)/opts.Points)
	points := windowSec / step
	end := now.Unix() - 1 // the current second is not complete
	start := end - int64(points*step) + 1
	rateFrom := end - int64(RateWindow/time.Second) + 1
	rateDiv := RateWindow.Seconds()

	ov := &Overview{
		Now: now, Window: points * step, Step: step, Start: start, End: end,
		Rules: make([]RuleView, 0, len(s.rules)), Nodes: make([]NodeView, 0, len(s.nodes)),
	}
	ruleNodes := map[string]int{}
	identities := map[string]uint64{}
	for _, n := range s.nodes {
		for rule := range n.series {
			ruleNodes[rule]++
		}
		overflowIdentities(n, now, func(rule string, k uint64) { identities[rule] = max(identities[rule], k) })
	}
	for name, ra := range s.rules {
		rv := RuleView{Name: name, First: ra.first.Unix(), Total: ra.total, Points: make([]Counts, points), Nodes: ruleNodes[name]}
		rv.Overflow = Overflow{Total: ra.ovfTotal, Identities: identities[name]}
		rv.Actions = ra.acts
		rv.ResponseCosts = ra.resp
		if ra.ovf != nil {
			rv.Overflow.Window = ra.ovf.sum(start, end)[0]
			rv.Overflow.Rate = float64(ra.ovf.sum(rateFrom, end)[0]) / rateDiv
		}
		for p := range points {
			from := start + int64(p*step)
			c := ra.ring.sum(from, from+int64(step)-1)
			rv.Points[p] = c
			rv.Window.add(c)
		}
		rc := ra.ring.sum(rateFrom, end)
		for d := range rc {
			rv.Rates[d] = float64(rc[d]) / rateDiv
		}
		ov.Totals.add(rv.Window)
		for d := range rv.Rates {
			ov.Rates[d] += rv.Rates[d]
		}
		ov.Rules = append(ov.Rules, rv)
	}
	slices.SortFunc(ov.Rules, func(a, b RuleView) int { return strings.Compare(a.Name, b.Name) })

	for _, n := range s.nodes {
		ov.Nodes = append(ov.Nodes, s.nodeView(n, now, rateFrom, end))
	}
	slices.SortFunc(ov.Nodes, func(a, b NodeView) int { return strings.Compare(a.ID, b.ID) })

	top := newTopN(opts.TopN, now)
	for _, g := range s.buckets.groups {
		top.offer(g)
	}
	ov.TopKeys = top.keys()
	ov.Fleet = s.fleetViews(now)
	ov.Stats = s.statsLocked()
	ov.Gen = s.gen
	return ov
}

func (s *State) nodeView(n *node, now time.Time, rateFrom, end int64) NodeView {
	alive := aliveFor(n)
	nv := NodeView{
		ID: n.id, LastReport: n.last, IntervalMS: n.intervalMS, Stale: now.Sub(n.last) > alive,
		ConfigHash: n.configHash, Received: n.received, Duplicates: n.duplicates, Rejected: n.rejected, Dropped: n.dropped,
	}
	if n.configHash != "" && s.opts.Versions != nil {
		if v, ok := s.opts.Versions.Lookup(n.configHash); ok {
			nv.Version = v
		}
	}
	for _, vm := range n.vms {
		if now.Sub(vm.last) <= alive {
			nv.VMs++
		}
	}
	for _, se := range n.series {
		rc := se.ring.sum(rateFrom, end)
		for d := range rc {
			nv.Rates[d] += float64(rc[d]) / RateWindow.Seconds()
		}
		nv.Total.add(se.total)
	}
	return nv
}

func (s *State) statsLocked() Stats {
	st := Stats{
		Accepted: s.accepted, Duplicates: s.dups, Rejected: s.rejected,
		Nodes: len(s.nodes), Rules: len(s.rules), Series: s.nseries,
		Buckets: s.buckets.len(), BucketsEvicted: s.evicted,
		UsedBytes: s.used, MaxBytes: s.opts.MaxBytes, Refused: s.refused, LastRefused: s.lastRefused,
	}
	for _, n := range s.nodes {
		st.VMs += len(n.vms)
	}
	return st
}

// Search returns up to limit keys whose identity matches q (see match),
// hottest first, and how many keys matched in all. An empty q matches
// nothing. Like Overview it is cached for a second without new reports:
// treat the keys as read-only.
func (s *State) Search(now time.Time, q string, limit int) ([]KeyView, int) {
	q = CleanQuery(q)
	if q == "" || limit <= 0 {
		return nil, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := &s.search
	if sc.keys != nil && sc.q == q && sc.limit == limit && sc.gen == s.gen && sc.sec == now.Unix() {
		return sc.keys, sc.total
	}
	top := newTopN(limit, now)
	total := 0
	masked := map[*group]bool{}
	for _, g := range s.buckets.groups {
		ok, m := match(g.key.identity, q)
		if !ok {
			continue
		}
		total++
		if m {
			masked[g] = true
		}
		top.offer(g)
	}
	keys := top.keys()
	for i, r := range top.ranks {
		keys[i].MaskedMatch = masked[r.g]
	}
	*sc = searchCache{q: q, limit: limit, gen: s.gen, sec: now.Unix(), keys: keys, total: total}
	return keys, total
}
