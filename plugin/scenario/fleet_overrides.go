package scenario

// Overrides on a global rule: a customer listed in the rule's overrides
// gets its own limit across the fleet. The filter names the identity by
// the sluice_id the admin computes for the override's key
// (state.SluiceIDOfKey), so the rate limit service can hold it to its own
// limit; the filter sizes the customer's leases, sends its rate override,
// shows its limits in RateLimit-Policy and, while the service is down,
// shares out its limit instead of the rule's. Every other identity keeps
// the rule's. A request decided again when its lease comes is counted
// once (its override, the rules before it whose key it lacks).

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/shared/state"
)

func init() {
	register(Case{Name: "FleetOverridesGiveACustomerItsOwnGlobalLimit", Run: fleetOverrides})
	register(Case{Name: "FleetWindowOverridesAskWithinTheirOwnLimit", Run: fleetWindowOverrides})
}

const fleetOverridesConfig = `{"fleet": {"cluster": "rls", "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 1000,
	  "lease_min": 1, "lease_max": 1000, "on_backend_down": "local_share"},
	 "rules": [{"name": "per-user", "limit_keys": ["header:x-user"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}},
	  {"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 10, "burst": 10},
	   "overrides": [{"key": "acme", "algorithm_config": {"tokens_per_second": 50, "burst": 100}}]}]}`

// overrideAsk is one descriptor of an RLS call: whose it is, what it
// asks, and the rate it sends.
type overrideAsk struct {
	id   string
	hits uint64
	rate uint32
}

func overrideAsks(t testing.TB, c Call, node string) []overrideAsk {
	t.Helper()
	var out []overrideAsk
	for _, d := range rlsCall(t, c, node).Descriptors {
		es := d.GetEntries()
		if len(es) < 2 || es[0].Value != "g" || es[1].Key != "sluice_id" {
			t.Fatalf("descriptor entries %v", es)
		}
		out = append(out, overrideAsk{id: es[1].Value, hits: d.GetHitsAddend().GetValue(), rate: d.GetLimit().GetRequestsPerUnit()})
	}
	return out
}

func grant(t testing.TB, h Host, c Call, n int) {
	t.Helper()
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 50}
	}
	answerRLS(t, h, c, "1", st...)
}

func fleetOverrides(t *testing.T, start Starter) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(fleetOverridesConfig)})
	acme, beta := req("x-api-key", "acme"), req("x-api-key", "beta")
	acmeID, betaID := state.SluiceIDOfKey("acme"), state.SluiceIDOfKey("beta")

	// Each key's first ask: its own share of one sync interval, at its own rate.
	var leases = map[string]uint64{}
	for _, k := range []struct {
		r        Request
		id       string
		rate     uint32
		policy   string
		lease    uint64
		identity string
	}{
		{acme, acmeID, 50, `"g";q=100;w=2`, 5, "acme"},
		{beta, betaID, 10, `"g";q=10;w=1`, 1, "beta"},
	} {
		res := do(t, h, k.r)
		c := onlyCall(t, h, k.identity+"'s first ask")
		asks := overrideAsks(t, c, node)
		if len(asks) != 1 || asks[0].id != k.id || asks[0].rate != k.rate || asks[0].hits != k.lease {
			t.Fatalf("%s's first ask %+v; want sluice_id %s (the admin's for the key), %d tokens at %d per second", k.identity, asks, k.id, k.lease, k.rate)
		}
		grant(t, h, c, 1)
		final := settled(t, k.identity, res)
		if final.Rejected {
			t.Fatalf("%s rejected with its lease granted", k.identity)
		}
		wantHeaders(t, k.identity, final.ResponseHeaders, "ratelimit-policy", k.policy)
		leases[k.identity] = k.lease
	}
	// Decided again when its lease came, a request is counted once.
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.overridden": 1, "sluice.rule.per-user.key_missing": 2})

	// acme spends all but one token of its lease; the tick refills it at
	// acme's rate, and asks more than the rule's burst would allow.
	if got := admitted(t, h, int(leases["acme"])-2, acme); got != int(leases["acme"])-2 {
		t.Fatalf("acme: %d of its leased tokens admitted", got)
	}
	step(t, h, 100*time.Millisecond)
	c := onlyCall(t, h, "the tick's refill")
	refilled := false
	for _, a := range overrideAsks(t, c, node) {
		switch a.id {
		case acmeID:
			refilled = true
			if a.rate != 50 || a.hits <= 10 {
				t.Errorf("acme's refill asks %d tokens at %d per second; want more than the rule's burst of 10, at 50", a.hits, a.rate)
			}
		case betaID:
			if a.rate != 10 || a.hits > 10 {
				t.Errorf("beta's refill asks %d tokens at %d per second; want at most 10, at 10", a.hits, a.rate)
			}
		}
	}
	if !refilled {
		t.Fatal("the tick did not refill acme's pool")
	}
	failCall(t, h, c)

	// The service is down and the leases lapse: each key is limited by
	// its local share (N = 1, the size the service reported), acme by its
	// override's burst.
	h.Advance(1100 * time.Millisecond)
	for _, k := range []struct {
		name   string
		r      Request
		n, adm int
	}{{"acme", acme, 120, 100}, {"beta", beta, 20, 10}} {
		if got := admitted(t, h, k.n, k.r); got != k.adm {
			t.Errorf("%s with the service down: %d of %d admitted, want %d (its own burst)", k.name, got, k.n, k.adm)
		}
	}
	if n := len(pending(t, h)); n != 0 {
		t.Errorf("%d calls on the request path while the service is down", n)
	}
	noRecoveredPanics(t, h)
}

// fleetWindowOverrides: a global fixed window's override raises what one
// lease may ask (the override's limit), and RateLimit-Policy shows it.
func fleetWindowOverrides(t *testing.T, start Starter) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Start: alignedStart, Config: []byte(`{"fleet": {"cluster": "rls",
	  "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 1000, "lease_min": 5, "lease_max": 100, "on_backend_down": "deny"},
	 "rules": [{"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
	   "algorithm_config": {"limit": 2, "window_seconds": 60},
	   "overrides": [{"key": "acme", "algorithm_config": {"limit": 600}}]}]}`)})
	for _, k := range []struct {
		key    string
		hits   uint64
		policy string
	}{{"acme", 5, `"g";q=600;w=60`}, {"beta", 2, `"g";q=2;w=60`}} {
		res := do(t, h, req("x-api-key", k.key))
		c := onlyCall(t, h, k.key+"'s first ask")
		asks := overrideAsks(t, c, node)
		if len(asks) != 1 || asks[0].id != state.SluiceIDOfKey(k.key) || asks[0].hits != k.hits || asks[0].rate != 0 {
			t.Fatalf("%s's first ask %+v; want %d counts (lease_min, at most its limit) and no rate", k.key, asks, k.hits)
		}
		answerRLS(t, h, c, "1", windowStatus(rlsv3.RateLimitResponse_OK, 0, 30*time.Second))
		final := settled(t, k.key, res)
		if final.Rejected {
			t.Fatalf("%s rejected with its lease granted", k.key)
		}
		wantHeaders(t, k.key, final.ResponseHeaders, "ratelimit-policy", k.policy)
	}
	noRecoveredPanics(t, h)
}
