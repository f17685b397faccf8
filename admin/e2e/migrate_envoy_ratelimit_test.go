package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/internal/poll"
	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
)

// The configuration of envoyproxy/ratelimit the migration is checked on:
// per address (with a tighter limit of its bulk requests, a
// header_value_match) and per /24 (masked_remote_address), per API key with an unlimited, a revoked
// and an overridden key, per tenant and user (nested, with a tenant of its
// own, and per user in the eu region or, without a region, alone, a
// skip_if_absent), partners refused but for two of their own (one limited,
// one unlimited) and those of two wildcards (a counter per partner, and
// one shared), and one counter for every request (a generic_key alone).
const migrateConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 80}
    descriptors:
      - key: header_match
        value: bulk
        rate_limit: {unit: hour, requests_per_unit: 6}
  - key: masked_remote_address
    rate_limit: {unit: hour, requests_per_unit: 35}
  - key: generic_key
    value: everyone
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: api_key
    value: internal-batch
    rate_limit: {unlimited: true}
  - key: api_key
    value: revoked-key
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: api_key
    value: acme
    rate_limit: {unit: hour, requests_per_unit: 8}
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: tenant
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 2}
  - key: region
    value: eu
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 4}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 7}
  - key: partner
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: partner
    value: p1
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: partner
    value: p2
    rate_limit: {unlimited: true}
  - key: partner
    value: "p9*"
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: partner
    value: "q*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
`

// migrateActions are the route's rate_limits.
const migrateActions = `rate_limits:
  - actions: [{remote_address: {}}]
  - actions:
      - remote_address: {}
      - header_value_match: {descriptor_value: bulk, headers: [{name: x-bulk, present_match: true}]}
  - actions: [{masked_remote_address: {v4_prefix_mask_len: 24}}]
  - actions: [{generic_key: {descriptor_value: everyone}}]
  - actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]
  - actions:
      - request_headers: {header_name: x-tenant, descriptor_key: tenant}
      - request_headers: {header_name: x-user, descriptor_key: user}
  - actions: [{request_headers: {header_name: x-partner, descriptor_key: partner}}]
  - actions:
      - request_headers: {header_name: x-region, descriptor_key: region, skip_if_absent: true}
      - request_headers: {header_name: x-user, descriptor_key: user}
