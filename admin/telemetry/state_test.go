package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sluice-rl/sluice/admin/policies"
)

var t0 = time.Unix(1763770000, 0) // a whole second

func rep(node, vm string, startMS int64, seq uint64, rules ...RuleCounters) *Report {
	return &Report{
		V: 1, Node: node, VM: vm, VMStartMS: startMS, Seq: seq, SentAtMS: startMS + int64(seq)*1000,
		IntervalMS: 1000, Rules: rules, Buckets: []Bucket{},
	}
}

func rc(rule string, allowed, rejected, shadow, failOpen uint64) RuleCounters {
	return RuleCounters{Rule: rule, Allowed: allowed, Rejected: rejected, ShadowRejected: shadow, FailOpen: failOpen}
}

// ruleView returns the overview's view of a rule.
func ruleView(t *testing.T, ov *Overview, name string) RuleView {
	t.Helper()
	for _, r := range ov.Rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("rule %q not in the overview (%d rules)", name, len(ov.Rules))
	return RuleView{}
}

func TestDeltasAndRestarts(t *testing.T) {
	s := NewState(Options{})
	start := t0.UnixMilli()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	steps := []struct {
		sec    int
		r      *Report
		res    Result
		total  Counts // rule "r" since start, after the step
		reason string
	}{
		{1, rep("n1", "vm1", start, 1, rc("r", 10, 2, 1, 0)), Accepted, Counts{10, 2, 1, 0}, "a fresh VM counts in full"},
		{2, rep("n1", "vm1", start, 2, rc("r", 15, 2, 1, 1)), Accepted, Counts{15, 2, 1, 1}, "deltas"},
		{3, rep("n1", "vm1", start, 2, rc("r", 99, 9, 9, 9)), Duplicate, Counts{15, 2, 1, 1}, "the same seq is a duplicate"},
		{3, rep("n1", "vm1", start, 1, rc("r", 99, 9, 9, 9)), Duplicate, Counts{15, 2, 1, 1}, "an older seq is a duplicate"},
		{4, rep("n1", "vm1", start, 3, rc("r", 3, 0, 0, 0)), Accepted, Counts{18, 2, 1, 1}, "a counter going down: restart, from zero"},
		{5, rep("n1", "vm1", start+5000, 1, rc("r", 4, 1, 0, 0)), Accepted, Counts{22, 3, 1, 1}, "a new vm_start_ms: restart, from zero, seq too"},
		{6, rep("n1", "vm1", start+5000, 2, rc("r", 4, 1, 0, 0), rc("new", 7, 0, 0, 0)), Accepted, Counts{22, 3, 1, 1}, "no traffic; a new rule counts from zero"},
		{7, rep("n1", "vm1", start+5000, 3, rc("r", 6, 1, 0, 0)), Accepted, Counts{24, 3, 1, 1}, "rule 'new' removed"},
		{8, rep("n1", "vm1", start+5000, 4, rc("r", 6, 1, 0, 0), rc("new", 2, 0, 0, 0)), Accepted, Counts{24, 3, 1, 1}, "'new' re-added counts from zero"},
	}
	for i, st := range steps {
		if res := s.Ingest(st.r, at(st.sec)); res != st.res {
			t.Fatalf("step %d (%s): %v, want %v", i, st.reason, res, st.res)
		}
		ov := s.Overview(at(st.sec+1), OverviewOptions{Window: time.Minute})
		if got := ruleView(t, ov, "r").Total; got != st.total {
			t.Errorf("step %d (%s): total %v, want %v", i, st.reason, got, st.total)
		}
	}
	ov := s.Overview(at(9), OverviewOptions{Window: time.Minute})
	if got := ruleView(t, ov, "new").Total; got != (Counts{9, 0, 0, 0}) {
		t.Errorf("rule new: %v, want 7 then 2", got)
	}
	// Per second: the deltas landed in the seconds they arrived.
	r := ruleView(t, ov, "r")
	if ov.Step != 1 || len(r.Points) != 60 {
		t.Fatalf("step %d, %d points", ov.Step, len(r.Points))
	}
	last := r.Points[len(r.Points)-8:] // seconds 1..8
	want := []Counts{{10, 2, 1, 0}, {5, 0, 0, 1}, {}, {3, 0, 0, 0}, {4, 1, 0, 0}, {}, {2, 0, 0, 0}, {}}
	for i := range want {
		if last[i] != want[i] {
			t.Errorf("second %d: %v, want %v", i+1, last[i], want[i])
		}
	}
	if ov.Nodes[0].Received != 7 || ov.Nodes[0].Duplicates != 2 {
		t.Errorf("node reports: %+v", ov.Nodes[0])
	}
}

