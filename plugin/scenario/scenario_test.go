package scenario_test

import (
	"testing"

	"github.com/sluice-rl/sluice/plugin/scenario"
)

// TestScenariosUnderWasmhost runs every scenario under the wazero host.
// plugin/envoyhost runs the same ones under Envoy's own wasm host.
func TestScenariosUnderWasmhost(t *testing.T) {
	if len(scenario.Cases()) == 0 {
		t.Fatal("no scenarios registered")
	}
	scenario.Run(t, scenario.Wasmhost())
}
