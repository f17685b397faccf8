package scenario

// Costs charged by the response's status: a login limit that counts failed
// attempts only. A token bucket of burst 3 charged for 401 and 403 admits
// any number of successful logins and server errors, charges nothing for a
// stream reset before its response, counts three failures (the RateLimit
// fields of each showing the bucket after the charge), then refuses every
// request of that key, the right password too, until a whole failure has
// refilled; another key has its own bucket. A daily quota of 5xx responses
// refuses until the day ends once two have come. A gRPC rule counting
// UNAUTHENTICATED reads the code from the trailers, or from the headers of
// a trailers-only response, and charges nothing for OK or for a response
// whose trailers carry no status.

import (
	"testing"
	"time"
)

func init() {
	register(
		Case{Name: "ResponseStatusCountsOnlyTheListedStatuses", Run: responseStatusCounts},
		Case{Name: "ResponseGRPCStatusCountsOnlyTheListedCodes", Run: responseGRPCStatusCounts},
	)
}

// answered is a request of key k that the upstream answers with status.
func answered(k, status string) Request {
	r := req("x-api-key", k)
	r.ResponseHeaders = []Header{{":status", status}}
	return r
}

func responseStatusCounts(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(keyRule("logins", "token_bucket",
		`{"tokens_per_second": 0.01, "burst": 3, "cost_source": "response_status:401,403"}`))})
	left := func(what string, r Request, remaining string) { t.Helper(); admittedLeaving(t, h, what, r, remaining) }
	for range 5 {
		left("a successful login", answered("alice", "200"), "3")
	}
	left("a server error", answered("alice", "500"), "3")
	reset := answered("alice", "401")
	reset.ResetAfterRequest = true
	if res := do(t, h, reset); res.Rejected {
		t.Fatal("the request to be reset was rejected")
	}
	left("the first failure", answered("alice", "401"), "2")
	left("a forbidden", answered("alice", "403"), "1")
	left("the third failure", answered("alice", "401"), "0")
	res := do(t, h, answered("alice", "200"))
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("after three failures: rejected %v status %d", res.Rejected, res.Status)
	}
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 100 {
		t.Fatalf("retry-after %d before a failure has refilled (100 s)", ra)
	}
	left("another key", answered("bob", "401"), "2")
	h.Advance(99 * time.Second)
	if res := do(t, h, answered("alice", "200")); !res.Rejected {
		t.Fatal("admitted before a whole failure refilled")
	}
	h.Advance(time.Second)
	left("a failure refilled", answered("alice", "401"), "0")
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.logins.response_cost_charged": 5,
		"sluice.rule.logins.response_cost_default": 0,
		"sluice.rule.logins.rejected":              2,
	})

	q := mustStart(t, start, Options{Start: time.Date(2026, 3, 2, 23, 0, 0, 0, time.UTC),
		Config: []byte(keyRule("errors", "quota", `{"limit": 2, "period": "day", "cost_source": "response_status:5xx"}`))})
	for i, status := range []string{"200", "503", "404", "500"} {
		if res := do(t, q, answered("k", status)); res.Rejected {
			t.Fatalf("quota, response %d (%s): rejected", i, status)
		}
	}
	res = do(t, q, answered("k", "200"))
	if !res.Rejected {
		t.Fatal("quota: admitted after two 5xx responses")
	}
	wantHeaders(t, "quota spent", res.ResponseHeaders, "retry-after", "3600")
	q.Advance(time.Hour)
	if res := do(t, q, answered("k", "200")); res.Rejected {
		t.Fatal("quota: rejected on the next day")
	}
	noRecoveredPanics(t, h)
	noRecoveredPanics(t, q)
}

// grpcAnswered is a gRPC call of key k answered with code in its trailers
// (trailersOnly: in the headers of a trailers-only response; code "": no
// status at all).
func grpcAnswered(k, code string, trailersOnly bool) Request {
	r := grpcCall(k, "application/grpc") // grpc.go
	r.ResponseHeaders = []Header{{":status", "200"}, {"content-type", "application/grpc"}}
	switch {
	case code == "":
		r.ResponseTrailers = []Header{{"x-other", "1"}}
	case trailersOnly:
		r.ResponseHeaders = append(r.ResponseHeaders, Header{"grpc-status", code})
	default:
		r.ResponseTrailers = []Header{{"grpc-status", code}}
	}
	return r
}

func responseGRPCStatusCounts(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(keyRule("logins", "token_bucket",
		`{"tokens_per_second": 0.01, "burst": 2, "cost_source": "response_grpc_status:unauthenticated"}`))})
	left := func(what string, r Request, remaining string) { t.Helper(); admittedLeaving(t, h, what, r, remaining) }
	left("OK in the trailers", grpcAnswered("a", "0", false), "2")
	left("OK, trailers-only", grpcAnswered("a", "0", true), "2")
	left("no status in the trailers", grpcAnswered("a", "", false), "2")
	left("PERMISSION_DENIED", grpcAnswered("a", "7", false), "2")
	left("UNAUTHENTICATED, trailers-only", grpcAnswered("a", "16", true), "1")   // the fields show the charge
	left("UNAUTHENTICATED in the trailers", grpcAnswered("a", "16", false), "1") // sent before the trailers
	res := do(t, h, grpcAnswered("a", "0", false))
	if !res.Rejected {
		t.Fatal("admitted after two UNAUTHENTICATED answers")
	}
	left("another key", grpcAnswered("b", "16", true), "1")
	wantMetrics(t, h, map[string]uint64{"sluice.rule.logins.response_cost_charged": 3, "sluice.rule.logins.rejected": 1})
	noRecoveredPanics(t, h)
}
