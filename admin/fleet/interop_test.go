package fleet

import (
	"context"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

// TestEnvoyRatelimitStandsIn checks the protocol's promise that
// envoyproxy/ratelimit can replace the admin's RLS: it grants and refuses
// the plugin's lease descriptors, and answers OK to a return and to a
// charge (descriptors it has no limit for), counting neither. It runs under CI=true, with SLUICE_ENVOY_RATELIMIT=1,
// or when the binary is cached (fleettest.RequireRatelimit): the first run
// compiles envoyproxy/ratelimit with go install, about a minute.
func TestEnvoyRatelimitStandsIn(t *testing.T) {
	rl := fleettest.StartRatelimitOnRedis(t, fleettest.RatelimitYAML("api", "minute", 5)) // 5 per minute per sluice_id
	conn, err := grpc.NewClient(rl.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	call := func(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, NodeHeader, "envoy-1")
		var resp *rlsv3.RateLimitResponse
		var err error
		for range 50 { // it may still be loading its configuration
			if resp, err = client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "sluice", Descriptors: ds}); err == nil {
				return resp
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("envoyproxy/ratelimit: %v", err)
		return nil
	}
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	if resp := call(desc("api", "x", 3, false)); resp.OverallCode != OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 5 {
		t.Fatalf("lease 3 of 5/min: %v", resp)
	}
	if resp := call(desc("api", "x", 3, false)); resp.OverallCode != OVER {
		t.Errorf("lease 3 more: %v, want OVER_LIMIT", resp)
	}
	if resp := call(desc("api", "x", 2, true)); resp.OverallCode != OK || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("a return: %v, want OK without a limit (a descriptor it does not know)", resp)
	}
	// A charge (three entries too) is answered OK and not counted: a
	// response-charged rule's costs beyond the pools go uncounted there.
	if resp := call(chargeDesc("api", "y", 100)); resp.OverallCode != OK || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("a charge: %v, want OK without a limit (a descriptor it does not know)", resp)
	}
	if resp := call(desc("api", "y", 5, false)); resp.OverallCode != OK {
		t.Errorf("lease 5 of 5/min after a charge of 100: %v, want OK (the charge not counted)", resp)
	}
	if resp := call(desc("unknown", "x", 100, false)); resp.OverallCode != OK {
		t.Errorf("an unknown rule: %v, want OK", resp)
	}
}
