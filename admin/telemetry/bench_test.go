package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// seqReport is an encoded report whose seq can be rewritten in place: it
// is written as a 20-character field padded with spaces (valid JSON).
type seqReport struct {
	body []byte
	at   int // offset of the seq digits
}

func (r *seqReport) setSeq(seq uint64) {
	field := r.body[r.at : r.at+20]
	for i := range field {
		field[i] = ' '
	}
	strconv.AppendUint(field[:0], seq, 10)
}

// benchReport builds the report of one VM of node n: rules rules and
// buckets buckets spread over them, identities like the plugin's.
func benchReport(tb testing.TB, n, rules, buckets int) *seqReport {
	r := Report{V: 1, Node: fmt.Sprintf("envoy-%02d", n), VM: fmt.Sprintf("%08x", 0x3f2a9c00+n), VMStartMS: t0.UnixMilli(),
		Seq: 12345678901234567890, SentAtMS: t0.UnixMilli() + 1000, IntervalMS: 1000, ConfigHash: "9ae1c2d34f00aa11"}
	for i := range rules {
		r.Rules = append(r.Rules, RuleCounters{Rule: fmt.Sprintf("rule-%d", i), Allowed: 123456, Rejected: 789, ShadowRejected: 12, FailOpen: 1})
	}
	for i := range buckets {
		r.Buckets = append(r.Buckets, Bucket{Rule: fmt.Sprintf("rule-%d", i%rules),
			Identity: fmt.Sprintf("header:x-api-key=sk_l…%04x#%04x|ip:address=10.%d.%d.%d", i, n, n, i/250, i%250),
			Tokens:   float64(i%20) + 0.25, Burst: 20, LastRefill: 1763770041.25, Rejects: uint64(i % 7)})
	}
	b, err := json.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	at := bytes.Index(b, []byte(`"seq":12345678901234567890`)) + len(`"seq":`)
	return &seqReport{body: b, at: at}
}

// BenchmarkDecode: one typical report (5 rules, 50 buckets).
func BenchmarkDecode(b *testing.B) {
	r := benchReport(b, 1, 5, 50)
	b.SetBytes(int64(len(r.body)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.setSeq(uint64(i + 1))
		if _, err := Decode(r.body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeStdlib is the reference: encoding/json into the same
// struct, without any of Decode's checks.
func BenchmarkDecodeStdlib(b *testing.B) {
	r := benchReport(b, 1, 5, 50)
	b.SetBytes(int64(len(r.body)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.setSeq(uint64(i + 1))
		var rep Report
		if err := json.Unmarshal(r.body, &rep); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIngestTypical: decode and apply one typical report (5 rules, 50
// buckets) into a state that already holds 10,000 buckets.
func BenchmarkIngestTypical(b *testing.B) {
	s := NewState(Options{})
	now := t0.Add(time.Second)
	for n := range 50 { // warm: 50 nodes x 200 buckets
		rep, _ := Decode(benchReport(b, n, 5, 200).body)
		s.Ingest(rep, now)
	}
	r := benchReport(b, 99, 5, 50)
	b.SetBytes(int64(len(r.body)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.setSeq(uint64(i + 1))
		rep, err := Decode(r.body)
		if err != nil {
			b.Fatal(err)
		}
		if s.Ingest(rep, now.Add(time.Duration(i)*time.Millisecond)) != Accepted {
			b.Fatal("not accepted")
		}
	}
}

// BenchmarkApply: State.Ingest alone (the report already decoded) of a
// report with 200 buckets, into a state holding 10,000: the time under
// the mutex.
func BenchmarkApply(b *testing.B) {
	s := NewState(Options{})
	now := t0.Add(time.Second)
	for n := range 50 {
		rep, _ := Decode(benchReport(b, n, 5, 200).body)
		s.Ingest(rep, now)
	}
	rep, _ := Decode(benchReport(b, 77, 5, 200).body)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		rep.Seq = uint64(i + 1)
		if s.Ingest(rep, now.Add(time.Duration(i)*time.Millisecond)) != Accepted {
			b.Fatal("not accepted")
		}
	}
}

// BenchmarkSecond50Nodes: one second of a fleet of 50 nodes, one report
// each (5 rules, 200 buckets: 10,000 buckets in all), decoded and applied.
// ns/op is the CPU time one second of reports costs the admin.
func BenchmarkSecond50Nodes(b *testing.B) {
	s := NewState(Options{})
	reports := make([]*seqReport, 50)
	size := 0
	for n := range reports {
		reports[n] = benchReport(b, n, 5, 200)
		size += len(reports[n].body)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now := t0.Add(time.Duration(i+1) * time.Second)
		for _, r := range reports {
			r.setSeq(uint64(i + 1))
			rep, err := Decode(r.body)
			if err != nil {
				b.Fatal(err)
			}
			s.Ingest(rep, now)
		}
	}
	if st := s.Stats(); st.Buckets != 10000 || st.Nodes != 50 {
		b.Fatalf("state %+v", st)
	}
}

// fullState is 50 nodes x 5 rules with 10,000 buckets and 15 minutes of
// history.
func fullState(b *testing.B) (*State, time.Time) {
	s := NewState(Options{})
	reports := make([]*seqReport, 50)
	for n := range reports {
		reports[n] = benchReport(b, n, 5, 200)
	}
	var now time.Time
	for sec := range 900 {
		now = t0.Add(time.Duration(sec+1) * time.Second)
		for n, r := range reports {
			if sec%60 != 0 && n >= 2 { // keep it quick: most nodes report every minute
				continue
			}
			r.setSeq(uint64(sec + 1))
			rep, _ := Decode(r.body)
			for i := range rep.Rules {
				rep.Rules[i].Allowed += uint64(sec * 100)
				rep.Rules[i].Rejected += uint64(sec * 3)
			}
			s.Ingest(rep, now)
		}
	}
	return s, now
}

// BenchmarkOverview: the dashboard's numbers (per-rule charts over 5
// minutes, node health, top 15 keys of 10,000), computed afresh each time.
func BenchmarkOverview(b *testing.B) {
	s, now := fullState(b)
	opts := OverviewOptions{Window: 5 * time.Minute, Points: 150, TopN: 15}
	opts.fill(s.opts.History)
	b.ReportAllocs()
	for b.Loop() {
		s.mu.Lock() // what Overview does when its cache is stale
		ov := s.overview(now, opts)
		s.mu.Unlock()
		if len(ov.TopKeys) != 15 || len(ov.Nodes) != 50 {
			b.Fatalf("%d keys %d nodes", len(ov.TopKeys), len(ov.Nodes))
		}
	}
}

// BenchmarkSearch: a substring search over 10,000 buckets.
func BenchmarkSearch(b *testing.B) {
	s, now := fullState(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.search.keys = nil // defeat the cache
		if _, n := s.Search(now, "10.7.0.1", 50); n == 0 {
			b.Fatal("no match")
		}
	}
}