func TestOldVMFirstReportIsABaseline(t *testing.T) {
	s := NewState(Options{FreshVM: time.Minute})
	start := t0.UnixMilli()
	// The VM started 10 minutes before its first report reached this admin
	// (the admin restarted): its counters so far are a baseline.
	old := rep("n", "vm", start, 600, rc("r", 5000, 100, 0, 0))
	old.ReportsDropped = 4
	s.Ingest(old, t0.Add(600*time.Second))
	s.Ingest(rep("n", "vm", start, 601, rc("r", 5010, 101, 0, 0)), t0.Add(601*time.Second))
	ov := s.Overview(t0.Add(602*time.Second), OverviewOptions{})
	if got := ruleView(t, ov, "r").Total; got != (Counts{10, 1, 0, 0}) {
		t.Errorf("total %v, want only the second report's deltas", got)
	}
	if ov.Nodes[0].Dropped != 4 {
		t.Errorf("dropped reports %d: they always count in full", ov.Nodes[0].Dropped)
	}
}

func TestMergeAcrossVMsAndNodes(t *testing.T) {
	s := NewState(Options{})
	start := t0.UnixMilli()
	now := t0.Add(10 * time.Second)
	// Two nodes, two VMs each, one report each in the same second.
	for n := range 2 {
		for v := range 2 {
			r := rep(fmt.Sprintf("node-%d", n), fmt.Sprintf("vm%d", v), start, 1, rc("api", uint64(100*(n+1)+v), uint64(n), 0, 0))
			r.ConfigHash = "00000000000000aa"
			r.Buckets = []Bucket{
				// The same bucket reported by both VMs of a node: newest state wins, rejects add.
				{Rule: "api", Identity: "ip:address=10.0.0.1", Tokens: float64(v), Burst: 10, LastRefill: float64(1000 + v), Rejects: 3},
			}
			s.Ingest(r, now)
		}
	}
	ov := s.Overview(now.Add(time.Second), OverviewOptions{Window: time.Minute})
	api := ruleView(t, ov, "api")
	// allowed: node-0 100+101, node-1 200+201; rejected: 0+0+1+1.
	if api.Total != (Counts{602, 2, 0, 0}) || api.Window != api.Total || api.Nodes != 2 {
		t.Errorf("api %+v", api)
	}
	if api.Points[len(api.Points)-1] != api.Total {
		t.Errorf("the last second holds %v", api.Points[len(api.Points)-1])
	}
	if ov.Totals != api.Total {
		t.Errorf("totals %v", ov.Totals)
	}
	if len(ov.Nodes) != 2 || ov.Nodes[0].VMs != 2 || ov.Nodes[0].Total != (Counts{201, 0, 0, 0}) || ov.Nodes[1].Total != (Counts{401, 2, 0, 0}) {
		t.Errorf("nodes %+v", ov.Nodes)
	}
	// One key, reported by both nodes: merged, rejects summed (3 per VM),
	// the emptiest bucket shown (both have tokens 1 after the newest state won).
	if len(ov.TopKeys) != 1 {
		t.Fatalf("top keys %+v", ov.TopKeys)
	}
	if k := ov.TopKeys[0]; k.Nodes != 2 || k.Tokens != 1 || k.LastRefill != 1001 || k.Recent != 12 || k.Total != 12 || k.Node != "node-0" {
		t.Errorf("key %+v: want 2 nodes, the newest state (tokens 1), 12 rejects", k)
	}
	// An older state arriving later does not overwrite a newer one.
	late := rep("node-0", "vm0", start, 2, rc("api", 100, 0, 0, 0))
	late.Buckets = []Bucket{{Rule: "api", Identity: "ip:address=10.0.0.1", Tokens: 9, Burst: 10, LastRefill: 999}}
	s.Ingest(late, now.Add(time.Second))
	keys, n := s.Search(now.Add(2*time.Second), "10.0.0.1", 10)
	if n != 1 || keys[0].Tokens != 1 || keys[0].Nodes != 2 {
		t.Errorf("search after a late old state: %d %+v", n, keys)
	}
	// Per node, the emptiest is shown.
	other := rep("node-1", "vm0", start, 2, rc("api", 200, 1, 0, 0))
	other.Buckets = []Bucket{{Rule: "api", Identity: "ip:address=10.0.0.1", Tokens: 0.5, Burst: 10, LastRefill: 2000}}
	s.Ingest(other, now.Add(2*time.Second))
	if keys, _ := s.Search(now.Add(2*time.Second), "10.0.0.1", 10); keys[0].Node != "node-1" || keys[0].Tokens != 0.5 {
		t.Errorf("merged key shows %+v, want node-1's emptier bucket", keys[0])
	}
}

