package fleet

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// Tracking bounds. The tracker is memory of one admin replica: it is
// lost on restart and each replica sees only the calls it answered, which
// is enough for a fleet size (every node calls every few seconds, and a
// load balancer spreads them) and for the dashboard; the limits themselves
// live in Redis.
const (
	NodeWindow     = 30 * time.Second // a node counts toward the fleet size this long after its last call
	usageSlots     = 10               // seconds of per-(rule, node) usage kept: the dashboard's rates
	maxNodes       = 4096             // per domain; beyond, new nodes are not tracked (the size stops growing)
	maxDomains     = 64
	maxUsage       = 16384 // (domain, rule, node) entries
	usageIdleAfter = time.Minute
)

type tracker struct {
	mu        sync.Mutex
	nodes     map[string]map[string]time.Time // domain → node → last call
	usage     map[usageKey]*usage
	lastPrune time.Time
}

type usageKey struct{ domain, rule, node string }

type usage struct {
	slots     [usageSlots]usageSlot
	lastLease uint64 // tokens of the node's last grant
	lastSeen  time.Time
}

type usageSlot struct {
	sec int64
	tokenCounts
}

// tokenCounts are one descriptor's (or a slot's) tokens by what became of
// them: leased, refused, given back, or charged after a response; and the
// blocks put in place (a count of blocks, not of tokens).
type tokenCounts struct {
	granted, denied, returned, charged uint64
	blocked                            uint64
}

func (c *tokenCounts) add(o tokenCounts) {
	c.granted += o.granted
	c.denied += o.denied
	c.returned += o.returned
	c.charged += o.charged
	c.blocked += o.blocked
}

func newTracker() *tracker {
	return &tracker{nodes: map[string]map[string]time.Time{}, usage: map[usageKey]*usage{}}
}

// seen records a call of node in domain at now and returns the fleet
// size: the distinct nodes of domain seen within NodeWindow, at least 1
// (the caller, even when it sent no node id).
func (t *tracker) seen(domain, node string, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(now)
	ns := t.nodes[domain]
	if ns == nil && len(t.nodes) < maxDomains {
		ns = map[string]time.Time{}
		t.nodes[domain] = ns
	}
	if node != "" && ns != nil {
		if _, ok := ns[node]; ok || len(ns) < maxNodes {
			ns[node] = now
		}
	}
	n := 0
	for _, last := range ns {
		if now.Sub(last) <= NodeWindow {
			n++
		}
	}
	return max(n, 1)
}

// record adds one descriptor's outcome for the dashboard.
func (t *tracker) record(k usageKey, now time.Time, c tokenCounts) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u := t.usage[k]
	if u == nil {
		if len(t.usage) >= maxUsage {
			return
		}
		u = &usage{}
		t.usage[k] = u
	}
	sec := now.Unix()
	s := &u.slots[sec%usageSlots]
	if s.sec != sec {
		*s = usageSlot{sec: sec}
	}
	s.add(c)
	if c.granted > 0 {
		u.lastLease = c.granted
	}
	u.lastSeen = now
}

func (t *tracker) pruneLocked(now time.Time) {
	if now.Sub(t.lastPrune) < time.Second {
		return
	}
	t.lastPrune = now
	for d, ns := range t.nodes {
		for n, last := range ns {
			if now.Sub(last) > NodeWindow {
				delete(ns, n)
			}
		}
		if len(ns) == 0 {
			delete(t.nodes, d)
		}
	}
	for k, u := range t.usage {
		if now.Sub(u.lastSeen) > usageIdleAfter {
			delete(t.usage, k)
		}
	}
}

func (t *tracker) nodeCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, ns := range t.nodes {
		n += len(ns)
	}
	return n
}

// RuleUsage is one rule of one domain as this admin replica sees it.
type RuleUsage struct {
	Domain, Rule string
	// Per second over the last usageSlots complete seconds, all nodes.
	GrantedPerSecond, DeniedPerSecond, ReturnedPerSecond, ChargedPerSecond float64
	// BlockedPerSecond: blocks put in place (sluice_op=block), not tokens.
	BlockedPerSecond float64
	Nodes            []NodeUsage
}

// NodeUsage is one node's use of a rule.
type NodeUsage struct {
	Node      string // "" when the node sent no x-sluice-node
	LastLease uint64 // tokens of its last grant
	// Over the last usageSlots seconds; Charged: response costs its pools
	// could not pay.
	Granted, Denied, Returned, Charged uint64
	// Blocked: the blocks its calls put in place (identities kept out for
	// the rule's block_seconds), over the same seconds.
	Blocked  uint64
	LastSeen time.Time
}

// snapshot returns the usage per (domain, rule), sorted, with the
// per-second rates over the complete seconds before now.
func (t *tracker) snapshot(now time.Time) []RuleUsage {
	t.mu.Lock()
	defer t.mu.Unlock()
	type rk struct{ domain, rule string }
	byRule := map[rk]*RuleUsage{}
	cur := now.Unix()
	for k, u := range t.usage {
		var nu NodeUsage
		nu.Node, nu.LastLease, nu.LastSeen = k.node, u.lastLease, u.lastSeen
		var sum tokenCounts
		for _, s := range u.slots {
			if s.sec < cur && s.sec >= cur-usageSlots {
				sum.add(s.tokenCounts)
			}
		}
		nu.Granted, nu.Denied, nu.Returned, nu.Charged, nu.Blocked = sum.granted, sum.denied, sum.returned, sum.charged, sum.blocked
		r := byRule[rk{k.domain, k.rule}]
		if r == nil {
			r = &RuleUsage{Domain: k.domain, Rule: k.rule}
			byRule[rk{k.domain, k.rule}] = r
		}
		r.GrantedPerSecond += float64(nu.Granted) / usageSlots
		r.DeniedPerSecond += float64(nu.Denied) / usageSlots
		r.ReturnedPerSecond += float64(nu.Returned) / usageSlots
		r.ChargedPerSecond += float64(nu.Charged) / usageSlots
		r.BlockedPerSecond += float64(nu.Blocked) / usageSlots
		r.Nodes = append(r.Nodes, nu)
	}
	out := make([]RuleUsage, 0, len(byRule))
	for _, r := range byRule {
		slices.SortFunc(r.Nodes, func(a, b NodeUsage) int { return strings.Compare(a.Node, b.Node) })
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b RuleUsage) int {
		if c := strings.Compare(a.Domain, b.Domain); c != 0 {
			return c
		}
		return strings.Compare(a.Rule, b.Rule)
	})
	return out
}
