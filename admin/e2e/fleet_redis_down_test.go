package e2e

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// TestFleetRedisKilled: Redis dies (SIGKILL) under load. The admin answers
// UNAVAILABLE, the plugin counts backend errors, spends its leases, then
// decides by on_backend_down (local_share: each process enforces rate/N,
// burst/N with N = 3 from the admin's x-sluice-fleet-size; deny: rejects),
// and never traps. A new redis-server on the same port: the admin
// reconnects, leases resume, the fallback stops. The admin's Prometheus
// metrics tell the same story.
func TestFleetRedisKilled(t *testing.T) {
	for _, mode := range []string{"local_share", "deny"} {
		t.Run(mode, func(t *testing.T) { redisKilled(t, mode) })
	}
}

func redisKilled(t *testing.T, mode string) {
	r := fleettest.StartRedis(t)
	policy := fleetPolicy(mode)
	rls := startAdminRLS(t, r.Addr, policy)
	f := fleethosts.Start(t, fleethosts.Options{Config: policy, RLS: rls.url, Hosts: 3})
	f.StartTickers()
	counter := func(name string) uint64 { return f.Metric("sluice.rule.g." + name) }

	healthy := runLoad(f, "acme", 600*time.Millisecond)
	if counter("global_granted") == 0 || counter("backend_errors") != 0 {
		t.Fatalf("healthy phase: granted %d, backend errors %d", counter("global_granted"), counter("backend_errors"))
	}

	r.Kill()
	draining := runLoad(f, "acme", 1200*time.Millisecond) // leases (ttl 1 s) run out
	down := runLoad(f, "acme", time.Second)               // the fallback alone
	f.CheckNoTraps()
	errs, fallback := counter("backend_errors"), counter("fallback_local")
	unavailable := rls.metric(t, "sluice_fleet_rls_requests_total", "result", "unavailable")
	redisErrs := rls.metric(t, "sluice_fleet_redis_errors_total", "kind", "error") +
		rls.metric(t, "sluice_fleet_redis_errors_total", "kind", "timeout")
	t.Logf("healthy %.1fs: admitted %d %v; Redis killed, %.1fs: %d %v; then %.1fs: %d of %d %v; plugin: backend_errors %d, fallback_local %d; admin: unavailable %.0f, redis errors %.0f, redis_up %.0f",
		healthy.elapsed.Seconds(), healthy.admitted, healthy.perHost, draining.elapsed.Seconds(), draining.admitted, draining.perHost,
		down.elapsed.Seconds(), down.admitted, down.offered, down.perHost, errs, fallback, unavailable, redisErrs,
		rls.metric(t, "sluice_fleet_redis_up"))
	if errs == 0 || fallback == 0 {
		t.Errorf("Redis down: backend_errors %d, fallback_local %d; want both counted", errs, fallback)
	}
	if unavailable == 0 || redisErrs == 0 || rls.metric(t, "sluice_fleet_redis_up") != 0 {
		t.Errorf("admin metrics: unavailable %.0f, redis errors %.0f, redis_up %.0f; want UNAVAILABLE answers, errors counted, down",
			unavailable, redisErrs, rls.metric(t, "sluice_fleet_redis_up"))
	}
	switch mode {
	case "local_share":
		// Each process: a fallback bucket of burst/3, refilled at rate/3.
		share := fleetBurst/3 + fleetRate/3*down.elapsed.Seconds()
		for i, n := range down.perHost {
			if float64(n) > share+1 {
				t.Errorf("host %d admitted %d on its local share, more than burst/3 + rate/3 x T = %.1f", i, n, share)
			}
		}
		// Host 0 offers 250/s, 7.5 times its share's refill: it empties
		// its bucket and then gets about rate/3 x T.
		if refill := fleetRate / 3 * down.elapsed.Seconds(); float64(down.perHost[0]) < 0.6*refill {
			t.Errorf("host 0 (the busiest) admitted only %d, under 60%% of its share's refill %.1f: traffic stopped", down.perHost[0], refill)
		}
	case "deny":
		if down.admitted != 0 {
			t.Errorf("on_backend_down deny admitted %d once the leases were gone", down.admitted)
		}
	}

	r.Start() // a new, empty redis-server on the same port
	grantedBefore := counter("global_granted")
	recovering := runLoad(f, "acme", time.Second)
	// Every host must stop falling back. A host whose first calls after the
	// restart time out (a loaded machine) needs another sync round, so the
	// quiet window is looked for over up to five more seconds of load.
	fallbackBefore := counter("fallback_local")
	recovered := runLoad(f, "acme", 600*time.Millisecond)
	for waited := recovering.elapsed; counter("fallback_local") != fallbackBefore && waited < 6*time.Second; waited += recovered.elapsed {
		fallbackBefore = counter("fallback_local")
		recovered = runLoad(f, "acme", 600*time.Millisecond)
	}
	f.Wait()
	f.CheckNoTraps()
	t.Logf("Redis back, %.1fs: admitted %d %v; then %.1fs: %d %v; granted since %d; admin redis_up %.0f",
		recovering.elapsed.Seconds(), recovering.admitted, recovering.perHost, recovered.elapsed.Seconds(), recovered.admitted,
		recovered.perHost, counter("global_granted")-grantedBefore, rls.metric(t, "sluice_fleet_redis_up"))
	if counter("global_granted") == grantedBefore {
		t.Fatal("no leases granted after Redis came back")
	}
	if counter("fallback_local") != fallbackBefore {
		t.Errorf("still falling back 6s after Redis came back: fallback_local %d -> %d in the last %.1fs",
			fallbackBefore, counter("fallback_local"), recovered.elapsed.Seconds())
	}
	if bound := fleetBurst + fleetRate*recovered.elapsed.Seconds() + 3*fleetLeaseMax; float64(recovered.admitted) > bound || recovered.admitted == 0 {
		t.Errorf("after recovery admitted %d, want 1 to burst + rate x T + 3 x lease_max = %.1f", recovered.admitted, bound)
	}
	if rls.metric(t, "sluice_fleet_redis_up") != 1 {
		t.Error("admin: sluice_fleet_redis_up still 0 after Redis came back")
	}
}
