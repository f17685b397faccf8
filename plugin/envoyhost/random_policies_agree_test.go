package envoyhost_test

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/envoyhost"
	"github.com/sluice-rl/sluice/plugin/scenario"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policy/policytest"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// TestRandomPoliciesAgreeWithWasmhost is the random-request comparison
// over random configurations (shared/policy/policytest: every local
// algorithm, action, mode, match operator and key source, costs,
// overrides, the response-field, status and X-Forwarded-For settings):
// Envoy's wasm host library and the wazero host must answer every request
// alike, on two worker VMs sharing the buckets.
func TestRandomPoliciesAgreeWithWasmhost(t *testing.T) {
	configs, requests := 8, 150
	if testing.Short() {
		configs = 3
	}
	for _, mode := range envoyhost.Modes {
		t.Run(string(mode), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(19, policytest.Seed(t)))
			rejected := 0
			for c := range configs {
				doc := policytest.Config(rng)
				cfg, err := policy.Parse([]byte(doc))
				if err != nil {
					t.Fatalf("configuration %d: %v", c, err)
				}
				hosts := startBoth(t, mode, scenario.Options{WasmPath: plugin(t), Config: []byte(doc), Start: t0, VMs: 2})
				for i := range requests {
					req, vm := scenarioRequest(policytest.Request(rng, cfg.ShadowHeader)), rng.IntN(2)
					var got [2]string
					for k, h := range hosts {
						res, err := h.HTTP(vm, req)
						if err != nil {
							t.Fatalf("configuration %d, request %d on %s: %v", c, i, h.Name(), err)
						}
						got[k] = answerText(res)
						if k == 0 && res.Rejected {
							rejected++
						}
					}
					if got[0] != got[1] {
						t.Fatalf("configuration %d, request %d on VM %d: the hosts differ\nheaders: %q\n%s:\n%s\n%s:\n%s\nconfiguration:\n%s",
							c, i, vm, req.Headers, hosts[0].Name(), got[0], hosts[1].Name(), got[1], doc)
					}
					if rng.IntN(3) == 0 { // mostly under a second, now and then long enough for windows to roll
						d := time.Duration(rng.IntN(3000)) * time.Millisecond
						for _, h := range hosts {
							h.Advance(d)
						}
					}
				}
			}
			if rejected < configs*2 {
				t.Errorf("%d of %d requests rejected: the random policies miss the limits", rejected, configs*requests)
			}
		})
	}
}

// scenarioRequest is a simulated request as the hosts take it.
func scenarioRequest(r simulate.Request) scenario.Request {
	req := scenario.Request{Properties: r.Properties(),
		Headers: []scenario.Header{{":method", r.Method}, {":path", r.Path}, {":authority", r.Host}}}
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		req.Headers = append(req.Headers, scenario.Header{name, r.Headers[name]})
	}
	return req
}
