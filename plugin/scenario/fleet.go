package scenario

// Fleet mode: a "scope": "global" rule leases tokens from a rate limit
// service (Envoy's RLS API v3, gRPC over dispatch_http_call), answered here
// by the scenario through PendingCalls/Respond/FailCall. Checked: the call
// (cluster, method, path, gRPC headers, node, domain, descriptor with the
// rule, the 32-hex sluice_id, hits_addend and the rate override); requests
// of one key pause on one shared ask and resume on its answer; exactly the
// leased tokens are admitted without another call; a refusal is cached; a
// failed call marks the backend down and on_backend_down (deny, allow,
// local_share with the service's x-sluice-fleet-size) decides, while a live
// lease keeps paying until it expires; a good answer brings leases back.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/shared/rls"
)

func init() {
	for _, mode := range []string{"deny", "allow", "local_share"} {
		register(Case{Name: "FleetLeasesAndBackendDown_" + mode, Run: func(t *testing.T, start Starter) { fleetLeases(t, start, mode) }})
	}
	register(Case{Name: "FleetFailedCallNamesTheGRPCStatus", Run: fleetGRPCStatusLogged})
	register(Case{Name: "FleetAskOfARetiredRootContextIsSettledWhenItEnds", Run: fleetAskOfARetiredRoot})
	register(Case{Name: "FleetSyncOfARetiredRootContextIsSentAgain", Run: fleetSyncOfARetiredRoot})
}

func fleetConfig(onDown string) string {
	return `{"fleet": {"cluster": "rls", "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 1000, "lease_max": 40,
	  "on_backend_down": "` + onDown + `"},
	 "rules": [{"name": "g", "scope": "global", "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 100, "burst": 100}}]}`
}

// rlsCall decodes an RLS call and checks its request line and headers.
func rlsCall(t testing.TB, c Call, node string) *rlsv3.RateLimitRequest {
	t.Helper()
	if c.Cluster != "rls" {
		t.Errorf("RLS call to cluster %q", c.Cluster)
	}
	wantHeaders(t, "RLS call", c.Headers, ":method", "POST", ":path", rls.MethodPath, ":authority", "sluice-rls",
		"content-type", "application/grpc", "te", "trailers", "x-sluice-node", node)
	msg, err := rls.Unframe(c.Body)
	if err != nil {
		t.Fatalf("RLS call body %x: %v", c.Body, err)
	}
	r := &rlsv3.RateLimitRequest{}
	if err := proto.Unmarshal(msg, r); err != nil {
		t.Fatalf("RLS call body %x: %v", c.Body, err)
	}
	return r
}

// answerRLS answers an RLS call: statuses in descriptor order, grpc-status
// 0 in the headers (a trailers-only style answer), and the fleet size.
func answerRLS(t testing.TB, h Host, c Call, fleetSize string, statuses ...*rlsv3.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}
	for _, s := range statuses {
		if s.Code != rlsv3.RateLimitResponse_OK {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
	hs := []Header{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "0"}, {"x-sluice-fleet-size", fleetSize}}
	if err := h.Respond(c.ID, hs, body); err != nil {
		t.Fatalf("answering RLS call %d: %v", c.ID, err)
	}
}

// grantAll answers every pending RLS call granting every descriptor and
// returns the tokens asked (returns excluded).
func grantAll(t testing.TB, h Host, node string) (asked uint64) {
	t.Helper()
	for _, c := range pending(t, h) {
		r := rlsCall(t, c, node)
		var st []*rlsv3.RateLimitResponse_DescriptorStatus
		for _, d := range r.Descriptors {
			st = append(st, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 50})
			if !isReturn(d) {
				asked += d.GetHitsAddend().GetValue()
			}
		}
		answerRLS(t, h, c, "2", st...)
	}
	return asked
}

func isReturn(d *ratelimitv3.RateLimitDescriptor) bool {
	for _, e := range d.GetEntries() {
		if e.Key == "sluice_op" && e.Value == "return" {
			return true
		}
	}
	return false
}

