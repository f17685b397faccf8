package fleet

import (
	"context"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/pggcra"
	"github.com/sluice-rl/sluice/admin/fleet/redisgcra"
)

// rls is a Server behind a real gRPC listener on 127.0.0.1 (HTTP/2 over
// cleartext) and a client of the generated types.
type rls struct {
	srv    *Server
	client rlsv3.RateLimitServiceClient
	addr   string
}

func startRLS(t testing.TB, o Options) *rls {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis, time.Hour) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &rls{srv: srv, client: rlsv3.NewRateLimitServiceClient(conn), addr: lis.Addr().String()}
}

func redisBackend(t testing.TB, addr string) *redisgcra.Buckets {
	t.Helper()
	c, err := redisgcra.NewClient(redisgcra.ClientOptions{Addrs: []string{addr}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return redisgcra.New(c)
}

func postgresBackend(t testing.TB, url string) *pggcra.Buckets {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := pggcra.Open(ctx, pggcra.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// backends are the bucket stores the protocol's tests run against: the
// answers must not depend on which one the admin has.
var backends = []struct {
	name  string
	start func(t testing.TB) Backend
}{
	{"redis", func(t testing.TB) Backend { return redisBackend(t, fleettest.StartRedis(t).Addr) }},
	{"postgres", func(t testing.TB) Backend {
		return postgresBackend(t, fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL)
	}},
}

func forEachBackend(t *testing.T, test func(t *testing.T, b Backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, b.start(t)) })
	}
}

// desc builds a protocol descriptor; hits < 0 leaves hits_addend unset.
func desc(rule, id string, hits int64, ret bool) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
		{Key: KeyRule, Value: rule}, {Key: KeyID, Value: id}}}
	if ret {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyOp, Value: OpReturn})
	}
	if hits >= 0 {
		d.HitsAddend = wrapperspb.UInt64(uint64(hits))
	}
	return d
}

// opDesc is desc (hits_addend hits, unset when < 0) with the operation
// sluice_op op: the descriptor of a charge or a block.
func opDesc(rule, id string, hits int64, op string) *ratelimitv3.RateLimitDescriptor {
	d := desc(rule, id, hits, false)
	d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: KeyOp, Value: op})
	return d
}

func (r *rls) call(t *testing.T, node string, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if node != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, NodeHeader, node)
	}
	var hdr metadata.MD
	resp, err := r.client.ShouldRateLimit(ctx, req, grpc.Header(&hdr))
	return resp, hdr, err
}

