//go:build !wasip1

package filter

import (
	"testing"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// An override with from and until decides its identity's requests and,
// on a global rule, its fleet pool only from from (inclusive) until until
// (exclusive); overrides with the same limits but other times are
// compiled apart.
func TestTimedOverridesApplyOnlyInTheirTime(t *testing.T) {
	cfg, err := policy.Parse([]byte(`{"fleet": {"cluster": "rls"}, "rules": [{"name": "g", "scope": "global",
	  "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 2},
	  "overrides": [
	    {"key": "acme", "algorithm_config": {"burst": 5}, "from": "2026-12-24T10:00:00Z", "until": "2026-12-24T11:00:00Z"},
	    {"key": "globex", "algorithm_config": {"burst": 5}},
	    {"key": "initech", "algorithm_config": {"burst": 5}, "until": "2026-12-24T10:00:00Z"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// Compiling defines the rule's metrics: on the SDK's emulator.
	vm := &vmContext{}
	_, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(vm))
	defer reset()
	cc := compile(cfg, vm)
	r := cc.byName["g"]
	from := time.Date(2026, 12, 24, 10, 0, 0, 0, time.UTC).UnixMilli()
	for _, c := range []struct {
		key   string
		at    int64 // unix ms
		burst float64
	}{
		{"acme", from - 1, 2}, {"acme", from, 5}, {"acme", from + 3_600_000 - 1, 5}, {"acme", from + 3_600_000, 2},
		{"globex", 0, 5}, {"globex", from + 1e12, 5},
		{"initech", from - 1, 5}, {"initech", from, 2},
	} {
		var id [idLen]byte
		state.AppendSluiceID(id[:0], string(state.AppendIdentity(nil, c.key)))
		if got := r.fleetRule(id, c.at).tb.Burst; got != c.burst {
			t.Errorf("%s at %s: the fleet pool's burst %v, want %v", c.key, time.UnixMilli(c.at).UTC().Format(time.RFC3339Nano), got, c.burst)
		}
	}
	if a, g := r.overrides[string(state.AppendIdentity(nil, "acme"))], r.overrides[string(state.AppendIdentity(nil, "globex"))]; a == g || !a.active.timed() || g.active.timed() {
		t.Error("a timed override shares the compiled rule of an untimed one with its limits")
	}
}
