package fleet

import (
	"testing"
	"time"
)

// The dashboard's usage counts each kind of token apart, charges included,
// over the last complete seconds only.
func TestUsageCountsChargesApartFromLeases(t *testing.T) {
	tr := newTracker()
	t0 := time.Unix(1_800_000_000, 0)
	k := usageKey{"sluice", "llm-tokens", "envoy-1"}
	tr.record(k, t0, tokenCounts{granted: 500})
	tr.record(k, t0.Add(200*time.Millisecond), tokenCounts{charged: 1200})
	tr.record(k, t0.Add(time.Second), tokenCounts{charged: 800, returned: 40})
	tr.record(k, t0.Add(2*time.Second), tokenCounts{charged: 1000}) // the current second: not counted yet
	u := tr.snapshot(t0.Add(2500 * time.Millisecond))
	if len(u) != 1 || len(u[0].Nodes) != 1 {
		t.Fatalf("usage %+v, want one rule of one node", u)
	}
	n := u[0].Nodes[0]
	if n.Granted != 500 || n.Charged != 2000 || n.Returned != 40 || n.Denied != 0 || n.LastLease != 500 {
		t.Errorf("node usage %+v; want granted 500, charged 2000, returned 40", n)
	}
	if got := u[0].ChargedPerSecond; got != 2000.0/usageSlots {
		t.Errorf("charged per second %g, want %g", got, 2000.0/usageSlots)
	}
}

// The dashboard's usage counts the blocks a node's calls put in place,
// apart from tokens, over the last complete seconds only.
func TestUsageCountsBlocksApartFromTokens(t *testing.T) {
	tr := newTracker()
	t0 := time.Unix(1_800_000_000, 0)
	k := usageKey{"sluice", "api", "envoy-1"}
	tr.record(k, t0, tokenCounts{granted: 5})
	tr.record(k, t0.Add(300*time.Millisecond), tokenCounts{blocked: 1})
	tr.record(k, t0.Add(time.Second), tokenCounts{blocked: 1, denied: 2})
	tr.record(k, t0.Add(2*time.Second), tokenCounts{blocked: 1}) // the current second: not counted yet
	u := tr.snapshot(t0.Add(2500 * time.Millisecond))
	if len(u) != 1 || len(u[0].Nodes) != 1 {
		t.Fatalf("usage %+v, want one rule of one node", u)
	}
	if n := u[0].Nodes[0]; n.Blocked != 2 || n.Granted != 5 || n.Denied != 2 {
		t.Errorf("node usage %+v; want 2 blocks, granted 5, denied 2", n)
	}
	if got := u[0].BlockedPerSecond; got != 2.0/usageSlots {
		t.Errorf("blocks per second %g, want %g", got, 2.0/usageSlots)
	}
}
