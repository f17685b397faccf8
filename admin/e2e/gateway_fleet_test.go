package e2e

import (
	"context"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/admin/telemetry"
	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/netcall/netcalltest"
)

// grantAllRLS answers every descriptor OK.
type grantAllRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (grantAllRLS) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.Descriptors {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

// TestFleetThroughGateway: the gateway's callouts reach a gRPC rate limit
// service over an h2c cluster (-cluster rls=h2c://...), and telemetry
// reports that carry the fleet object are accepted by the real admin.
func TestFleetThroughGateway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, grantAllRLS{})
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	srv, state := adminServer(t)

	config := `{"telemetry": {"cluster": "sluice_admin", "token": "` + e2eTelToken + `"},
	  "fleet": {"cluster": "rls", "timeout_ms": 1000, "sync_interval_ms": 2000, "lease_ttl_ms": 60000},
	  "rules": [{"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"tokens_per_second": 100, "burst": 100}}]}`
	const vms = 2
	h, clock, calls := netcalltest.Host(t, config, vms, map[string]string{"sluice_admin": srv.URL, "rls": "h2c://" + ln.Addr().String()})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 6 {
		res, err := h.VM(i%vms).HTTP(ctx, &wasmhost.Request{Headers: []wasmhost.Header{{":path", "/"}, {"x-api-key", "k"}}})
		if err == nil && res.Paused { // the first request of a VM waits for its lease
			res, err = res.Stream.Complete(ctx, nil)
		}
		if err != nil || res.Rejected {
			t.Fatalf("request %d: %+v %v", i, res, err)
		}
	}
	if v, _ := h.Metric("sluice.rule.g.global_granted"); v == 0 {
		t.Fatal("no tokens granted through the h2c cluster")
	}

	clock.Advance(time.Second)
	if err := h.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	reports := 0
	for reports < vms {
		select {
		case c := <-calls:
			if err := c.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if c.Cluster == "sluice_admin" {
				reports++
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d reports delivered", reports, vms)
		}
	}
	if v, _ := h.Metric("sluice.telemetry.dropped"); v != 0 {
		t.Fatalf("%d reports dropped: the admin refused the fleet object", v)
	}
	ov := state.Overview(time.Now(), telemetry.OverviewOptions{})
	if len(ov.Rules) != 1 || ov.Rules[0].Name != "g" || ov.Rules[0].Total[telemetry.Allowed] != 6 {
		t.Fatalf("admin overview rules %+v", ov.Rules)
	}
}