func TestRingBoundsAndWindow(t *testing.T) {
	s := NewState(Options{History: 2 * time.Minute})
	start := t0.UnixMilli()
	// One request per second for 5 minutes.
	for i := 1; i <= 300; i++ {
		s.Ingest(rep("n", "vm", start, uint64(i), rc("r", uint64(i), 0, 0, 0)), t0.Add(time.Duration(i)*time.Second))
	}
	now := t0.Add(301 * time.Second)
	ov := s.Overview(now, OverviewOptions{Window: 10 * time.Minute, Points: 60})
	r := ruleView(t, ov, "r")
	// The window is clamped to the history: 2 minutes, in 2-second steps.
	if ov.Window != 120 || ov.Step != 2 || len(r.Points) != 60 {
		t.Fatalf("window %d step %d points %d", ov.Window, ov.Step, len(r.Points))
	}
	if r.Window[Allowed] != 120 || r.Total[Allowed] != 300 {
		t.Errorf("window %v total %v: the ring must hold exactly the last 120 s", r.Window, r.Total)
	}
	for i, p := range r.Points {
		if p[Allowed] != 2 {
			t.Errorf("point %d = %v, want 2", i, p)
		}
	}
	if r.Rates[Allowed] != 1 {
		t.Errorf("rate %v, want 1/s", r.Rates)
	}
	// A ring never reads a second it does not hold.
	rg := newRing(10)
	rg.add(100, &Counts{1})
	rg.add(105, &Counts{1})
	rg.add(95, &Counts{7}) // older than the ring: same slot as 105, dropped
	if got := rg.sum(96, 105); got[0] != 2 {
		t.Errorf("ring sum %v", got)
	}
	rg.add(110, &Counts{1}) // overwrites 100's slot
	if got := rg.sum(101, 110); got[0] != 2 || rg.sum(100, 100)[0] != 0 {
		t.Errorf("ring sum after a lap %v", got)
	}
	big := Counts{1 << 40}
	rg.add(111, &big)
	if got := rg.sum(111, 111); got[0] != 1<<32-1 {
		t.Errorf("saturation: %v", got)
	}
}

