package filter_test

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// Fleet mode against a real gRPC rate limit service: several hosts (Envoy
// processes) with two VMs each share one ManualClock; the fake RLS below is
// a gRPC server (go-control-plane's generated RateLimitService) over h2c
// on loopback, with an exact token bucket per (rule, sluice_id) on the
// same clock. SLUICE_RLS_ADDR=host:port points TestFleetMultiHost at
// another RLS instead (the Sluice admin, envoyproxy/ratelimit): the checks
// that need the fake's books are then skipped.

// fakeRLS is an exact token bucket per descriptor, driven by clock.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	clock       *wasmhost.ManualClock
	rate, burst float64
	maxDebt     float64 // how far below empty a charge may take a bucket
	fleetSize   string

	mu       sync.Mutex
	buckets  map[string]*fakeBucket
	granted  float64
	returned float64
	charged  float64 // taken by charges, into debt
	forgiven float64 // charges beyond the debt limit
	calls    int
	nodes    map[string]bool
	down     atomic.Bool
}

type fakeBucket struct {
	tokens float64
	last   time.Time
}

func (s *fakeRLS) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.down.Load() {
		return nil, status.Error(codes.Unavailable, "backend down (test)")
	}
	md, _ := metadata.FromIncomingContext(ctx)
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-sluice-fleet-size", s.fleetSize))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if n := md.Get("x-sluice-node"); len(n) == 1 {
		s.nodes[n[0]] = true
	}
	now := s.clock.Now()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for _, d := range req.Descriptors {
		var rule, id, op string
		for _, e := range d.Entries {
			switch e.Key {
			case "sluice_rule":
				rule = e.Value
			case "sluice_id":
				id = e.Value
			case "sluice_op":
				op = e.Value
			}
		}
		hits := float64(d.GetHitsAddend().GetValue())
		b := s.buckets[rule+"/"+id]
		if b == nil {
			b = &fakeBucket{tokens: s.burst, last: now}
			s.buckets[rule+"/"+id] = b
		}
		if el := now.Sub(b.last).Seconds(); el > 0 {
			b.tokens = math.Min(s.burst, b.tokens+el*s.rate)
			b.last = now
		}
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		switch {
		case op == "return":
			b.tokens = math.Min(s.burst, b.tokens+hits)
			s.returned += hits
		case op == "charge": // never refused: into debt, down to -maxDebt
			taken := math.Max(0, math.Min(hits, b.tokens+s.maxDebt))
			b.tokens -= taken
			s.charged += taken
			s.forgiven += hits - taken
		case b.tokens >= hits:
			b.tokens -= hits
			s.granted += hits
		default:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			wait := (hits - b.tokens) / s.rate
			st.DurationUntilReset = durationpb.New(time.Duration(wait * float64(time.Second)))
		}
		st.LimitRemaining = uint32(max(0, b.tokens))
		resp.Statuses = append(resp.Statuses, st)
	}
	return resp, nil
}

// serveRLS starts a gRPC server on loopback; h2c://addr.
func serveRLS(t *testing.T, srv rlsv3.RateLimitServiceServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, srv)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return "h2c://" + ln.Addr().String()
}

// startFleet starts n hosts of 2 VMs on one clock, calling the RLS at url
// through netcall.
func startFleet(t *testing.T, clock *wasmhost.ManualClock, config, url string, n int) *fleethosts.Fleet {
	t.Helper()
	return fleethosts.Start(t, fleethosts.Options{Config: config, RLS: url, Hosts: n, Clock: clock})
}

func fleetConfig(down string) string {
	return `{"fleet":{"cluster":"rls","timeout_ms":50,"sync_interval_ms":100,"lease_ttl_ms":1000,"lease_max":40,
	  "on_backend_down":"` + down + `"},
	 "rules":[{"name":"g","scope":"global","limit_keys":["header:x-tenant"],"algorithm":"token_bucket",
	   "algorithm_config":{"tokens_per_second":100,"burst":100}}]}`
}

// load is the skewed offer per 20 ms step: host 0 sends 5 requests, host
// 1 two, host 2 one (400 requests/s against a limit of 100/s).
var load = [][2]int{{0, 0}, {0, 1}, {0, 0}, {0, 1}, {0, 0}, {1, 0}, {1, 1}, {2, 1}}