func (r *rls) mustCall(t *testing.T, node string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, _, err := r.call(t, node, &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

func checkStatus(t *testing.T, what string, st *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, remaining uint32) {
	t.Helper()
	if st.Code != code || st.LimitRemaining != remaining {
		t.Fatalf("%s: code %v remaining %d, want %v remaining %d (%v)", what, st.Code, st.LimitRemaining, code, remaining, st)
	}
}

func TestRLSOverGRPC(t *testing.T) { forEachBackend(t, testRLSOverGRPC) }

func testRLSOverGRPC(t *testing.T, b Backend) {
	// 1 token per 1000 s: nothing refills while the test runs.
	rules := &StaticRules{Limits: map[string]redisgcra.Limit{"api": {Rate: 0.001, Burst: 10}}}
	m := NewMetrics()
	// Correctness, not speed: a loaded CI machine is slow, not down.
	s := startRLS(t, Options{Backend: b, Rules: rules, Metrics: m, Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	resp := s.mustCall(t, "n1", desc("api", "A", 4, false))
	checkStatus(t, "take 4 of 10", resp.Statuses[0], OK, 6)
	cl := resp.Statuses[0].CurrentLimit
	if cl.Name != "api" || cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR || cl.RequestsPerUnit != 4 {
		t.Errorf("current_limit = %v, want api 4 per HOUR (0.001/s = 3.6/h rounded)", cl)
	}
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d > 4000*time.Second || d < 3990*time.Second {
		t.Errorf("duration_until_reset = %v, want the 4000 s 4 tokens take to refill", d)
	}
	resp = s.mustCall(t, "n1", desc("api", "A", 7, false))
	checkStatus(t, "take 7 with 6 left", resp.Statuses[0], OVER, 6)
	if resp.OverallCode != OVER {
		t.Errorf("overall_code = %v, want OVER_LIMIT", resp.OverallCode)
	}

	// Each descriptor is its own all-or-nothing bucket operation; the
	// overall code is OK only if every one is.
	resp = s.mustCall(t, "n2", desc("api", "A", 6, false), desc("api", "B", 11, false), desc("api", "B", 10, false))
	checkStatus(t, "A takes its last 6", resp.Statuses[0], OK, 0)
	checkStatus(t, "B asks for 11 > burst", resp.Statuses[1], OVER, 10)
	checkStatus(t, "B takes its 10", resp.Statuses[2], OK, 0)
	if resp.OverallCode != OVER {
		t.Errorf("overall_code = %v, want OVER_LIMIT", resp.OverallCode)
	}

	huge := desc("api", "C", 0, false)
	huge.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	resp = s.mustCall(t, "n2", huge)
	checkStatus(t, "C asks for 2^64-1 tokens", resp.Statuses[0], OVER, 10)

	// Returns: credited, always OK, and the tokens can be taken again.
	resp = s.mustCall(t, "n1", desc("api", "A", 3, true))
	checkStatus(t, "return 3", resp.Statuses[0], OK, 3)
	resp = s.mustCall(t, "n1", desc("api", "A", 5, true), desc("api", "A", 100, true))
	checkStatus(t, "return 5 more", resp.Statuses[0], OK, 8)
	checkStatus(t, "return more than was taken: full, no more", resp.Statuses[1], OK, 10)

	// The request's hits_addend when the descriptor has none.
	resp, _, err := s.call(t, "n1", &rlsv3.RateLimitRequest{Domain: "sluice", HitsAddend: 3,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "A", -1, false)}})
	if err != nil {
		t.Fatal(err)
	}
	checkStatus(t, "request hits_addend 3", resp.Statuses[0], OK, 7)
	resp = s.mustCall(t, "n1", desc("api", "A", -1, false))
	checkStatus(t, "no hits_addend anywhere: 1", resp.Statuses[0], OK, 6)
	resp = s.mustCall(t, "n1", desc("api", "A", 0, false))
	checkStatus(t, "hits_addend 0: a query", resp.Statuses[0], OK, 6)

	// Domains are separate bucket spaces.
	resp, _, err = s.call(t, "n1", &rlsv3.RateLimitRequest{Domain: "other",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "A", 10, false)}})
	if err != nil {
		t.Fatal(err)
	}
	checkStatus(t, "same rule and id in another domain", resp.Statuses[0], OK, 0)

	// Metrics.
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("api", "granted")); got != 4+6+10+3+1+10 {
		t.Errorf("granted tokens = %g, want 34", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("api", "returned")); got != 108 {
		t.Errorf("returned tokens = %g, want 108", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues(RequestOverLimit)); got != 3 {
		t.Errorf("over_limit requests = %g, want 3", got)
	}
	if got := testutil.ToFloat64(m.descriptors.WithLabelValues(DescriptorReturn)); got != 3 {
		t.Errorf("return descriptors = %g, want 3", got)
	}
	if h := s.srv.Health(); !h.Up || h.Errors != 0 {
		t.Errorf("health = %+v, want up", h)
	}
}

func TestRLSFleetSizeAndUsage(t *testing.T) {
	r := fleettest.StartRedis(t)
	rules := &StaticRules{Limits: map[string]redisgcra.Limit{"api": {Rate: 0.001, Burst: 100}}}
	// The server's health check reads the clock from its own goroutine.
	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	s := startRLS(t, Options{Backend: redisBackend(t, r.Addr), Rules: rules, Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	size := func(node string) string {
		t.Helper()
		_, hdr, err := s.call(t, node, &rlsv3.RateLimitRequest{Domain: "sluice",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", node+"-id", 5, false)}})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(hdr.Get(FleetHeader), ",")
	}
	if got := size("n1"); got != "1" {
		t.Errorf("fleet size after n1 = %q, want 1", got)
	}
	size("n2")
	if got := size("n3"); got != "3" {
		t.Errorf("fleet size after n1..n3 = %q, want 3", got)
	}
	if got := size("n1"); got != "3" {
		t.Errorf("n1 again: %q, want 3", got)
	}
	advance(20 * time.Second)
	if got := size("n1"); got != "3" {
		t.Errorf("20 s later: %q, want 3", got)
	}
	advance(15 * time.Second) // n2 and n3 last called 35 s ago
	if got := size("n4"); got != "2" {
		t.Errorf("35 s later, n1 and n4: %q, want 2", got)
	}
	if got := size(""); got != "2" {
		t.Errorf("a caller without a node id: %q, want 2", got)
	}

	advance(time.Second)
	u := s.srv.Usage()
	if len(u) != 1 || u[0].Rule != "api" || u[0].Domain != "sluice" {
		t.Fatalf("usage = %+v, want one rule", u)
	}
	// In the 10 s before now only n4 and "" (35 s mark) took 5 each.
	if u[0].GrantedPerSecond != 1 {
		t.Errorf("granted per second = %g, want 10 tokens / 10 s", u[0].GrantedPerSecond)
	}
	var nodes []string
	for _, n := range u[0].Nodes {
		nodes = append(nodes, n.Node)
		if n.LastLease != 5 {
			t.Errorf("node %q last lease %d, want 5", n.Node, n.LastLease)
		}
	}
	if got := strings.Join(nodes, ","); got != ",n1,n2,n3,n4" {
		t.Errorf("nodes = %q", got)
	}
}

func TestRLSUnknownRulesAndOverrides(t *testing.T) {
	forEachBackend(t, testRLSUnknownRulesAndOverrides)
}

func testRLSUnknownRulesAndOverrides(t *testing.T, b Backend) {
	m := NewMetrics()
	s := startRLS(t, Options{Backend: b, Rules: &StaticRules{}, Metrics: m, Timeout: time.Second})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT

	resp := s.mustCall(t, "n1", desc("nope", "A", 1000, false),
		&ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "x"}}})
	for i, st := range resp.Statuses {
		if st.Code != OK || st.CurrentLimit != nil {
			t.Errorf("status %d = %v, want OK without a limit", i, st)
		}
	}
	if got := testutil.ToFloat64(m.descriptors.WithLabelValues(DescriptorUnlimited)); got != 2 {
		t.Errorf("unlimited descriptors = %g, want 2", got)
	}

	withLimit := func(hits int64, per uint32, unit typev3.RateLimitUnit) *ratelimitv3.RateLimitDescriptor {
		d := desc("perminute", "A", hits, false)
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: per, Unit: unit}
		return d
	}
	resp = s.mustCall(t, "n1", withLimit(5, 5, typev3.RateLimitUnit_MINUTE))
	checkStatus(t, "override 5/min: take 5", resp.Statuses[0], OK, 0)
	cl := resp.Statuses[0].CurrentLimit
	if cl.RequestsPerUnit != 5 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("current_limit = %v, want the override echoed", cl)
	}
	resp = s.mustCall(t, "n1", withLimit(1, 5, typev3.RateLimitUnit_MINUTE))
	checkStatus(t, "override 5/min: a 6th", resp.Statuses[0], OVER, 0)
	resp = s.mustCall(t, "n1", withLimit(1, 0, typev3.RateLimitUnit_SECOND))
	checkStatus(t, "override 0/s", resp.Statuses[0], OVER, 0)
	if got := testutil.ToFloat64(m.tokens.WithLabelValues(otherRule, "granted")); got != 5 {
		t.Errorf("granted tokens of overrides = %g, want 5 under %q", got, otherRule)
	}
}