func TestBoundsRefuseNewItemsWhileKnownOnesKeepUpdating(t *testing.T) {
	s := NewState(Options{MaxBuckets: 100, MaxNodes: 3, MaxVMsPerNode: 2, MaxSeries: 4, NodeTTL: 2 * time.Minute, History: 2 * time.Minute})
	start := t0.UnixMilli()
	now := t0
	for i := range 5 {
		now = now.Add(time.Second)
		r := rep("node-"+strconv.Itoa(i), "vm", start, 1, rc("a", 1, 0, 0, 0), rc("b", 1, 0, 0, 0))
		for j := range 40 {
			r.Buckets = append(r.Buckets, Bucket{Rule: "a", Identity: fmt.Sprintf("k%d-%d", i, j), Tokens: 1, Burst: 2, LastRefill: 1})
		}
		want := Accepted
		if i >= 3 {
			want = Refused
		}
		if got := s.Ingest(r, now); got != want {
			t.Errorf("node-%d: %v, want %v", i, got, want)
		}
	}
	// node-3 and node-4 are refused, node-2's two series do not fit
	// (node-0 and node-1 hold the four); bucket states still evict.
	st := s.Stats()
	if st.Nodes != 3 || st.Series != 4 || st.Buckets != 100 || st.BucketsEvicted != 20 || st.Refused != (Refusals{2, 0, 2}) || !st.LastRefused.Equal(now) {
		t.Errorf("bounds: %+v", st)
	}
	if _, n := s.Search(now, "k3-", 10); n != 0 {
		t.Errorf("a refused node's buckets were kept: %d", n)
	}
	expected := `
# HELP sluice_telemetry_refused_total New nodes, VMs and (VM, rule) pairs refused because the telemetry state was full of items that report (the bounds and -telemetry-max-bytes).
# TYPE sluice_telemetry_refused_total counter
sluice_telemetry_refused_total{what="node"} 2
sluice_telemetry_refused_total{what="rule"} 2
sluice_telemetry_refused_total{what="vm"} 0
`
	if err := testutil.GatherAndCompare(NewMetrics(s).Registry(), strings.NewReader(expected), "sluice_telemetry_refused_total"); err != nil {
		t.Error(err)
	}
	// Known nodes keep updating.
	now = now.Add(time.Second)
	s.Ingest(rep("node-0", "vm", start, 2, rc("a", 6, 0, 0, 0), rc("b", 1, 0, 0, 0)), now)
	if a := ruleView(t, s.Overview(now.Add(time.Second), OverviewOptions{}), "a"); a.Total[Allowed] != 1+1+5 {
		t.Errorf("rule a's total %d, want 7 (node-0 and node-1's first reports, then node-0's 5 more)", a.Total[Allowed])
	}
	// VMs per node.
	s.Ingest(rep("node-0", "vm-1", start, 1), now)
	if got := s.Ingest(rep("node-0", "vm-2", start, 1), now); got != Refused {
		t.Errorf("a third VM of node-0: %v, want refused", got)
	}

	// Once idle for IdleAfter, the least recently reported node makes room.
	now = now.Add(IdleAfter)
	s.Ingest(rep("node-0", "vm", start, 3, rc("a", 6, 0, 0, 0), rc("b", 1, 0, 0, 0)), now)
	if got := s.Ingest(rep("node-3", "vm", start, 2, rc("a", 1, 0, 0, 0), rc("b", 1, 0, 0, 0)), now); got != Accepted {
		t.Errorf("node-3 after node-1 went idle: %v", got)
	}
	var ids []string
	for _, n := range s.Overview(now, OverviewOptions{}).Nodes {
		ids = append(ids, n.ID)
	}
	if strings.Join(ids, ",") != "node-0,node-2,node-3" {
		t.Errorf("nodes %v, want node-1 (the idlest) replaced by node-3", ids)
	}
	if st := s.Stats(); st.Series != 4 || st.VMs != 4 {
		t.Errorf("node-3 should hold node-1's series: %+v", st)
	}

	// Expiry: after the node TTL and the history, everything is gone and
	// the budget is whole again.
	later := now.Add(2*time.Minute + time.Second)
	s.Sweep(later)
	if st := s.Stats(); st.Nodes != 0 || st.VMs != 0 || st.Series != 0 || st.Buckets != 0 || st.Rules != 0 || st.UsedBytes != 0 {
		t.Errorf("after expiry: %+v", st)
	}
	if ov := s.Overview(later, OverviewOptions{}); len(ov.Nodes) != 0 || len(ov.Rules) != 0 || len(ov.TopKeys) != 0 {
		t.Errorf("overview after expiry: %+v", ov)
	}
}

