package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/admin/fleet/pggcra"
	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// TestFleetAdmissionAgainstRedis: three Envoy-like processes of two VMs
// each, under skewed load at four times the limit of one global rule, for
// 4 s of real time, against the admin's RLS on a real Redis. The admitted
// total stays within docs/filter.md's bound (burst + rate x T, no tokens
// pooled at the start), every admitted token was granted by Redis and not
// returned, and the under-admission is at most the leases outstanding at
// the end (one lease_max per process).
func TestFleetAdmissionAgainstRedis(t *testing.T) {
	r := fleettest.StartRedis(t)
	policy := fleetPolicy("deny") // a backend error can then only under-admit
	checkFleetAdmission(t, startAdminRLS(t, r.Addr, policy), policy)
}

// TestFleetAdmissionAgainstPostgres: the same with the buckets in a real
// PostgreSQL server, the admin's default budget and session settings.
func TestFleetAdmissionAgainstPostgres(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := pggcra.Open(ctx, pggcra.Options{URL: pg.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	policy := fleetPolicy("deny")
	checkFleetAdmission(t, startAdminRLSOn(t, b, fleet.BackendPostgres, "postgres", policy), policy)
}

func checkFleetAdmission(t *testing.T, rls *adminRLS, policy string) {
	f := fleethosts.Start(t, fleethosts.Options{Config: policy, RLS: rls.url, Hosts: 3})
	f.StartTickers()

	res := runLoad(f, "acme", 4*time.Second)
	f.Wait()
	f.CheckNoTraps()

	T := res.elapsed.Seconds()
	bound := fleetBurst + fleetRate*T
	granted := rls.metric(t, "sluice_fleet_tokens_total", "rule", "g", "decision", "granted")
	returned := rls.metric(t, "sluice_fleet_tokens_total", "rule", "g", "decision", "returned")
	outstanding := granted - returned - float64(res.admitted)
	errs := f.Metric("sluice.rule.g.backend_errors")
	t.Logf("admitted %d of %d offered in %.2fs (per host %v); bound burst + rate x T = %.1f: over by %.1f, under by %.1f (%.1f%%)",
		res.admitted, res.offered, T, res.perHost, bound, float64(res.admitted)-bound, bound-float64(res.admitted),
		100*(bound-float64(res.admitted))/bound)
	t.Logf("the backend granted %.0f, returned %.0f: %.0f tokens outstanding in leases (bound 3 x lease_max = %.0f); plugin: backend errors %d, request-path asks %d",
		granted, returned, outstanding, 3*fleetLeaseMax, errs, f.Metric("sluice.rule.g.global_fetches"))

	t.Logf("admin: backend errors %.0f timeouts, %.0f others (last: %q)", rls.metric(t, "sluice_fleet_"+rls.kind+"_errors_total", "kind", "timeout"),
		rls.metric(t, "sluice_fleet_"+rls.kind+"_errors_total", "kind", "error"), rls.srv.Health().LastError)
	if float64(res.admitted) > bound {
		t.Errorf("over-admission: admitted %d > burst + rate x T = %.1f", res.admitted, bound)
	}
	if outstanding < 0 {
		t.Errorf("admitted %d > granted %.0f - returned %.0f: a token was spent twice or never granted", res.admitted, granted, returned)
	}
	if outstanding > 3*fleetLeaseMax {
		t.Errorf("%.0f granted tokens never spent: more than the leases outstanding (3 x lease_max)", outstanding)
	}
	// The global bucket was kept empty: what it refilled over T went to
	// the pools, except the last ask's worth (one sync interval of rate).
	if short := bound - float64(res.admitted); short > 3*fleetLeaseMax+fleetRate*0.1 {
		t.Errorf("under-admission by %.1f: more than the leases outstanding (3 x lease_max) plus one sync interval of refill", short)
	}
	if g := f.Metric("sluice.rule.g.global_granted"); errs == 0 && float64(g) != granted {
		t.Errorf("the plugin counted %d tokens granted, the admin %.0f", g, granted)
	}
	if n := rls.metric(t, "sluice_fleet_nodes"); n != 3 {
		t.Errorf("sluice_fleet_nodes %v, want the 3 hosts", n)
	}
}