func TestRLSRedisDownAnswersUnavailableFastAndRecovers(t *testing.T) {
	r := fleettest.StartRedis(t)
	c, err := redisgcra.NewClient(redisgcra.ClientOptions{Addrs: []string{r.Addr}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	testBackendDown(t, redisgcra.New(c), NewMetrics(), "Redis", outage{hang: r.Pause, stop: r.Kill, start: r.Start})
}

func TestRLSPostgresDownAnswersUnavailableFastAndRecovers(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	b := postgresBackend(t, pg.URL)
	testBackendDown(t, b, NewMetricsFor(BackendPostgres), "PostgreSQL", outage{hang: pg.Pause, stop: pg.Stop, start: pg.Start})
}

// callUntilOK calls until an answer comes, for at most 50 tries 20 ms
// apart.
func callUntilOK(t *testing.T, s *rls, req *rlsv3.RateLimitRequest) error {
	t.Helper()
	var err error
	for range 50 {
		if _, _, err = s.call(t, "n1", req); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// outage drives a backend server: hang it (nothing answers), stop it
// (connections closed, then refused), start it again on the same address.
type outage struct{ hang, stop, start func() }

// The calls carry a bucket and a global fixed window: both are answered
// again once the backend is back.
func testBackendDown(t *testing.T, b Backend, m *Metrics, what string, o outage) {
	rules := &StaticRules{Limits: map[string]redisgcra.Limit{"api": {Rate: 1000, Burst: 1000}},
		Windows: map[string]Window{"win": {Limit: 1_000_000, Seconds: 3600}}}
	const budget = 100 * time.Millisecond
	s := startRLS(t, Options{Backend: b, Rules: rules, Metrics: m, Timeout: budget})
	req := &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("api", "A", 1, false), desc("win", "A", 1, false)}}
	// Up first (a cold connection on a loaded machine may miss the budget).
	if err := callUntilOK(t, s, req); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(m.requests.WithLabelValues(RequestUnavailable))
	unavailable := func(state, kind string) {
		t.Helper()
		state = what + " " + state
		before := testutil.ToFloat64(m.redisErrors.WithLabelValues(kind))
		start := time.Now()
		_, hdr, err := s.call(t, "n1", req)
		took := time.Since(start)
		if got := hdr.Get(FleetHeader); len(got) != 1 || got[0] != "1" {
			t.Errorf("%s: fleet size header %q, want it with the error too", state, got)
		}
		t.Logf("%s: %v after %v", state, err, took)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("%s: err = %v, want UNAVAILABLE", state, err)
		}
		// Not a benchmark: a bound an order of magnitude above the budget,
		// that a call waiting on a dead backend (seconds of TCP timeouts
		// and retries) would exceed.
		if took > 10*budget {
			t.Errorf("%s: UNAVAILABLE after %v, want within about the %v budget", state, took, budget)
		}
		if got := testutil.ToFloat64(m.redisErrors.WithLabelValues(kind)); got != before+1 {
			t.Errorf("%s: backend errors{kind=%q} %g -> %g, want +1", state, kind, before, got)
		}
		if s.srv.Health().Up {
			t.Errorf("%s: health still up", state)
		}
	}

	o.hang() // connections open, no answers
	unavailable("hung", "timeout")
	o.stop() // dead: connections reset, then refused
	unavailable("stopped", "error")
	unavailable("still down", "error")
	if got := testutil.ToFloat64(m.requests.WithLabelValues(RequestUnavailable)); got != before+3 {
		t.Errorf("unavailable requests = %g, want %g", got, before+3)
	}

	o.start() // a new server on the same address
	if err := callUntilOK(t, s, req); err != nil {
		t.Fatalf("no recovery after %s came back: %v", what, err)
	}
	if h := s.srv.Health(); !h.Up || h.Errors < 3 || h.LastError == "" {
		t.Errorf("health after recovery = %+v", h)
	}
}

// A caller that has given up (its context is done: in gRPC, its deadline
// passed or it reset the stream) gets no answer, but its backend call still
// runs to its end rather than being cut off with an unknown effect, and the
// tokens it took go back to the bucket: the whole burst is still there for
// the next caller, and the call is counted as abandoned.
func TestRLSGivesBackTheGrantOfACallerThatGaveUp(t *testing.T) {
	rules := &StaticRules{Limits: map[string]redisgcra.Limit{"api": {Rate: 0.001, Burst: 10}}}
	m := NewMetrics()
	s := startRLS(t, Options{Backend: redisBackend(t, fleettest.StartRedis(t).Addr), Rules: rules, Metrics: m, Timeout: 5 * time.Second})

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.srv.ShouldRateLimit(gone, &rlsv3.RateLimitRequest{Domain: "sluice",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api", "A", 10, false)}})
	if status.Code(err) != codes.Canceled {
		t.Fatalf("the call of a caller that gave up ended with %v, want Canceled (the backend call run, not cut off)", err)
	}
	if n := testutil.ToFloat64(m.requests.WithLabelValues(RequestAbandoned)); n != 1 {
		t.Errorf("abandoned calls = %v, want 1", n)
	}
	resp := s.mustCall(t, "n1", desc("api", "A", 10, false))
	checkStatus(t, "the whole burst after the abandoned call", resp.Statuses[0], rlsv3.RateLimitResponse_OK, 0)
}