// TestFleetMultiHost: the admitted total across three processes stays
// within the documented bound (burst + rate x T plus the leases
// outstanding at the start, which is none), every admitted token was
// granted by the RLS and never spent twice, and under-admission is at most
// the tokens stranded in leases.
func TestFleetMultiHost(t *testing.T) {
	clock := wasmhost.NewManualClock(t0)
	fake := &fakeRLS{clock: clock, rate: 100, burst: 100, fleetSize: "3",
		buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
	url := serveRLS(t, fake)
	external := os.Getenv("SLUICE_RLS_ADDR")
	if external != "" {
		url = "h2c://" + external
	}
	fh := startFleet(t, clock, fleetConfig("local_share"), url, 3)

	const steps = 150 // 3 s of simulated time
	began := time.Now()
	admitted, perHost := 0, [3]int{}
	var perSecond [3]int
	for s := range steps {
		for _, hv := range load {
			if fh.Request(hv[0], hv[1], "acme") {
				admitted++
				perHost[hv[0]]++
				perSecond[s*20/1000]++
			}
		}
		fh.Step(20 * time.Millisecond)
	}
	fh.CheckNoTraps()
	T := float64(steps) * 0.02
	if external != "" { // a real RLS runs on the wall clock
		T = max(T, time.Since(began).Seconds())
	}
	bound := 100 + 100*T
	t.Logf("admitted %d of %d in %.1fs (per host %v, per second %v); bound %.0f; RLS calls %d, granted %.0f, returned %.0f",
		admitted, steps*len(load), T, perHost, perSecond, bound, fake.calls, fake.granted, fake.returned)
	if float64(admitted) > bound {
		t.Fatalf("admitted %d > burst + rate x T = %.0f", admitted, bound)
	}
	for i, n := range perSecond[1:] { // after the first second, no burst left: rate + outstanding leases
		if external == "" && float64(n) > 100+3*40 {
			t.Errorf("second %d admitted %d > rate + leases outstanding (3 x lease_max)", i+1, n)
		}
	}
	if external != "" {
		return
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if float64(admitted) > fake.granted-fake.returned {
		t.Fatalf("admitted %d > granted %.0f - returned %.0f: a token was spent twice or never granted", admitted, fake.granted, fake.returned)
	}
	// Under-admission: what the RLS granted beyond what was admitted sits
	// in pools, at most lease_max per process.
	if stranded := fake.granted - fake.returned - float64(admitted); stranded > 3*40 {
		t.Fatalf("%.0f granted tokens were never spent (more than 3 x lease_max)", stranded)
	}
	if float64(admitted) < 0.8*bound {
		t.Fatalf("admitted %d: under-admission beyond the leases (bound %.0f)", admitted, bound)
	}
	if len(fake.nodes) != 3 {
		t.Fatalf("x-sluice-node values seen: %v", fake.nodes)
	}
	if g := fh.Metric("sluice.rule.g.global_granted"); float64(g) != fake.granted {
		t.Fatalf("global_granted %d, RLS granted %.0f", g, fake.granted)
	}
	// Calls per process per second, at saturation.
	t.Logf("RLS calls per process per second: %.1f", float64(fake.calls)/3/T)
}

// TestFleetBackendDown: with the RLS failing, leases run out, then each
// process enforces its local share (rate/N, burst/N with N from the
// backend's x-sluice-fleet-size); errors and fallback decisions are
// counted; when the RLS is back, leases resume.
func TestFleetBackendDown(t *testing.T) {
	clock := wasmhost.NewManualClock(t0)
	fake := &fakeRLS{clock: clock, rate: 100, burst: 100, fleetSize: "3",
		buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
	fh := startFleet(t, clock, fleetConfig("local_share"), serveRLS(t, fake), 3)
	run := func(steps int) (admitted [3]int) {
		for range steps {
			for _, hv := range load {
				if fh.Request(hv[0], hv[1], "acme") {
					admitted[hv[0]]++
				}
			}
			fh.Step(20 * time.Millisecond)
		}
		return admitted
	}
	run(25) // healthy; learns fleet size 3
	fake.down.Store(true)
	run(60) // 1.2 s: leases (ttl 1 s) expire
	if fh.Metric("sluice.rule.g.backend_errors") == 0 {
		t.Fatal("no backend_errors counted while the RLS failed")
	}
	before := fh.Metric("sluice.rule.g.fallback_local")
	down := run(100) // 2 s on the local share only
	if fh.Metric("sluice.rule.g.fallback_local") == before {
		t.Fatal("fallback_local not counted")
	}
	// Each process: at most burst/N + rate/N x 2 s = 33.3 + 66.7; host 0
	// offers far more and gets about that much.
	for i, n := range down {
		if float64(n) > 100.0/3+100.0/3*2+1 {
			t.Errorf("host %d admitted %d in 2 s on its local share, more than burst/3 + rate/3 x 2 s", i, n)
		}
	}
	if down[0] < 60 {
		t.Errorf("host 0 admitted only %d in 2 s on its local share (want about 100)", down[0])
	}
	fh.CheckNoTraps()

	fake.down.Store(false)
	grantedBefore := fh.Metric("sluice.rule.g.global_granted")
	run(50)
	if fh.Metric("sluice.rule.g.global_granted") == grantedBefore {
		t.Fatal("no leases granted after the RLS came back")
	}
	fallbackAfter := fh.Metric("sluice.rule.g.fallback_local")
	run(25)
	if fh.Metric("sluice.rule.g.fallback_local") != fallbackAfter {
		t.Fatal("still falling back after recovery")
	}
	fh.CheckNoTraps()
}

// TestFleetBackendDownModes: on_backend_down allow admits everything and
// deny rejects everything once the lease is gone.
func TestFleetBackendDownModes(t *testing.T) {
	for _, mode := range []string{"allow", "deny"} {
		t.Run(mode, func(t *testing.T) {
			clock := wasmhost.NewManualClock(t0)
			fake := &fakeRLS{clock: clock, rate: 100, burst: 100, fleetSize: "1",
				buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
			fake.down.Store(true)
			fh := startFleet(t, clock, fleetConfig(mode), serveRLS(t, fake), 1)
			got := 0
			for range 50 {
				for range 4 {
					if fh.Request(0, 0, "acme") {
						got++
					}
				}
				fh.Step(20 * time.Millisecond)
			}
			want := map[string]int{"allow": 200, "deny": 0}[mode]
			if got != want {
				t.Fatalf("admitted %d of 200, want %d", got, want)
			}
			if fh.Metric("sluice.rule.g.fallback_local") == 0 || fh.Metric("sluice.rule.g.backend_errors") == 0 {
				t.Fatal("fallback or backend errors not counted")
			}
			fh.CheckNoTraps()
		})
	}
}

// TestFleetGarbageResponses: whatever the service answers (bad frames,
// huge declared lengths, compressed frames, wrong grpc-status, HTTP
// errors, the wrong number of statuses, random bytes), the filter never
// traps, counts a backend error and falls back.
func TestFleetGarbageResponses(t *testing.T) {
	frame := func(b []byte) []byte {
		return append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
	}
	answers := []struct {
		name       string
		httpStatus int
		grpc       string // grpc-status trailer ("" none)
		body       []byte
	}{
		{"short frame", 200, "0", []byte{0, 0}},
		{"huge length", 200, "0", []byte{0, 0xff, 0xff, 0xff, 0xff, 1, 2}},
		{"compressed", 200, "0", []byte{1, 0, 0, 0, 0}},
		{"truncated message", 200, "0", frame([]byte{0x12, 0x09, 0x08})},
		{"no statuses", 200, "0", frame([]byte{0x08, 0x01})},
		{"grpc error", 200, "14", nil},
		{"no grpc-status", 200, "", frame(nil)},
		{"grpc-status junk", 200, "zero", frame(nil)},
		{"http 503", 503, "0", nil},
		{"random bytes", 200, "0", []byte("\x00\x00\x00\x00\x07\xff\xfe\xfd\xfc\xfb\xfa\xf9")},
	}
	for _, a := range answers {
		t.Run(a.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("content-type", "application/grpc")
				if a.grpc != "" {
					w.Header().Set("Trailer", "grpc-status")
				}
				w.WriteHeader(a.httpStatus)
				_, _ = w.Write(a.body)
				if a.grpc != "" {
					w.Header().Set("grpc-status", a.grpc)
				}
			})}
			srv.Protocols.SetUnencryptedHTTP2(true)
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = srv.Close() })
			clock := wasmhost.NewManualClock(t0)
			fh := startFleet(t, clock, fleetConfig("allow"), "h2c://"+ln.Addr().String(), 1)
			for range 10 {
				if !fh.Request(0, 1, "acme") {
					t.Fatal("rejected; on_backend_down allow should admit")
				}
				fh.Step(50 * time.Millisecond)
			}
			if fh.Metric("sluice.rule.g.backend_errors") == 0 {
				t.Fatal("no backend error counted")
			}
			if fh.Metric("sluice.rule.g.global_granted") != 0 {
				t.Fatal("tokens granted from a garbage answer")
			}
			fh.CheckNoTraps()
		})
	}
}

