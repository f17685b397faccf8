package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/internal/poll"
	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// TestFleetEnvoyRatelimitInterop: the plugin leases from
// envoyproxy/ratelimit (a third-party implementation of Envoy's RLS API)
// instead of the admin, 3 hosts x 2 VMs under skewed load, and what it
// admits follows that server's limits. What differs from the admin
// (docs/fleet.md, "envoyproxy/ratelimit as the backend"):
//
//   - fixed windows: at most requests_per_unit per calendar second, so
//     the bound is the limit times the windows the run touched, not
//     burst + rate x T;
//   - the plugin's descriptor limit override ({rate, SECOND}, sent when
//     the rule's rate is a whole number per second) takes precedence over
//     the YAML, so the YAML's limit holds for a rule with a fractional
//     rate ("yaml") and the rule's own rate for a whole one ("override");
//   - returns are answered OK and not credited;
//   - no x-sluice-fleet-size: the local share's N is 1 (fleet_size unset).
//
// It runs under CI=true, with SLUICE_ENVOY_RATELIMIT=1, or when
// envoyproxy/ratelimit is already installed (fleettest.RequireRatelimit).
func TestFleetEnvoyRatelimitInterop(t *testing.T) {
	rl := fleettest.StartRatelimitOnRedis(t, fleettest.RatelimitYAML("g", "second", 20))
	cases := []struct {
		name  string
		rate  string
		limit float64 // per second window
	}{
		{"yaml", "100.5", 20},  // no override: the YAML's 20/s
		{"override", "30", 30}, // the plugin's override wins over the YAML
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			policy := `{"telemetry":{"cluster":"admin","token":"tok","interval_ms":1000},` +
				strings.Replace(fleetPolicy("local_share"), `"tokens_per_second":100,"burst":100`,
					`"tokens_per_second":`+c.rate+`,"burst":200`, 1)[1:]
			f := fleethosts.Start(t, fleethosts.Options{Config: policy, RLS: "h2c://" + rl.GRPCAddr, Hosts: 3})
			f.StartTickers()
			waitRatelimitReady(t, f)
			first := time.Now()
			res := runLoad(f, "tenant-"+c.name, 3*time.Second) // a bucket of its own
			last := time.Now()
			time.Sleep(500 * time.Millisecond) // idle: the pools are returned
			f.CheckNoTraps()
			windows := float64(last.Unix() - first.Unix() + 1)
			bound := c.limit * windows
			granted, returned := f.Metric("sluice.rule.g.global_granted"), f.Metric("sluice.rule.g.global_returned")
			t.Logf("admitted %d of %d in %.2fs (per host %v), %.0f fixed windows of %.0f: bound %.0f, under by %.0f; plugin: granted %d, returned %d (not credited), denied asks %d, backend errors %d",
				res.admitted, res.offered, res.elapsed.Seconds(), res.perHost, windows, c.limit, bound, bound-float64(res.admitted),
				granted, returned, f.Metric("sluice.rule.g.global_denied"), f.Metric("sluice.rule.g.backend_errors"))
			if float64(res.admitted) > bound {
				t.Errorf("admitted %d > %.0f per window x %.0f windows", res.admitted, c.limit, windows)
			}
			if float64(res.admitted) < 0.3*c.limit*(windows-1) {
				t.Errorf("admitted %d: under 30%% of the limit of the %.0f whole windows (refused asks count in a window, so some under-admission is expected, not this much)", res.admitted, windows-1)
			}
			if float64(res.admitted) > float64(granted) {
				t.Errorf("admitted %d > granted %d", res.admitted, granted)
			}
			if errs := f.Metric("sluice.rule.g.backend_errors"); errs != 0 {
				t.Errorf("%d backend errors: envoyproxy/ratelimit's answers (returns included) should all be understood", errs)
			}
			if returned == 0 {
				t.Error("no tokens returned after the key went idle")
			}
			if n := reportedFleetSize(t, f); n != 1 {
				t.Errorf("fleet_size %d, want 1: envoyproxy/ratelimit sends no x-sluice-fleet-size", n)
			}
		})
	}
}

// waitRatelimitReady sends one request until envoyproxy/ratelimit has
// loaded its configuration and grants (it may answer errors at first).
func waitRatelimitReady(t *testing.T, f *fleethosts.Fleet) {
	t.Helper()
	poll.Watch(t, 10*time.Second, 50*time.Millisecond, "envoyproxy/ratelimit to grant a lease", func() (bool, string) {
		if f.Metric("sluice.rule.g.global_granted") > 0 {
			return true, ""
		}
		f.Request(0, 0, "warm-up")
		return false, fmt.Sprintf("nothing granted, %d backend errors", f.Metric("sluice.rule.g.backend_errors"))
	})
}

// reportedFleetSize is fleet.fleet_size of the latest telemetry report.
func reportedFleetSize(t *testing.T, f *fleethosts.Fleet) int {
	t.Helper()
	var last []byte
	for len(f.Reports) > 0 {
		last = <-f.Reports
	}
	var rep struct {
		Fleet *struct {
			FleetSize int `json:"fleet_size"`
		} `json:"fleet"`
	}
	if err := json.Unmarshal(last, &rep); err != nil || rep.Fleet == nil {
		t.Fatalf("telemetry report %q: %v", last, err)
	}
	return rep.Fleet.FleetSize
}
