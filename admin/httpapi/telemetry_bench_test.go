package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/auth"
	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/store"
	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/web"
)

// benchBody is a report of node n (rules rules, buckets buckets) whose seq
// is a space-padded 20-character field, rewritten in place per request.
func benchBody(b *testing.B, n, rules, buckets int) (body []byte, setSeq func(uint64)) {
	r := telemetry.Report{V: 1, Node: fmt.Sprintf("envoy-%02d", n), VM: fmt.Sprintf("%08x", 0x3f2a9c00+n), VMStartMS: 1763770000000,
		Seq: 12345678901234567890, SentAtMS: 1763770001000, IntervalMS: 1000, ConfigHash: "9ae1c2d34f00aa11"}
	for i := range rules {
		r.Rules = append(r.Rules, telemetry.RuleCounters{Rule: fmt.Sprintf("rule-%d", i), Allowed: 123456, Rejected: 789})
	}
	for i := range buckets {
		r.Buckets = append(r.Buckets, telemetry.Bucket{Rule: fmt.Sprintf("rule-%d", i%rules),
			Identity: fmt.Sprintf("header:x-api-key=sk_l…%04x#%04x|ip:address=10.%d.%d.%d", i, n, n, i/250, i%250),
			Tokens:   float64(i % 20), Burst: 20, LastRefill: 1763770001.25, Rejects: uint64(i % 7)})
	}
	body, err := json.Marshal(r)
	if err != nil {
		b.Fatal(err)
	}
	at := bytes.Index(body, []byte(`"seq":12345678901234567890`)) + len(`"seq":`)
	return body, func(seq uint64) {
		f := body[at : at+20]
		for i := range f {
			f[i] = ' '
		}
		strconv.AppendUint(f[:0], seq, 10)
	}
}

// benchHandler is the admin's handler with telemetry, on a fresh store.
func benchHandler(b *testing.B) (http.Handler, *telemetry.State, *testClock, *policies.Service, *auth.Manager) {
	ctx := context.Background()
	st, err := store.Open(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	svc := policies.New(st, nil, nil)
	if _, err := svc.Start(ctx); err != nil {
		b.Fatal(err)
	}
	am, _, err := auth.Setup(ctx, st, testToken)
	if err != nil {
		b.Fatal(err)
	}
	clock := &testClock{t: time.Unix(1763770000, 0)}
	state := telemetry.NewState(telemetry.Options{Now: clock.Now})
	h, err := New(Config{Policies: svc, Auth: am, Telemetry: &Telemetry{
		State: state, Tokens: &fakeTokens{tok: telToken}, Metrics: telemetry.NewMetrics(state), Now: clock.Now}})
	if err != nil {
		b.Fatal(err)
	}
	return h, state, clock, svc, am
}

// BenchmarkIngestHTTP: POST /api/v1/telemetry of one typical report (5
// rules, 50 buckets) through the whole handler (security headers, token,
// body limit, decode, validate, apply), in process.
func BenchmarkIngestHTTP(b *testing.B) {
	h, _, _, _, _ := benchHandler(b)
	body, setSeq := benchBody(b, 1, 5, 50)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		setSeq(uint64(i + 1))
		req := httptest.NewRequest("POST", "/api/v1/telemetry", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+telToken)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusNoContent {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

// dashState fills the state like a fleet of 50 nodes (5 rules, 10,000
// buckets) that has reported for 5 minutes.
func dashState(b *testing.B, h http.Handler, clock *testClock) {
	bodies := make([][]byte, 50)
	sets := make([]func(uint64), 50)
	for n := range bodies {
		bodies[n], sets[n] = benchBody(b, n, 5, 200)
	}
	for sec := range 300 {
		clock.Add(time.Second)
		for n := range bodies {
			if sec%30 != 0 && n >= 3 { // most nodes every 30 s: keeps the setup short
				continue
			}
			sets[n](uint64(sec + 1))
			req := httptest.NewRequest("POST", "/api/v1/telemetry", bytes.NewReader(bodies[n]))
			req.Header.Set("Authorization", "Bearer "+telToken)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusNoContent {
				b.Fatalf("%d %s", rec.Code, rec.Body)
			}
		}
	}
}

// BenchmarkDashboardRender: the dashboard's live fragment (what each update
// carries) and the whole page with 50 nodes and 10,000 buckets: the
// numbers computed afresh (the overview cache is defeated by a new second
// each time), the view built and the HTML rendered.
func BenchmarkDashboardRender(b *testing.B) {
	h, state, clock, svc, am := benchHandler(b)
	dashState(b, h, clock)
	if st := state.Stats(); st.Buckets != 10000 || st.Nodes != 50 {
		b.Fatalf("state %+v", st)
	}
	s := &server{Config: Config{Policies: svc, Auth: am, Telemetry: &Telemetry{State: state, Now: clock.Now}}}
	for _, c := range []struct {
		name  string
		query string
		page  bool
	}{{"fragment", "window=5m", false}, {"fragment-search", "window=5m&q=10.7.0", false}, {"page", "window=15m", true}} {
		b.Run(c.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/dashboard?"+c.query, nil)
			size := 0
			b.ReportAllocs()
			for b.Loop() {
				clock.Add(time.Second / 100) // a new second every 100 renders
				p, err := s.dashboardView(req, auth.Session{Author: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				var cw countWriter
				if c.page {
					err = web.Dashboard(p).Render(req.Context(), &cw)
				} else {
					err = web.DashboardFragment(p.Live).Render(req.Context(), &cw)
				}
				if err != nil {
					b.Fatal(err)
				}
				size = int(cw)
			}
			b.ReportMetric(float64(size), "html-bytes")
		})
	}
	// Uncached: a report arrives before each render (so the overview is
	// computed afresh: what an update costs when the fleet is reporting).
	b.Run("fragment-uncached", func(b *testing.B) {
		req := httptest.NewRequest("GET", "/dashboard?window=5m", nil)
		body, setSeq := benchBody(b, 0, 5, 0)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			setSeq(uint64(1_000_000 + i))
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("POST", "/api/v1/telemetry", bytes.NewReader(body))
			r.Header.Set("Authorization", "Bearer "+telToken)
			r.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusNoContent {
				b.Fatal(rec.Code)
			}
			p, _ := s.dashboardView(req, auth.Session{Author: "bench"})
			if err := web.DashboardFragment(p.Live).Render(req.Context(), io.Discard); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type countWriter int

func (w *countWriter) Write(p []byte) (int, error) { *w += countWriter(len(p)); return len(p), nil }
