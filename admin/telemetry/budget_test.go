package telemetry

import (
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCountersSaturateInsteadOfWrapping(t *testing.T) {
	s := NewState(Options{})
	start := t0.UnixMilli()
	now := t0.Add(time.Second)
	// Within one second: the most a counter can say, a restart to 0, the
	// most again. The total is at its ceiling, not 2^64-2.
	for i, v := range []uint64{math.MaxUint64, 0, math.MaxUint64} {
		r := rep("edge", "vm", start, uint64(i+1), RuleCounters{Rule: "r", Allowed: v, Rejected: min(v, 1), Overflowed: v})
		r.ReportsDropped = v
		r.Buckets = []Bucket{{Rule: "r", Identity: "k", Tokens: 0, Burst: 1, LastRefill: 1, Rejects: v}}
		if res := s.Ingest(r, now); res != Accepted {
			t.Fatalf("report %d: %v", i, res)
		}
	}
	ov := s.Overview(now.Add(time.Second), OverviewOptions{})
	r := ruleView(t, ov, "r")
	if r.Total[Allowed] != math.MaxUint64 || r.Total[Rejected] != 2 || r.Overflow.Total != math.MaxUint64 {
		t.Errorf("rule totals %v, overflow %d; want allowed 2^64-1, rejected 2, overflow 2^64-1", r.Total, r.Overflow.Total)
	}
	if n := ov.Nodes[0]; n.Total[Allowed] != math.MaxUint64 || n.Dropped != math.MaxUint64 {
		t.Errorf("node total %v, dropped %d; want 2^64-1", n.Total, n.Dropped)
	}
	if k := ov.TopKeys[0]; k.Total != math.MaxUint64 {
		t.Errorf("bucket rejects %d, want 2^64-1", k.Total)
	}
	// The per-second slot saturates at its own width.
	if r.Window[Allowed] != math.MaxUint32 {
		t.Errorf("the second's count %d, want 2^32-1", r.Window[Allowed])
	}
	if got := (Counts{math.MaxUint64, 1}).Sum(); got != math.MaxUint64 {
		t.Errorf("Sum wrapped to %d", got)
	}
}

// floodReport is a report of a VM never seen, of a node never seen, with
// 1024 rules named by names (fresh strings, as the decoder makes them).
func floodReport(i int, names func(i, j int) string) *Report {
	r := &Report{V: 1, Node: "probe-" + strconv.Itoa(i), VM: strconv.Itoa(i), VMStartMS: t0.UnixMilli(), Seq: 1,
		SentAtMS: t0.UnixMilli() + 1000, IntervalMS: 1000, Rules: make([]RuleCounters, MaxReportRules)}
	for j := range r.Rules {
		r.Rules[j] = RuleCounters{Rule: names(i, j), Allowed: 1}
	}
	return r
}

func sameNames(_, j int) string  { return "rule-" + strconv.Itoa(j) }
func freshNames(i, j int) string { return "new-" + strconv.Itoa(i) + "-" + strconv.Itoa(j) }

func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A probe with the telemetry token sends 2048 reports of 1024 rules from
// new nodes and VMs, then 2048 of never-seen rule names: the state stays
// within its budget (measured on the heap), refuses what does not fit, and
// a node that was reporting before keeps being counted exactly.
func TestFloodOfNewVMsAndRulesStaysWithinTheBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine, 4M rule entries: ten times slower under the race detector, which has nothing to find here")
	}
	before := heapAfterGC()
	s := NewState(Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	start := t0.UnixMilli()
	now := t0.Add(time.Second)
	seq := uint64(0)
	legit := func(allowed uint64) {
		seq++
		if res := s.Ingest(rep("edge", "vm", start, seq, rc("free", allowed, 0, 0, 0), rc("paid", allowed, 0, 0, 0)), now); res != Accepted {
			t.Fatalf("the known node's report: %v", res)
		}
	}
	legit(10)
	for phase, names := range []func(i, j int) string{sameNames, freshNames} {
		for i := range 2048 {
			now = now.Add(2 * time.Millisecond) // the probe's pace: 4 s for 2048 reports
			// First new nodes and VMs, then the same VMs with new rules.
			r := floodReport(i, names)
			r.Seq = uint64(phase + 1)
			s.Ingest(r, now)
			if i%256 == 0 {
				legit(10 + uint64(phase*2048+i+1))
			}
		}
	}
	legit(10 + 4096)
	grown := int64(heapAfterGC()) - int64(before)
	st := s.Stats()
	t.Logf("heap grew %d MiB; estimated %d MiB of %d MiB; %+v", grown>>20, st.UsedBytes>>20, st.MaxBytes>>20, st)
	if grown > 128<<20 {
		t.Errorf("the flood grew the heap by %d MiB, want under 128 MiB", grown>>20)
	}
	if st.UsedBytes > st.MaxBytes {
		t.Errorf("estimated %d bytes, beyond the budget %d", st.UsedBytes, st.MaxBytes)
	}
	// The estimate is an upper bound of what the state holds.
	if grown > st.UsedBytes+8<<20 {
		t.Errorf("the heap grew by %d bytes, beyond the estimate %d: the cost constants are too low", grown, st.UsedBytes)
	}
	if st.Refused[RefusedNode] == 0 || st.Refused[RefusedRule] == 0 {
		t.Errorf("nothing refused: %+v", st.Refused)
	}
	ov := s.Overview(now.Add(time.Second), OverviewOptions{Window: 15 * time.Minute})
	for _, name := range []string{"free", "paid"} {
		if r := ruleView(t, ov, name); r.Total[Allowed] != 10+4096 {
			t.Errorf("rule %s counted %d, want %d: the known node lost counts", name, r.Total[Allowed], 10+4096)
		}
	}
	runtime.KeepAlive(s)
}

