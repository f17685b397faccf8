package scenario_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestMigrationGuideRunsEveryExample checks that every JSON example of the
// migration guide is one the scenarios run, so none of them goes untested.
func TestMigrationGuideRunsEveryExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", scenario.MigrationGuide))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var found []string
	for i, l := range lines {
		if l != "```json" {
			continue
		}
		var name string
		ok := i > 0 && strings.HasPrefix(lines[i-1], "<!-- example: ") && strings.HasSuffix(lines[i-1], " -->")
		if ok {
			name = strings.TrimSuffix(strings.TrimPrefix(lines[i-1], "<!-- example: "), " -->")
		}
		if !ok || !slices.Contains(scenario.MigrationExamples, name) {
			t.Errorf("%s:%d: a JSON example no scenario runs (mark it %q and add it to MigrationExamples)",
				scenario.MigrationGuide, i+1, scenario.ExampleMarker("name"))
			continue
		}
		found = append(found, name)
	}
	for _, name := range scenario.MigrationExamples {
		if !slices.Contains(found, name) {
			t.Errorf("%s has no example %q", scenario.MigrationGuide, name)
		}
		if _, err := scenario.DocExample(scenario.MigrationGuide, name); err != nil {
			t.Error(err)
		}
	}
}