func TestNodeHealth(t *testing.T) {
	idx := NewVersionIndex(nil, nil)
	v3 := []byte(`{"mode":"enforce","policies":[]}`)
	idx.Add(3, v3)
	s := NewState(Options{Versions: idx})
	start := t0.UnixMilli()
	r := rep("edge-1", "vm", start, 1, rc("r", 1, 0, 0, 0))
	r.ConfigHash = ConfigHash(v3)
	r.ReportsDropped = 2
	s.Ingest(r, t0)
	r2 := rep("edge-2", "vm", start, 1)
	r2.ConfigHash = "0123456789abcdef"
	r2.IntervalMS = 5000
	s.Ingest(r2, t0)
	s.RecordRejected("edge-1")
	s.RecordRejected("nobody")

	ov := s.Overview(t0.Add(4*time.Second), OverviewOptions{})
	e1, e2 := ov.Nodes[0], ov.Nodes[1]
	if e1.Version != 3 || e1.Stale || e1.VMs != 1 || e1.Dropped != 2 || e1.Rejected != 1 || !e1.LastReport.Equal(t0) {
		t.Errorf("edge-1 %+v", e1)
	}
	if e2.Version != 0 || e2.ConfigHash != "0123456789abcdef" || e2.Stale {
		t.Errorf("edge-2 %+v", e2)
	}
	if ov.Stats.Rejected != 2 || len(ov.Nodes) != 2 {
		t.Errorf("stats %+v", ov.Stats)
	}
	// 6 s without a report: stale at a 1 s interval, not at 5 s.
	ov = s.Overview(t0.Add(6*time.Second), OverviewOptions{})
	if !ov.Nodes[0].Stale || ov.Nodes[0].VMs != 0 || ov.Nodes[1].Stale {
		t.Errorf("staleness: %+v", ov.Nodes)
	}
}

type fakeVersions []policies.Version

func (f fakeVersions) List(_ context.Context, before int64, limit int) (policies.Page, error) {
	var p policies.Page
	for i := len(f) - 1; i >= 0; i-- {
		if before > 0 && f[i].Number >= before {
			continue
		}
		if len(p.Versions) == limit {
			p.NextBefore = p.Versions[limit-1].Number
			break
		}
		p.Versions = append(p.Versions, f[i])
	}
	return p, nil
}

func TestVersionIndex(t *testing.T) {
	var vs fakeVersions
	for i := 1; i <= 1200; i++ {
		js := fmt.Sprintf(`{"rules":[{"name":"r%d"}]}`, i%700) // versions 701+ repeat older configurations
		vs = append(vs, policies.Version{Number: int64(i), JSON: []byte(js)})
	}
	idx := NewVersionIndex(vs, nil)
	if err := idx.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		json string
		want int64
	}{
		{`{"rules":[{"name":"r5"}]}`, 705}, // v5 and v705: the newest
		{`{"rules":[{"name":"r699"}]}`, 699},
		{`{"rules":[{"name":"r0"}]}`, 1400 - 700}, // v700 (v1400 does not exist)
	} {
		if v, ok := idx.Lookup(ConfigHash([]byte(c.json))); !ok || v != c.want {
			t.Errorf("%s: v%d %v, want v%d", c.json, v, ok, c.want)
		}
	}
	if _, ok := idx.Lookup(ConfigHash([]byte("{}"))); ok {
		t.Error("an unknown configuration matched")
	}
	// FNV-1a 64 test vectors.
	if ConfigHash(nil) != "cbf29ce484222325" || ConfigHash([]byte("a")) != "af63dc4c8601ec8c" {
		t.Errorf("FNV-1a 64: %s %s", ConfigHash(nil), ConfigHash([]byte("a")))
	}
	// The publisher wrapper indexes what it publishes.
	pub := idx.Publisher(nil)
	pub.Publish(context.Background(), policies.Version{Number: 1201, JSON: []byte(`{"new":true}`)})
	if v, ok := idx.Lookup(ConfigHash([]byte(`{"new":true}`))); !ok || v != 1201 {
		t.Errorf("published version: %d %v", v, ok)
	}
}

