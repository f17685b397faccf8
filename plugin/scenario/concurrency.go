package scenario

// Concurrency rules: at most "limit" requests of one identity in flight at
// once, across worker VMs. Two requests of a key whose upstream has not
// answered hold both places: a third is refused with Retry-After 1 and the
// draft's concurrent-requests quota unit, while another key is admitted.
// A completed response and a reset stream each give their place back, once.
// Places never given back (streams still open) leave the count two periods
// of max_request_seconds later, and giving them back after that frees
// nothing another request holds. A request held by another rule's delayed
// admission and reset while held gives its place back once. With bounded
// memory, identities that find their group's ways held share the group's
// overflow count of the rule's limit, and give their places back there.

import (
	"testing"
	"time"
)

func init() {
	register(Case{Name: "ConcurrencyLimitsRequestsInFlight", Run: concurrencyInFlight})
}

// inFlight starts a request of key k on VM vm whose upstream does not
// answer yet, and requires it admitted; the stream stays open.
func inFlight(t *testing.T, h Host, vm int, k string) Stream {
	t.Helper()
	r := req("x-api-key", k)
	r.HoldUpstream = true
	res := doOn(t, h, vm, r)
	if res.Rejected || res.Stream == nil {
		t.Fatalf("key %s on VM %d: rejected %v (status %d), stream %v; want admitted and open", k, vm, res.Rejected, res.Status, res.Stream != nil)
	}
	return res.Stream
}

func concurrencyInFlight(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{VMs: 2, Start: time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC),
		Config: []byte(keyRule("inflight", "concurrency", `{"limit": 2, "max_request_seconds": 60}`))})
	refused := func(what string) {
		t.Helper()
		res := do(t, h, req("x-api-key", "a"))
		if !res.Rejected || res.Status != 429 {
			t.Fatalf("%s: rejected %v status %d, want 429", what, res.Rejected, res.Status)
		}
		wantHeaders(t, what, res.ResponseHeaders, "retry-after", "1", "ratelimit", `"inflight";r=0`,
			"ratelimit-policy", `"inflight";q=2;qu="concurrent-requests"`, "x-ratelimit-reason", "concurrency_exceeded")
	}
	first, second := inFlight(t, h, 0, "a"), inFlight(t, h, 1, "a")
	refused("a third request in flight")
	if res := do(t, h, req("x-api-key", "b")); res.Rejected {
		t.Fatal("another key was refused")
	} else {
		wantHeaders(t, "another key", res.ResponseHeaders, "ratelimit", `"inflight";r=1`,
			"ratelimit-policy", `"inflight";q=2;qu="concurrent-requests"`)
	}

	res, err := first.Complete()
	if err != nil {
		t.Fatal(err)
	}
	wantHeaders(t, "the first response", res.ResponseHeaders, "ratelimit", `"inflight";r=1`)
	if res := do(t, h, req("x-api-key", "a")); res.Rejected { // takes the freed place and gives it back
		t.Fatal("refused after a response gave its place back")
	}
	third := inFlight(t, h, 0, "a")
	refused("two in flight again")
	if err := second.Reset(); err != nil {
		t.Fatal(err)
	}
	fourth := inFlight(t, h, 1, "a") // the reset gave its place back
	refused("the reset's place taken again")

	// third and fourth are never answered: their places leave the count two
	// periods (of 60 s) on, and answering them after that gives back nothing.
	h.Advance(120 * time.Second)
	fifth, sixth := inFlight(t, h, 0, "a"), inFlight(t, h, 1, "a")
	for _, s := range []Stream{third, fourth} {
		if _, err := s.Complete(); err != nil {
			t.Fatal(err)
		}
	}
	refused("two in flight after late answers")
	for _, s := range []Stream{fifth, sixth} {
		if err := s.Reset(); err != nil {
			t.Fatal(err)
		}
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.inflight.rejected": 4, "sluice.refund_failed": 0})
	noRecoveredPanics(t, h)
	concurrencyAndDelay(t, start)
	concurrencyBounded(t, start)
}

// concurrencyBounded: max_keys 4 is one group of four ways. Four keys with
// a request in flight hold the ways; a fifth is counted in the overflow
// (limit 1, shared), a sixth refused until the fifth's stream ends.
func concurrencyBounded(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(`{"rules": [{"name": "inflight", "max_keys": 4,
	  "limit_keys": ["header:x-api-key"], "algorithm": "concurrency", "algorithm_config": {"limit": 1}}]}`)})
	for _, k := range []string{"k1", "k2", "k3", "k4"} {
		inFlight(t, h, 0, k)
	}
	fifth := inFlight(t, h, 0, "k5")
	if res := do(t, h, req("x-api-key", "k6")); !res.Rejected {
		t.Fatal("a sixth key was admitted while the fifth held the overflow's only place")
	}
	if err := fifth.Reset(); err != nil {
		t.Fatal(err)
	}
	inFlight(t, h, 0, "k6") // the fifth gave its place back to the overflow
	if res := do(t, h, req("x-api-key", "k5")); !res.Rejected {
		t.Fatal("two keys in the overflow at once, with a limit of 1")
	}
	// Every decision the overflow took: k5 and k6 admitted, k6 and k5 refused.
	wantMetrics(t, h, map[string]uint64{"sluice.rule.inflight.overflowed": 4, "sluice.refund_failed": 0})
	noRecoveredPanics(t, h)
}

// concurrencyAndDelay: a request delayed by one policy holds a place of
// another; reset while held, it gives the place back once.
func concurrencyAndDelay(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(`{"policies": [
	  {"name": "slow", "rules": [{"name": "slow", "limit_keys": ["header:x-slow"], "algorithm": "token_bucket",
	    "algorithm_config": {"tokens_per_second": 1, "burst": 1, "max_delay_ms": 2000}}]},
	  {"name": "inflight", "rules": [{"name": "inflight", "limit_keys": ["header:x-api-key"], "algorithm": "concurrency",
	    "algorithm_config": {"limit": 2}}]}]}`)})
	slow := req("x-api-key", "a", "x-slow", "s")
	slow.HoldUpstream = true
	if res := do(t, h, slow); res.Rejected || res.Paused || res.Stream == nil {
		t.Fatalf("the first slow request: rejected %v paused %v", res.Rejected, res.Paused)
	}
	res := do(t, h, slow)
	if !res.Paused || res.Stream == nil {
		t.Fatalf("the second slow request was not held for its token: rejected %v status %d", res.Rejected, res.Status)
	}
	if err := res.Stream.Reset(); err != nil { // the client gives up while it is held
		t.Fatal(err)
	}
	inFlight(t, h, 0, "a") // the held request's place was given back...
	if res := do(t, h, req("x-api-key", "a")); !res.Rejected {
		t.Fatal("a third request in flight was admitted: the held request gave its place back twice")
	} // ...once
	noRecoveredPanics(t, h)
}
