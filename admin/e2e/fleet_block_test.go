package e2e

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// blockPolicy is a global burst of 3 per tenant refilled one token a
// second, a refused tenant kept out for 4 s; small leases, synced often.
const blockPolicy = `{"fleet":{"cluster":"rls","timeout_ms":80,"sync_interval_ms":100,"lease_ttl_ms":1000,"lease_max":1},
 "rules":[{"name":"g","scope":"global","limit_keys":["header:x-tenant"],"algorithm":"token_bucket",
   "algorithm_config":{"tokens_per_second":1,"burst":3,"block_seconds":4}}]}`

// TestGlobalBlockKeepsAClientOutOfEveryEnvoy: two Envoy-like processes
// share the admin's rate limit service on a real Redis and on PostgreSQL.
// A tenant that spends its burst through one is refused and blocked; the
// other process then refuses it too for the whole block, though the
// bucket's refill alone would have let a request a second through, while
// another tenant passes; after the block and a token's second it is
// admitted again.
func TestGlobalBlockKeepsAClientOutOfEveryEnvoy(t *testing.T) {
	for _, b := range fleetBackends {
		t.Run(b.name, func(t *testing.T) {
			rls, _ := b.start(t, blockPolicy)
			f := fleethosts.Start(t, fleethosts.Options{Config: blockPolicy, RLS: rls.url, Hosts: 2})
			f.StartTickers()

			admitted := 0
			for range 8 {
				if f.Request(0, 0, "acme") {
					admitted++
				}
				time.Sleep(20 * time.Millisecond)
			}
			blockedAt := time.Now()
			if admitted < 3 || admitted > 4 {
				t.Fatalf("acme through the first process: %d of 8 admitted, want its burst of 3", admitted)
			}
			if n := rls.metric(t, "sluice_fleet_blocks_total", "rule", "g"); n != 1 {
				t.Fatalf("the service made %v blocks, want 1", n)
			}
			if n := f.Metric("sluice.rule.g.blocked"); n != 1 {
				t.Errorf("the plugins counted %d blocks, want 1", n)
			}

			// Through the other process, for 3 s of the block: a refill
			// of a token a second would admit 3; the block admits none.
			for time.Since(blockedAt) < 3*time.Second {
				if f.Request(1, 0, "acme") || f.Request(1, 1, "acme") {
					t.Fatalf("acme admitted by the second process %v into its block", time.Since(blockedAt).Round(time.Millisecond))
				}
				time.Sleep(100 * time.Millisecond)
			}
			if !f.Request(1, 0, "globex") {
				t.Error("another tenant was refused: the block is acme's alone")
			}
			if n := rls.metric(t, "sluice_fleet_blocks_total", "rule", "g"); n != 1 {
				t.Errorf("refusals during the block made %v blocks in all, want 1: a block is not lengthened", n)
			}

			// The block (4 s) and a token's refill (1 s), with a margin.
			time.Sleep(time.Until(blockedAt.Add(5500 * time.Millisecond)))
			if !f.Request(1, 0, "acme") {
				t.Error("acme still refused after its block and a token's refill")
			}
			f.Wait()
			f.CheckNoTraps()
		})
	}
}