func TestSearch(t *testing.T) {
	s := NewState(Options{})
	r := rep("n", "vm", t0.UnixMilli(), 1, rc("r", 1, 0, 0, 0))
	for _, id := range []string{
		"header:x-api-key=sk_l…9f3a#7c1e",
		"ip:address=10.0.0.1|header:x-api-key=pk_t…0000",
		"ip:address=10.1.2.3",
		"path=/API/Users",
		// The plugin's masks: first 4 characters, "…#", 8 hex digits of FNV-1a 64.
		"header:x-api-key=sk_l…#" + maskHash("sk_live_123456789"),
		"jwt:sub=…#" + maskHash("user-42"),
	} {
		r.Buckets = append(r.Buckets, Bucket{Rule: "r", Identity: id, Tokens: 1, Burst: 1, LastRefill: 1})
	}
	s.Ingest(r, t0)
	exact := "header:x-api-key=sk_l…#" + maskHash("sk_live_123456789")
	contract := "header:x-api-key=sk_l…9f3a#7c1e"
	for _, c := range []struct {
		q    string
		want map[string]bool // identity -> matched only as a candidate
	}{
		{"10.0.0.1", map[string]bool{"ip:address=10.0.0.1|header:x-api-key=pk_t…0000": false}},
		{"api/users", map[string]bool{"path=/API/Users": false}},
		{"sk_live_9f3a77", map[string]bool{contract: true}}, // the exact one's hash says no
		{"x-api-key=pk_test_123", map[string]bool{"ip:address=10.0.0.1|header:x-api-key=pk_t…0000": true}},
		{"sk_l", map[string]bool{contract: false, exact: false}}, // the visible part itself: a plain match
		{"zz_live", nil},
		{"   ", nil},
		// The hash decides: the exact value matches for sure, another one not at all.
		{"sk_live_123456789", map[string]bool{exact: false, contract: true}},
		{"x-api-key=sk_live_000000000", map[string]bool{contract: true}},
		{"user-42", map[string]bool{"jwt:sub=…#" + maskHash("user-42"): false}},
		{"user-43", nil},
	} {
		keys, n := s.Search(t0, c.q, 10)
		got := map[string]bool{}
		for _, k := range keys {
			got[k.Identity] = k.MaskedMatch
		}
		if n != len(c.want) || len(got) != len(c.want) {
			t.Errorf("%q: %d matches %v, want %v", c.q, n, got, c.want)
			continue
		}
		for id, masked := range c.want {
			if m, ok := got[id]; !ok || m != masked {
				t.Errorf("%q: %v, want %v", c.q, got, c.want)
				break
			}
		}
	}
	if maskHash("") != "84222325" { // low 32 bits of FNV-1a 64 of ""
		t.Errorf("maskHash: %s", maskHash(""))
	}
}