// leaseAsk checks a request-path ask for one key of rule g and returns the
// tokens asked.
func leaseAsk(t testing.TB, r *rlsv3.RateLimitRequest) uint64 {
	t.Helper()
	if r.Domain != "sluice" || len(r.Descriptors) != 1 {
		t.Fatalf("RLS request: domain %q, %d descriptors; want sluice and 1", r.Domain, len(r.Descriptors))
	}
	d := r.Descriptors[0]
	es := d.GetEntries()
	if len(es) != 2 || es[0].Key != "sluice_rule" || es[0].Value != "g" || es[1].Key != "sluice_id" || !isHex(es[1].Value, 32) {
		t.Fatalf("descriptor entries %v", es)
	}
	if l := d.GetLimit(); l == nil || l.RequestsPerUnit != 100 || l.Unit.String() != "SECOND" {
		t.Errorf("descriptor limit override %v, want 100 per SECOND", l)
	}
	n := d.GetHitsAddend().GetValue()
	if n < 1 || n > 40 {
		t.Fatalf("hits_addend %d outside [lease_min 1, lease_max 40]", n)
	}
	return n
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// onlyCall returns the one pending call.
func onlyCall(t testing.TB, h Host, what string) Call {
	t.Helper()
	calls := pending(t, h)
	if len(calls) != 1 {
		t.Fatalf("%s: %d calls pending, want 1", what, len(calls))
	}
	return calls[0]
}

// settled completes a paused request once the plugin settled it.
func settled(t testing.TB, what string, res Response) Response {
	t.Helper()
	if !res.Paused {
		return res
	}
	if !res.Stream.Settled() {
		t.Fatalf("%s: still paused", what)
	}
	final, err := res.Stream.Complete()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return final
}

func fleetLeases(t *testing.T, start Starter, onDown string) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(fleetConfig(onDown))})
	acme := req("x-tenant", "acme")

	// Three requests of one key wait for one ask.
	var paused []Response
	for i := 0; i < 3; i++ {
		res := do(t, h, acme)
		if !res.Paused {
			t.Fatalf("request %d: not paused for a lease (rejected %v)", i, res.Rejected)
		}
		paused = append(paused, res)
	}
	c := onlyCall(t, h, "first lease")
	lease := leaseAsk(t, rlsCall(t, c, node))
	if lease < 3 {
		t.Fatalf("first ask of %d tokens; the scenario needs at least 3", lease)
	}
	answerRLS(t, h, c, "2", &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 90})
	for i, res := range paused {
		if final := settled(t, fmt.Sprint("waiter ", i), res); final.Rejected {
			t.Fatalf("waiter %d rejected with %d tokens granted", i, lease)
		}
	}
	// The lease pays for exactly its tokens, with no call.
	if got := admitted(t, h, int(lease)-3, acme); got != int(lease)-3 {
		t.Fatalf("%d of the %d leased tokens left admitted", got, lease-3)
	}
	if n := len(pending(t, h)); n != 0 {
		t.Fatalf("%d calls while the lease paid", n)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.global_granted": lease, "sluice.rule.g.global_fetches": 1,
		"sluice.rule.g.allowed": lease})

	// Another key leases too; it spends one token.
	res := do(t, h, req("x-tenant", "beta"))
	c = onlyCall(t, h, "beta's lease")
	betaLease := leaseAsk(t, rlsCall(t, c, node))
	answerRLS(t, h, c, "2", &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 90})
	if settled(t, "beta", res).Rejected || betaLease < 3 {
		t.Fatalf("beta: rejected, or a lease of %d", betaLease)
	}

	// acme's pool is empty: the next request asks; the service refuses.
	res = do(t, h, acme)
	if !res.Paused {
		t.Fatal("an empty pool did not ask")
	}
	c = onlyCall(t, h, "second ask")
	leaseAsk(t, rlsCall(t, c, node))
	answerRLS(t, h, c, "2", &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT,
		DurationUntilReset: durationpb.New(80 * time.Millisecond)})
	final := settled(t, "refused ask", res)
	if !final.Rejected || final.Status != 429 || final.LocalDetails != "sluice_rate_limited{g}" {
		t.Fatalf("after the service's refusal: rejected %v status %d details %q", final.Rejected, final.Status, final.LocalDetails)
	}
	// The refusal is cached: rejected at once, no call.
	if res := do(t, h, acme); !res.Rejected || res.Paused || len(pending(t, h)) != 0 {
		t.Fatalf("during the cached refusal: rejected %v paused %v, %d calls", res.Rejected, res.Paused, len(pending(t, h)))
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.global_denied": 1, "sluice.rule.g.backend_errors": 0,
		"sluice.rule.g.fallback_local": 0})

	// The refusal expires; the next ask fails: the backend is down and
	// on_backend_down decides the waiting request and the next ones.
	h.Advance(100 * time.Millisecond)
	res = do(t, h, acme)
	if !res.Paused {
		t.Fatal("no ask after the refusal expired")
	}
	failCall(t, h, onlyCall(t, h, "third ask"))
	if metric(h, "sluice.rule.g.backend_errors") == 0 {
		t.Error("the failed call is not counted in backend_errors")
	}
	if logsContaining(h, "rate limit service call failed (no response: ") != 1 {
		t.Errorf("the failed call is not logged once with its cause: %q", h.Logs())
	}
	first := settled(t, "waiter of the failed ask", res)
	downAdmitted := admitted(t, h, 58, acme)
	if !first.Rejected {
		downAdmitted++
	}
	// A refusal decided by on_backend_down says so in Envoy's access log.
	if last := do(t, h, acme); !last.Rejected {
		downAdmitted++
	} else if last.LocalDetails != "sluice_backend_down{g}" {
		t.Errorf("a refusal while the backend is down (%s): details %q, want sluice_backend_down{g}", onDown, last.LocalDetails)
	}
	// local_share: rate/N, burst/N with N = 2, the size the service
	// reported: 50 of 60 at one instant.
	want := map[string]int{"deny": 0, "allow": 60, "local_share": 50}[onDown]
	if downAdmitted != want {
		t.Fatalf("backend down (%s): %d of 60 admitted, want %d", onDown, downAdmitted, want)
	}
	if n := len(pending(t, h)); n != 0 {
		t.Fatalf("%d calls on the request path while the backend is down", n)
	}
	fallback := metric(h, "sluice.rule.g.fallback_local")
	if fallback != 60 {
		t.Errorf("fallback_local = %d after 60 requests decided by on_backend_down", fallback)
	}

	// beta's live lease still pays, outside the fallback, until it expires.
	if got := admitted(t, h, 1, req("x-tenant", "beta")); got != 1 {
		t.Fatal("a live lease refused while the backend is down")
	}
	if n := metric(h, "sluice.rule.g.fallback_local"); n != fallback {
		t.Errorf("a lease payment counted as fallback (%d -> %d)", fallback, n)
	}
	h.Advance(time.Second) // lease_ttl_ms: beta's remaining tokens are dropped
	res = do(t, h, req("x-tenant", "beta"))
	if res.Paused {
		t.Fatal("paused for a lease while the backend is down")
	}
	if wantRejected := onDown == "deny"; res.Rejected != wantRejected {
		t.Errorf("beta after its lease expired (%s): rejected %v", onDown, res.Rejected)
	}
	if metric(h, "sluice.rule.g.fallback_local") != fallback+1 {
		t.Error("the expired lease's request was not decided by on_backend_down")
	}

	// The next sync is the health probe: answered, the backend is up and
	// requests lease again instead of falling back.
	step(t, h, 100*time.Millisecond)
	probed := grantAll(t, h, node)
	if logsContaining(h, "rate limit service answering again after") != 1 {
		t.Errorf("the recovery is not logged once: %q", h.Logs())
	}
	grantedBefore := metric(h, "sluice.rule.g.global_granted")
	fallback = metric(h, "sluice.rule.g.fallback_local")
	for i := 0; i < 3; i++ {
		res := do(t, h, acme)
		if res.Paused {
			grantAll(t, h, node)
			res = settled(t, "after recovery", res)
		}
		if res.Rejected {
			t.Fatalf("request %d after recovery rejected", i)
		}
	}
	if metric(h, "sluice.rule.g.global_granted") == grantedBefore {
		t.Error("no lease granted after the service answered again")
	}
	if n := metric(h, "sluice.rule.g.fallback_local"); n != fallback {
		t.Errorf("still falling back after recovery (%d -> %d)", fallback, n)
	}
	t.Logf("leases of %d and %d tokens; the probe asked %d; after recovery: granted %d, fetches %d, backend_errors %d, fallback_local %d",
		lease, betaLease, probed, metric(h, "sluice.rule.g.global_granted"), metric(h, "sluice.rule.g.global_fetches"),
		metric(h, "sluice.rule.g.backend_errors"), metric(h, "sluice.rule.g.fallback_local"))
	noRecoveredPanics(t, h)
}