// TestFleetReturnsIdleLeases: leases sized from demand are returned to
// the RLS once their key goes idle, and counted.
func TestFleetReturnsIdleLeases(t *testing.T) {
	clock := wasmhost.NewManualClock(t0)
	fake := &fakeRLS{clock: clock, rate: 100, burst: 100, fleetSize: "1",
		buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
	fh := startFleet(t, clock, fleetConfig("deny"), serveRLS(t, fake), 1)
	for range 50 { // 50 requests/s, half the limit: leases stay ahead of demand
		if !fh.Request(0, 0, "acme") {
			t.Fatal("rejected below the limit")
		}
		fh.Step(20 * time.Millisecond)
	}
	for range 20 { // idle
		fh.Step(50 * time.Millisecond)
	}
	fake.mu.Lock()
	granted, returned := fake.granted, fake.returned
	fake.mu.Unlock()
	if returned == 0 {
		t.Fatalf("nothing returned (granted %.0f)", granted)
	}
	if got := fh.Metric("sluice.rule.g.global_returned"); float64(got) != returned {
		t.Fatalf("global_returned %d, RLS saw %.0f returned", got, returned)
	}
	if granted-returned != 50 {
		t.Fatalf("granted %.0f - returned %.0f != the 50 admitted: tokens stranded after idling", granted, returned)
	}
	fh.CheckNoTraps()
}

// fleetTelemetryReport runs a fleet-mode filter with telemetry for 1.2 s
// of traffic and returns its last report.
func fleetTelemetryReport(t *testing.T) []byte {
	t.Helper()
	clock := wasmhost.NewManualClock(t0)
	fake := &fakeRLS{clock: clock, rate: 100, burst: 100, fleetSize: "2",
		buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
	cfg := `{"telemetry":{"cluster":"admin","token":"tok","interval_ms":1000},` + fleetConfig("allow")[1:]
	fh := startFleet(t, clock, cfg, serveRLS(t, fake), 1)
	for range 60 {
		fh.Request(0, 0, "acme")
		fh.Step(20 * time.Millisecond)
	}
	var last []byte
	n := 0
	for len(fh.Reports) > 0 {
		last = <-fh.Reports
		n++
	}
	if n < 1 || n > 4 { // 1.2 s, two VMs, one report per VM per second
		t.Fatalf("%d reports in 1.2 s", n)
	}
	return last
}

// TestFleetTelemetry: reports carry the fleet object (per global rule:
// lease tokens, pools, fallback state, the process's view), and telemetry
// still reports at its own interval though on_tick runs at the sync
// interval.
func TestFleetTelemetry(t *testing.T) {
	last := fleetTelemetryReport(t)
	sharedDecode(t, last)
	var rep struct {
		Fleet *struct {
			Healthy   bool `json:"backend_healthy"`
			FleetSize int  `json:"fleet_size"`
			Rules     []struct {
				Rule     string  `json:"rule"`
				Lease    float64 `json:"lease_tokens"`
				Pools    int     `json:"pools"`
				Fallback bool    `json:"fallback_active"`
			} `json:"rules"`
		} `json:"fleet"`
	}
	if err := json.Unmarshal(last, &rep); err != nil || rep.Fleet == nil {
		t.Fatalf("report %s: %v", last, err)
	}
	if !rep.Fleet.Healthy || rep.Fleet.FleetSize != 2 || len(rep.Fleet.Rules) != 1 || rep.Fleet.Rules[0].Rule != "g" ||
		rep.Fleet.Rules[0].Fallback || rep.Fleet.Rules[0].Pools != 1 {
		t.Fatalf("fleet object %s", last)
	}
}

// TestFleetPausedRequestsShareOneAsk: requests of one VM that find the same
// empty pool wait for one RLS call; a waiter whose stream is reset meanwhile
// is forgotten; the call's grant resumes the others. Calls are answered by
// hand here (no handler), so nothing races.
func TestFleetPausedRequestsShareOneAsk(t *testing.T) {
	f := start(t, fleetConfig("deny"), 1)
	var paused []*wasmhost.Result
	for range 3 {
		res := f.do("x-tenant", "acme")
		if !res.Paused {
			t.Fatalf("not paused for the lease: %+v", res)
		}
		paused = append(paused, res)
	}
	calls := f.h.PendingCalls()
	if len(calls) != 1 {
		t.Fatalf("%d RLS calls for one key, want 1", len(calls))
	}
	c := calls[0]
	if c.Cluster != "rls" || c.Header(":path") != "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" ||
		c.Header("content-type") != "application/grpc" || c.Header("te") != "trailers" || c.Header("x-sluice-node") == "" ||
		c.Timeout != 50*time.Millisecond {
		t.Fatalf("call %+v", c)
	}
	req := &rlsv3.RateLimitRequest{}
	if len(c.Body) < 5 || proto.Unmarshal(c.Body[5:], req) != nil || req.Domain != "sluice" || len(req.Descriptors) != 1 {
		t.Fatalf("request body %x", c.Body)
	}
	d := req.Descriptors[0]
	if len(d.Entries) != 2 || d.Entries[0].Key != "sluice_rule" || d.Entries[0].Value != "g" || d.Entries[1].Key != "sluice_id" ||
		len(d.Entries[1].Value) != 32 || d.GetHitsAddend().GetValue() < 1 {
		t.Fatalf("descriptor %v", d)
	}
	if err := paused[1].Stream.Reset(); err != nil {
		t.Fatal(err)
	}
	resp, _ := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 90}}})
	body := append([]byte{0, 0, 0, 0, byte(len(resp))}, resp...)
	if err := c.RespondWithTrailers([]wasmhost.Header{{":status", "200"}, {"content-type", "application/grpc"}},
		body, []wasmhost.Header{{"grpc-status", "0"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	granted := d.GetHitsAddend().GetValue()
	for _, i := range []int{0, 2} {
		final, err := paused[i].Stream.Complete(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64(i/2+1) <= granted; final.Rejected == want {
			t.Fatalf("request %d: rejected=%v with %d tokens granted", i, final.Rejected, granted)
		}
	}
	if v := f.metric("sluice.rule.g.global_fetches"); v != 1 {
		t.Fatalf("global_fetches %d", v)
	}
	if v := f.metric("sluice.panics_recovered"); v != 0 {
		t.Fatalf("panics %d", v)
	}
}

// grant answers an RLS call by hand: every descriptor OK. It returns the
// descriptors' sluice_ids.
func grant(t *testing.T, c *wasmhost.HTTPCall) []string {
	t.Helper()
	req := &rlsv3.RateLimitRequest{}
	if len(c.Body) < 5 || proto.Unmarshal(c.Body[5:], req) != nil {
		t.Fatalf("call body %x", c.Body)
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.Descriptors {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	b, _ := proto.Marshal(resp)
	body := append([]byte{0, 0, 0, byte(len(b) >> 8), byte(len(b))}, b...)
	if err := c.RespondWithTrailers([]wasmhost.Header{{":status", "200"}}, body, []wasmhost.Header{{"grpc-status", "0"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range req.Descriptors {
		for _, e := range d.Entries {
			if e.Key == "sluice_id" {
				ids = append(ids, e.Value)
			}
		}
	}
	return ids
}

// TestFleetOneSyncPerProcess: however many VMs have keys to refill, a tick
// sends at most one sync per process (the shared-data lock), and that sync
// refills the keys of every VM (each VM publishes its hot keys).
func TestFleetOneSyncPerProcess(t *testing.T) {
	f := start(t, fleetConfig("deny"), 4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ids := map[string]int{} // sluice_id -> the VM using it
	for vm := range 4 {     // each VM leases its own key
		res := f.doOn(vm, rq("x-tenant", "t"+strconv.Itoa(vm)))
		calls := f.h.PendingCalls()
		if !res.Paused || len(calls) != 1 {
			t.Fatalf("vm %d: paused %v, %d calls", vm, res.Paused, len(calls))
		}
		for _, id := range grant(t, calls[0]) {
			ids[id] = vm
		}
		if final, err := res.Stream.Complete(ctx, nil); err != nil || final.Rejected {
			t.Fatalf("vm %d: %+v %v", vm, final, err)
		}
	}
	refilled := map[int]bool{}
	for round := range 6 {
		f.clock.Advance(100 * time.Millisecond)
		for vm := range 4 { // 30 requests/s per key: pools run low
			for range 3 {
				if res := f.doOn(vm, rq("x-tenant", "t"+strconv.Itoa(vm))); res.Paused || res.Rejected {
					t.Fatalf("round %d vm %d: paused %v rejected %v", round, vm, res.Paused, res.Rejected)
				}
			}
		}
		if err := f.h.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		calls := f.h.PendingCalls()
		if len(calls) > 1 {
			t.Fatalf("round %d: %d syncs in flight in one process", round, len(calls))
		}
		for _, c := range calls {
			for _, id := range grant(t, c) {
				refilled[ids[id]] = true
			}
		}
	}
	if len(refilled) != 4 {
		t.Fatalf("the syncs refilled the keys of VMs %v, want all four", refilled)
	}
}

// TestFleetPoolsSurviveReconfigure: a configuration update keeps the pools
// (shared data) and the leases in them, and keys pools by rule name; with
// max_keys 0 a pool has its exact key fl:{rule}:={sluice_id}.
func TestFleetPoolsSurviveReconfigure(t *testing.T) {
	cfg := strings.Replace(fleetConfig("deny"), `"scope":"global",`, `"scope":"global","max_keys":0,`, 1)
	f := start(t, cfg, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := f.do("x-tenant", "acme")
	calls := f.h.PendingCalls()
	if !res.Paused || len(calls) != 1 {
		t.Fatalf("paused %v, %d calls", res.Paused, len(calls))
	}
	ids := grant(t, calls[0])
	if final, err := res.Stream.Complete(ctx, nil); err != nil || final.Rejected {
		t.Fatalf("%+v %v", final, err)
	}
	if _, _, st := f.h.SharedData().Get("fl:g:=" + ids[0]); st != wasmhost.StatusOK {
		t.Fatalf("no exact pool key fl:g:=%s: %v", ids[0], st)
	}
	if err := f.h.Reconfigure(ctx, []byte(strings.Replace(cfg, `"burst":100`, `"burst":150`, 1))); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if res := f.do("x-tenant", "acme"); res.Paused || res.Rejected {
			t.Fatalf("request %d after the update: paused %v rejected %v (the lease was lost)", i, res.Paused, res.Rejected)
		}
	}
	if n := len(f.h.PendingCalls()); n != 0 {
		t.Fatalf("%d RLS calls after the update", n)
	}
}

// TestFleetSyncOrdersTiedPoolsByRuleAndID: pools a sync treats alike (here
// eight idle leases, all returned) go in the call by rule, then sluice_id,
// not in the order a map handed them out, so that the same state always
// makes the same call.
func TestFleetSyncOrdersTiedPoolsByRuleAndID(t *testing.T) {
	f := start(t, fleetConfig("deny"), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 8 {
		res := f.doOn(0, rq("x-tenant", "t"+strconv.Itoa(i)))
		calls := f.h.PendingCalls()
		if !res.Paused || len(calls) != 1 {
			t.Fatalf("tenant %d: paused %v, %d calls", i, res.Paused, len(calls))
		}
		grant(t, calls[0])
		if final, err := res.Stream.Complete(ctx, nil); err != nil || final.Rejected {
			t.Fatalf("tenant %d: %+v %v", i, final, err)
		}
	}
	f.clock.Advance(300 * time.Millisecond) // every pool idle
	if err := f.h.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	calls := f.h.PendingCalls()
	if len(calls) != 1 {
		t.Fatalf("%d calls after the idle tick, want one sync", len(calls))
	}
	ids := grant(t, calls[0])
	if len(ids) != 8 || !slices.IsSorted(ids) {
		t.Fatalf("returns in the order %v, want the eight sluice_ids sorted", ids)
	}
}