func TestTopKeysOrder(t *testing.T) {
	s := NewState(Options{})
	r := rep("n", "vm", t0.UnixMilli(), 1, rc("r", 1, 0, 0, 0))
	r.Buckets = []Bucket{
		{Rule: "r", Identity: "full", Tokens: 10, Burst: 10, LastRefill: 1},
		{Rule: "r", Identity: "empty", Tokens: 0, Burst: 10, LastRefill: 1},
		{Rule: "r", Identity: "rejected-a-lot", Tokens: 5, Burst: 10, LastRefill: 1, Rejects: 50},
		{Rule: "r", Identity: "rejected-a-little", Tokens: 9, Burst: 10, LastRefill: 1, Rejects: 1},
	}
	s.Ingest(r, t0)
	ov := s.Overview(t0.Add(time.Second), OverviewOptions{TopN: 3})
	var got []string
	for _, k := range ov.TopKeys {
		got = append(got, k.Identity)
	}
	if fmt.Sprint(got) != "[rejected-a-lot rejected-a-little empty]" {
		t.Errorf("top keys %v", got)
	}
	// Two minutes later the rejects are no longer recent.
	s.Ingest(rep("n", "vm", t0.UnixMilli(), 2, rc("r", 1, 0, 0, 0)), t0.Add(2*time.Minute))
	ov = s.Overview(t0.Add(2*time.Minute), OverviewOptions{TopN: 1})
	if ov.TopKeys[0].Identity != "empty" || ov.TopKeys[0].Recent != 0 {
		t.Errorf("after 2 minutes: %+v", ov.TopKeys)
	}
}

func TestConcurrentIngestAndRead(t *testing.T) {
	s := NewState(Options{MaxBuckets: 500})
	m := NewMetrics(s)
	start := t0.UnixMilli()
	var wg sync.WaitGroup
	const nodes, reports = 8, 200
	for n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= reports; i++ {
				r := rep(fmt.Sprintf("n%d", n), "vm", start, uint64(i), rc("r", uint64(i), uint64(i/2), 0, 0))
				r.Buckets = []Bucket{{Rule: "r", Identity: fmt.Sprintf("k%d", i%300), Tokens: 1, Burst: 2, LastRefill: float64(i), Rejects: 1}}
				s.Ingest(r, t0.Add(time.Duration(i)*10*time.Millisecond))
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 100 {
			s.Overview(t0.Add(time.Duration(i)*20*time.Millisecond), OverviewOptions{})
			s.Search(t0, "k1", 10)
		}
	}()
	go func() {
		defer wg.Done()
		for range 20 {
			if _, err := m.Registry().Gather(); err != nil {
				t.Error(err)
			}
		}
	}()
	wg.Wait()
	ov := s.Overview(t0.Add(time.Hour/60), OverviewOptions{})
	if got := ruleView(t, ov, "r").Total; got != (Counts{nodes * reports, nodes * reports / 2, 0, 0}) {
		t.Errorf("total after concurrent ingest: %v", got)
	}
}

// orc is a rule's counters with requests decided by an overflow limit
// (cumulative) and the identities sharing one (a gauge).
func orc(rule string, allowed, overflowed, identities uint64) RuleCounters {
	return RuleCounters{Rule: rule, Allowed: allowed, Overflowed: overflowed, OverflowIdentities: identities}
}