// fleetGRPCStatusLogged: a rate limit service answering with a gRPC error
// is logged with the status's name and message, not only its number.
func fleetGRPCStatusLogged(t *testing.T, start Starter) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(fleetConfig("allow"))})
	res := do(t, h, req("x-tenant", "acme"))
	if !res.Paused {
		t.Fatal("not paused for a lease")
	}
	c := onlyCall(t, h, "first lease")
	hs := []Header{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "14"}, {"grpc-message", "no healthy upstream"}}
	if err := h.Respond(c.ID, hs, nil); err != nil {
		t.Fatal(err)
	}
	if final := settled(t, "the waiter", res); final.Rejected {
		t.Fatal("rejected with on_backend_down allow")
	}
	if logsContaining(h, `call failed (gRPC UNAVAILABLE (14): "no healthy upstream")`) != 1 {
		t.Errorf("logs %q, want the failure named UNAVAILABLE with its message", h.Logs())
	}
}

// fleetAskOfARetiredRoot: a configuration update retires the root context
// that sent an ask; a request under the new configuration joins that ask;
// then the request that sent it is reset by its client, the retired root
// context ends, and the host cancels its calls (no answer will come). The
// joined request must still be decided, as for a call that failed, and the
// key must not stay tied to the cancelled ask.
func fleetAskOfARetiredRoot(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{NodeID: "node-a", Config: []byte(fleetConfig("allow"))})
	acme := req("x-tenant", "acme")
	first := do(t, h, acme)
	if !first.Paused {
		t.Fatal("first request not paused for a lease")
	}
	onlyCall(t, h, "the first ask")
	if err := h.Reconfigure([]byte(strings.Replace(fleetConfig("allow"), `"burst": 100`, `"burst": 120`, 1))); err != nil {
		t.Fatal(err)
	}
	joined := do(t, h, acme)
	if !joined.Paused {
		t.Fatalf("a request of the same key under the new configuration: rejected %v, not joined to the ask", joined.Rejected)
	}
	if err := first.Stream.Reset(); err != nil {
		t.Fatal(err)
	}
	if n := len(pending(t, h)); n != 0 {
		t.Fatalf("%d calls pending after the retired root context ended; its ask is cancelled", n)
	}
	if final := settled(t, "the joined request", joined); final.Rejected {
		t.Fatal("the joined request was rejected; on_backend_down is allow")
	}
	// The key is not tied to the cancelled ask: a new request is decided
	// (allowed while the backend counts as down) or asks anew.
	next := do(t, h, acme)
	if next.Paused && len(pending(t, h)) != 1 {
		t.Fatalf("a later request of the key waits with %d calls pending", len(pending(t, h)))
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.backend_errors": 1})
}

