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

// TestGuidesRunEveryExample checks that every JSON example of the
// migration guide and of the LLM guide is one the scenarios run, so none
// of them goes untested.
func TestGuidesRunEveryExample(t *testing.T) {
	for page, names := range map[string][]string{
		scenario.MigrationGuide: scenario.MigrationExamples,
		scenario.LLMGuide:       scenario.LLMGuideExamples,
	} {
		checkEveryExampleRuns(t, page, names)
	}
}

func checkEveryExampleRuns(t *testing.T, page string, names []string) {
	data, err := os.ReadFile(filepath.Join("..", "..", page))
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
		if !ok || !slices.Contains(names, name) {
			t.Errorf("%s:%d: a JSON example no scenario runs (mark it %q and add it to the page's list of examples)",
				page, i+1, scenario.ExampleMarker("name"))
			continue
		}
		found = append(found, name)
	}
	for _, name := range names {
		if !slices.Contains(found, name) {
			t.Errorf("%s has no example %q", page, name)
		}
		if _, err := scenario.DocExample(page, name); err != nil {
			t.Error(err)
		}
	}
}
