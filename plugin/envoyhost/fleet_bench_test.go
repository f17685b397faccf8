package envoyhost_test

import (
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/shared/rls"
)

// fleetBenchRule is a per-key token bucket that never runs out; global, it
// leases from a rate limit service that grants its whole first ask, which
// the clock (frozen here) never lets lapse: the streams then spend from the
// pool, with no call, as a busy key does between syncs.
const fleetBenchRule = `{"name": "bench", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
  "algorithm_config": {"rps": 1e6, "burst": 1e9%s}%s}`

func fleetBenchConfig(global bool, cost string) string {
	scope := ""
	if global {
		scope = `, "scope": "global"`
	}
	return `{"fleet": {"cluster": "rls", "sync_interval_ms": 60000, "lease_max": 1000000000, "lease_ttl_ms": 3600000},
	  "rules": [` + strings.Replace(strings.Replace(fleetBenchRule, "%s", cost, 1), "%s", scope, 1) + `]}`
}

// primeLease sends one request, grants every descriptor of the ask it
// makes, and completes the request.
func primeLease(r scenario.Request) func(b *testing.B, bh *benchHost) {
	return func(b *testing.B, bh *benchHost) {
		b.Helper()
		res, err := bh.h.HTTP(0, r)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Paused {
			b.Fatalf("a global rule's first request did not ask for a lease (rejected %v)", res.Rejected)
		}
		calls, err := bh.h.PendingCalls()
		if err != nil || len(calls) != 1 {
			b.Fatalf("%d calls pending (%v), want the lease's", len(calls), err)
		}
		msg, err := rls.Unframe(calls[0].Body)
		req := &rlsv3.RateLimitRequest{}
		if err != nil || proto.Unmarshal(msg, req) != nil {
			b.Fatalf("the lease's call: %v", err)
		}
		resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
		for range req.Descriptors {
			resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
		}
		out, err := proto.Marshal(resp)
		if err != nil {
			b.Fatal(err)
		}
		body := append([]byte{0, byte(len(out) >> 24), byte(len(out) >> 16), byte(len(out) >> 8), byte(len(out))}, out...)
		if err := bh.h.Respond(calls[0].ID, []scenario.Header{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "0"}}, body); err != nil {
			b.Fatal(err)
		}
		if final, err := res.Stream.Complete(); err != nil || final.Rejected {
			b.Fatalf("the request that leased: %v, rejected %v", err, final.Rejected)
		}
	}
}

// BenchmarkEnvoyHostFleet: a global rule whose pool has tokens, against
// the same rule local (x-base), and the same for a rule charged from the
// response (each answer reports x-cost: 3, which the pool pays).
// default_cost sizes the charged rule's first lease: large enough that no
// stream of a run owes anything.
func BenchmarkEnvoyHostFleet(b *testing.B) {
	key := hdr("x-api-key", "k")
	costly := hdr("x-api-key", "k")
	costly.ResponseHeaders = []scenario.Header{{":status", "200"}, {"x-cost", "3"}}
	charged := `, "cost_source": "response_header:x-cost", "default_cost": 500000000`
	benchPrimers[fleetBenchConfig(true, "")] = primeLease(key)
	benchPrimers[fleetBenchConfig(true, charged)] = primeLease(costly)
	benchStreams(b, []streamCase{
		{name: "global-over-local", config: fleetBenchConfig(true, ""), req: key, baseConfig: fleetBenchConfig(false, "")},
		{name: "global-charged-over-local-charged", config: fleetBenchConfig(true, charged), req: costly, baseConfig: fleetBenchConfig(false, charged)},
	})
}
