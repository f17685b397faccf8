package telemetry

import (
	"strings"
	"testing"
)

// validFleetJSON is a report of a plugin with a global rule (fleet mode).
var validFleetJSON = strings.Replace(validJSON, `"reports_dropped": 0`, `"reports_dropped": 0,
  "fleet": {"backend_healthy": false, "fleet_size": 3,
            "rules": [{"rule": "free", "lease_tokens": 12.5, "pools": 4, "fallback_active": true}]}`, 1)

func TestDecodeFleet(t *testing.T) {
	r, err := Decode([]byte(validFleetJSON))
	if err != nil {
		t.Fatal(err)
	}
	want := Fleet{BackendHealthy: false, FleetSize: 3,
		Rules: []FleetRule{{Rule: "free", LeaseTokens: 12.5, Pools: 4, FallbackActive: true}}}
	if r.Fleet == nil || r.Fleet.BackendHealthy != want.BackendHealthy || r.Fleet.FleetSize != 3 ||
		len(r.Fleet.Rules) != 1 || r.Fleet.Rules[0] != want.Rules[0] {
		t.Fatalf("fleet = %+v", r.Fleet)
	}
	if r, err := Decode([]byte(validJSON)); err != nil || r.Fleet != nil {
		t.Fatalf("a report without fleet: %+v %v", r, err)
	}
}

func TestDecodeFleetErrors(t *testing.T) {
	cases := []struct{ from, to, want string }{
		{`"fleet_size": 3`, `"fleet_size": 0`, "fleet.fleet_size: 0 is out of range"},
		{`"backend_healthy": false`, `"backend_healthy": 0`, "fleet.backend_healthy: must be true or false, got a number"},
		{`"backend_healthy": false, `, ``, "fleet.backend_healthy: required"},
		{`"pools": 4`, `"pools": -1`, "fleet.rules[0].pools: -1 is negative"},
		{`"lease_tokens": 12.5`, `"lease_tokens": -2`, "fleet.rules[0].lease_tokens: -2 is negative"},
		{`"rule": "free", "lease`, `"rule": "other", "lease`, `fleet.rules[0].rule: "other" is not in rules`},
		{`"fallback_active": true`, `"fallback_active": true, "x": 1`, "fleet.rules[0].x: unknown field"},
		{`"fleet_size": 3`, `"fleet_size": 3, "extra": 1`, "fleet.extra: unknown field"},
		{`"fleet": {`, `"fleet": [{`, "fleet: must be an object"},
	}
	for _, c := range cases {
		body := strings.Replace(validFleetJSON, c.from, c.to, 1)
		if c.from == `"fleet": {` {
			body = strings.Replace(body, `true}]}`, `true}]}]`, 1)
		}
		_, err := Decode([]byte(body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: got %v, want %q", c.from, c.to, err, c.want)
		}
	}
}