// fleetSyncOfARetiredRoot: an update replaces the root context (it has no
// stream, so it ends at once) while the refill it sent on a tick is in
// flight; the host cancels the call. The next tick of the new root context
// sends the refill again, rather than waiting for the lost call's lock to
// expire.
func fleetSyncOfARetiredRoot(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{NodeID: "node-a", Config: []byte(fleetConfig("deny"))})
	acme := req("x-tenant", "acme")
	res := do(t, h, acme)
	c := onlyCall(t, h, "the first ask")
	lease := leaseAsk(t, rlsCall(t, c, "node-a"))
	answerRLS(t, h, c, "1", &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 90})
	if settled(t, "the first request", res).Rejected {
		t.Fatal("rejected with a lease granted")
	}
	if got := admitted(t, h, int(lease)-2, acme); got != int(lease)-2 { // one token left: the pool wants a refill
		t.Fatalf("%d of %d admitted from the lease", got, lease-2)
	}
	step(t, h, 100*time.Millisecond)
	onlyCall(t, h, "the refill")
	if err := h.Reconfigure([]byte(fleetConfig("deny") + " ")); err != nil {
		t.Fatal(err)
	}
	if n := len(pending(t, h)); n != 0 {
		t.Fatalf("%d calls pending once the replaced root context ended; its refill is cancelled", n)
	}
	step(t, h, 100*time.Millisecond)
	onlyCall(t, h, "the refill sent again by the new configuration")
}