`

// TestMigratedRatelimitConfigDecidesAsEnvoyproxyRatelimit: the policy
// "ratelimit-admin migrate envoy-ratelimit" makes of migrateConfig, run by
// the compiled filter, admits and rejects every request of a mixed
// sequence exactly as envoyproxy/ratelimit does with that configuration
// (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true, its setting that charges
// nothing for a rejected request, as Sluice does), asked with the
// descriptors Envoy builds from migrateActions.
//
// It runs where envoyproxy/ratelimit does (fleettest.RequireRatelimit:
// CI, or SLUICE_ENVOY_RATELIMIT=1).
func TestMigratedRatelimitConfigDecidesAsEnvoyproxyRatelimit(t *testing.T) {
	t.Setenv("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")
	rl := fleettest.StartRatelimitOnRedis(t, migrateConfig)
	policy := migrateWithTheAdmin(t, "-scope", "local")
	h, err := wasmhost.New(context.Background(), wasmhost.Config{Wasm: wasmtest.Build(t, "./plugin"),
		PluginConfig: policy, VMs: 1, Clock: wasmhost.SystemClock()})
	if err != nil {
		t.Fatalf("%v\n%s", err, policy)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	conn, err := grpc.NewClient(rl.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	service := rlsv3.NewRateLimitServiceClient(conn)
	poll.Watch(t, 20*time.Second, 100*time.Millisecond, "envoyproxy/ratelimit to answer", func() (bool, string) {
		_, err := service.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("tenant", "warm-up")}})
		return err == nil, fmt.Sprint(err)
	})
	// Every limit is per hour, aligned on the epoch in both: the run
	// (well under a second) must not straddle an hour.
	if left := time.Hour - time.Duration(time.Now().UnixNano())%time.Hour; left < 30*time.Second {
		time.Sleep(left + time.Second)
	}

	rnd := rand.New(rand.NewPCG(7, 11))
	pick := func(vs ...string) string { return vs[rnd.IntN(len(vs))] }
	var rejected, differ int
	for i := range 300 {
		addr := pick("10.0.0.1", "10.0.0.2", "10.0.0.3")
		key, tenant, user := pick("", "acme", "beta", "gamma", "internal-batch", "revoked-key"), pick("", "gold", "silver"), pick("", "u1", "u2")
		// What Envoy asks the service: a descriptor per rate_limits entry
		// whose actions all found their value.
		ds := []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", addr), descriptor("masked_remote_address", "10.0.0.0/24"),
			descriptor("generic_key", "everyone")}
		req := &wasmhost.Request{Properties: wasmhost.Properties{"source.address": []byte(addr + ":5555")}}
		if pick("", "", "1") != "" {
			ds = append(ds, descriptor("remote_address", addr, "header_match", "bulk"))
			req.Headers = append(req.Headers, wasmhost.Header{"x-bulk", "1"})
		}
		if key != "" {
			ds = append(ds, descriptor("api_key", key))
			req.Headers = append(req.Headers, wasmhost.Header{"x-api-key", key})
		}
		if tenant != "" {
			req.Headers = append(req.Headers, wasmhost.Header{"x-tenant", tenant})
		}
		if user != "" {
			req.Headers = append(req.Headers, wasmhost.Header{"x-user", user})
		}
		if tenant != "" && user != "" {
			ds = append(ds, descriptor("tenant", tenant, "user", user))
		}
		region := pick("", "eu", "us")
		if region != "" {
			req.Headers = append(req.Headers, wasmhost.Header{"x-region", region})
		}
		switch {
		case user != "" && region != "":
			ds = append(ds, descriptor("region", region, "user", user))
		case user != "": // skip_if_absent: the descriptor without the region
			ds = append(ds, descriptor("user", user))
		}
		if partner := pick("", "", "p1", "p2", "p3", "p90", "p91", "q1", "q2"); partner != "" {
			ds = append(ds, descriptor("partner", partner))
			req.Headers = append(req.Headers, wasmhost.Header{"x-partner", partner})
		}
		want, err := service.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: ds})
		if err != nil {
			t.Fatalf("request %d: envoyproxy/ratelimit: %v", i, err)
		}
		got, err := h.VM(0).HTTP(context.Background(), req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		wantRejected := want.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
		if wantRejected {
			rejected++
		}
		if got.Rejected != wantRejected {
			differ++
			if differ <= 10 {
				t.Errorf("request %d (address %s, key %q, tenant %q, user %q): Sluice rejected %v, envoyproxy/ratelimit %v (%v)",
					i, addr, key, tenant, user, got.Rejected, wantRejected, want.Statuses)
			}
		}
	}
	t.Logf("300 requests: envoyproxy/ratelimit rejected %d, Sluice differed on %d", rejected, differ)
	if rejected < 30 || rejected > 270 {
		t.Errorf("%d of 300 rejected: the sequence should exercise both answers", rejected)
	}
}

// migrateWithTheAdmin runs "ratelimit-admin migrate envoy-ratelimit" on
// migrateConfig and migrateActions and returns the policy it printed.
func migrateWithTheAdmin(t *testing.T, args ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	bin, config, actions := filepath.Join(dir, "ratelimit-admin"), filepath.Join(dir, "config.yaml"), filepath.Join(dir, "rate_limits.yaml")
	buildAdmin(t, wasmtest.ModuleRoot(t), bin)
	if err := os.WriteFile(config, []byte(migrateConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(actions, []byte(migrateActions), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, append([]string{"migrate", "envoy-ratelimit", "-config", config, "-rate-limits", actions}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ratelimit-admin migrate: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "note: ") {
		t.Errorf("no notes on standard error: %q", stderr.String())
	}
	return out
}

// descriptor builds one descriptor from key, value pairs.
func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}