// BenchmarkIngestDuringNeverSeenRulesFlood: a normal report (5 rules, 50
// buckets) of a known node while another goroutine floods the state with
// reports of 1024 never-seen rule names from new nodes and VMs. p99-ms is
// the 99th percentile of one normal report's Ingest, waiting for the lock
// included.
func BenchmarkIngestDuringNeverSeenRulesFlood(b *testing.B) {
	s := NewState(Options{})
	now := t0.Add(time.Second)
	for n := range 50 {
		rep, _ := Decode(benchReport(b, n, 5, 200).body)
		s.Ingest(rep, now)
	}
	normal, _ := Decode(benchReport(b, 99, 5, 50).body)
	normal.Seq = 1
	s.Ingest(normal, now)
	// The probe's VMs are known; each of their reports names 1024 rules
	// never seen (the first ones fill the rule bound, the rest are refused).
	flood := make([]*Report, 64)
	for i := range flood {
		flood[i] = floodReport(i, freshNames)
		s.Ingest(flood[i], now)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var floods int
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				floods = i
				return
			default:
			}
			r := flood[i%len(flood)]
			r.Seq = uint64(i + 2)
			s.Ingest(r, now)
		}
	})
	lat := make([]time.Duration, 0, 1<<16)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		normal.Seq = uint64(i + 2)
		t := time.Now()
		s.Ingest(normal, now)
		lat = append(lat, time.Since(t))
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(floods)/b.Elapsed().Seconds(), "floods/s")
}

// BenchmarkIngestNeverSeenRules: one report of 1024 never-seen rule names
// from a known VM into a full state: the time it holds the lock.
func BenchmarkIngestNeverSeenRules(b *testing.B) {
	s := NewState(Options{})
	now := t0.Add(time.Second)
	flood := make([]*Report, 4)
	for i := range flood {
		flood[i] = floodReport(i, freshNames)
		s.Ingest(flood[i], now)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r := flood[i%len(flood)]
		r.Seq = uint64(i + 2)
		if s.Ingest(r, now) != Accepted {
			b.Fatal("a known VM's report was not accepted")
		}
	}
}

// Past MaxBytes, a new item takes the place of items idle for IdleAfter
// (of any kind), never of items that report; the estimate never passes
// the budget.
func TestByteBudgetForgetsIdleItemsOnly(t *testing.T) {
	s := NewState(Options{History: time.Minute, MaxBytes: 36 << 10})
	start := t0.UnixMilli()
	now := t0.Add(time.Second)
	rules := func(prefix string) []RuleCounters {
		var rs []RuleCounters
		for i := range 4 {
			rs = append(rs, rc(prefix+strconv.Itoa(i), 1, 0, 0, 0))
		}
		return rs
	}
	// Each node: 4 rules and 4 series of about 2 KB each: 36 KiB holds two.
	for i := range 3 {
		s.Ingest(rep("n"+strconv.Itoa(i), "vm", start, 1, rules("n"+strconv.Itoa(i)+"-")...), now)
	}
	st := s.Stats()
	if st.Series != 8 || st.Rules != 8 || st.Refused[RefusedRule] != 4 || st.UsedBytes > st.MaxBytes {
		t.Fatalf("the third node's rules should not fit: %+v", st)
	}
	// n0 keeps reporting; n1 goes idle. After IdleAfter, n2's rules take
	// n1's place (its rules and series), not n0's.
	now = now.Add(IdleAfter)
	s.Ingest(rep("n0", "vm", start, 2, rules("n0-")...), now)
	s.Ingest(rep("n2", "vm", start, 2, rules("n2-")...), now)
	ov := s.Overview(now.Add(time.Second), OverviewOptions{})
	var names []string
	for _, r := range ov.Rules {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "n0-0,n0-1,n0-2,n0-3,n2-0,n2-1,n2-2,n2-3" {
		t.Errorf("rules %s, want n0's (reporting) and n2's (in n1's place)", got)
	}
	if st := s.Stats(); st.UsedBytes > st.MaxBytes {
		t.Errorf("estimated %d bytes, beyond the budget %d", st.UsedBytes, st.MaxBytes)
	}
}

func TestRefusalsAreLoggedAtMostOnceAMinute(t *testing.T) {
	var logs strings.Builder
	s := NewState(Options{MaxNodes: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	start := t0.UnixMilli()
	now := t0.Add(time.Second)
	s.Ingest(rep("edge", "vm", start, 1), now)
	for i := range 5 {
		s.Ingest(rep("probe-"+strconv.Itoa(i), "vm", start, 1), now.Add(time.Duration(i)*time.Second))
	}
	if n := strings.Count(logs.String(), "telemetry bounds reached"); n != 1 {
		t.Fatalf("%d log lines for 5 refusals within a minute, want 1:\n%s", n, logs.String())
	}
	s.Ingest(rep("edge", "vm", start, 2), now.Add(time.Minute))
	s.Ingest(rep("probe-late", "vm", start, 1), now.Add(time.Minute))
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "refused_nodes=1") || !strings.Contains(lines[1], "refused_nodes=5") {
		t.Errorf("want a first line for the first refusal, a second a minute later counting the 5 since:\n%s", logs.String())
	}
}