// TestOverflowMergeAndRestarts: overflowed is merged like the decisions
// (deltas of cumulative counters, summed over VMs and nodes, a restart
// counting from zero); overflow_identities is the largest of the running
// VMs' last reports.
func TestOverflowMergeAndRestarts(t *testing.T) {
	s := NewState(Options{})
	start := t0.UnixMilli()
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	steps := []struct {
		sec        int
		r          *Report
		res        Result
		total      uint64 // overflowed since the admin first saw the rule
		identities uint64
		reason     string
	}{
		{1, rep("n1", "vm1", start, 1, orc("r", 10, 4, 30)), Accepted, 4, 30, "a fresh VM counts in full"},
		{1, rep("n1", "vm2", start, 1, orc("r", 5, 2, 50)), Accepted, 6, 50, "a second VM: summed; the larger estimate"},
		{2, rep("n1", "vm1", start, 2, orc("r", 20, 10, 0)), Accepted, 12, 50, "deltas; vm2's last report still says 50"},
		{2, rep("n1", "vm2", start, 2, orc("r", 5, 2, 20)), Accepted, 12, 20, "the latest interval only: 50 is gone"},
		{3, rep("n1", "vm2", start, 2, orc("r", 99, 99, 99)), Duplicate, 12, 20, "a duplicate changes nothing"},
		{3, rep("n1", "vm1", start+3000, 1, orc("r", 4, 3, 7)), Accepted, 15, 20, "vm1 restarted: from zero"},
		{4, rep("n1", "vm2", start, 3, orc("r", 6, 1, 0)), Accepted, 16, 7, "overflowed going down alone is a restart"},
		{4, rep("n2", "vm1", start, 1, orc("r", 8, 8, 99)), Accepted, 24, 99, "another node: summed; the largest of every node"},
		{5, rep("n1", "vm1", start+3000, 2, orc("r", 4, 3, 7), orc("other", 1, 1, 500)), Accepted, 24, 99, "another rule's estimate stays its own"},
		{11, rep("n1", "vm1", start+3000, 3, orc("r", 4, 3, 7)), Accepted, 24, 7, "n2 silent for three intervals: its estimate is gone"},
		{12, rep("n1", "vm1", start+3000, 4, rc("r", 5, 0, 0, 0)), Accepted, 24, 0, "a report without the fields reads as 0 (overflowed going down: a restart, adding 0)"},
	}
	for i, st := range steps {
		if res := s.Ingest(st.r, at(st.sec)); res != st.res {
			t.Fatalf("step %d (%s): %v, want %v", i, st.reason, res, st.res)
		}
		ov := s.Overview(at(st.sec), OverviewOptions{Window: time.Minute})
		if got := ruleView(t, ov, "r").Overflow; got.Total != st.total || got.Identities != st.identities {
			t.Errorf("step %d (%s): total %d, identities %d; want %d, %d", i, st.reason, got.Total, got.Identities, st.total, st.identities)
		}
	}
	// The window, and the rate over the last 10 s (seconds 4 to 13 at
	// second 14: 1 + 8 at second 4).
	ov := s.Overview(at(14), OverviewOptions{Window: time.Minute})
	r := ruleView(t, ov, "r")
	if r.Overflow.Window != 24 || r.Overflow.Rate != 0.9 {
		t.Errorf("window %d rate %v, want 24 and 0.9", r.Overflow.Window, r.Overflow.Rate)
	}
	if o := ruleView(t, ov, "other").Overflow; o.Total != 1 || o.Identities != 0 {
		t.Errorf("other: %+v (its VM's last report no longer has it)", o)
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(b), `"overflow":{"window":24,"rate":0.9,"total":24,"identities":0}`) {
		t.Errorf("JSON %s %v", b, err)
	}
}

// TestOverflowOldVMIsABaseline: the first report of a VM that started long
// ago sets the baseline of overflowed, but its estimate shows at once.
func TestOverflowOldVMIsABaseline(t *testing.T) {
	s := NewState(Options{FreshVM: time.Minute})
	start := t0.UnixMilli()
	s.Ingest(rep("n", "vm", start, 600, orc("r", 5000, 400, 12)), t0.Add(600*time.Second))
	ov := s.Overview(t0.Add(600*time.Second), OverviewOptions{})
	if o := ruleView(t, ov, "r").Overflow; o.Total != 0 || o.Identities != 12 {
		t.Errorf("first report: %+v, want a baseline and 12 identities", o)
	}
	s.Ingest(rep("n", "vm", start, 601, orc("r", 5010, 405, 12)), t0.Add(601*time.Second))
	ov = s.Overview(t0.Add(602*time.Second), OverviewOptions{})
	if o := ruleView(t, ov, "r").Overflow; o.Total != 5 || o.Window != 5 || o.Rate != 0.5 {
		t.Errorf("second report: %+v, want its delta of 5", o)
	}
}
