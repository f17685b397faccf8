package policy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docBlock is a fenced code block of docs/configuration.md.
type docBlock struct {
	lang   string // info string after ```
	marker string // the HTML comment on the line before the fence, if any
	body   string
	line   int
}

func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatalf("reading the configuration reference: %v", err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []docBlock
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		b := docBlock{lang: strings.TrimPrefix(lines[i], "```"), line: i + 1}
		if i > 0 && strings.HasPrefix(lines[i-1], "<!--") {
			b.marker = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(lines[i-1], "<!--"), "-->"))
		}
		j := i + 1
		for j < len(lines) && !strings.HasPrefix(lines[j], "```") {
			j++
		}
		b.body = strings.Join(lines[i+1:j], "\n")
		blocks = append(blocks, b)
		i = j
	}
	return blocks
}

// TestDocsExamples parses every JSON example of docs/configuration.md:
// complete configurations must be valid, fragments must be JSON, and the
// invalid example must fail with exactly the errors shown after it.
func TestDocsExamples(t *testing.T) {
	blocks := docBlocks(t)
	bodies := map[string]bool{}
	byMarker := map[string]string{}
	nJSON := 0
	for i, b := range blocks {
		bodies[b.body] = true
		if b.marker != "" {
			byMarker[b.marker] = b.body
		}
		if b.lang != "json" {
			continue
		}
		nJSON++
		switch {
		case b.marker == "fragment" || strings.HasPrefix(b.marker, "normalized of:"):
			if !json.Valid([]byte(b.body)) {
				t.Errorf("line %d: fragment is not valid JSON", b.line)
			}
		case b.marker == "invalid":
			_, err := Parse([]byte(b.body))
			if err == nil {
				t.Errorf("line %d: invalid example parses", b.line)
				continue
			}
			if i+1 >= len(blocks) || blocks[i+1].body != err.Error() {
				t.Errorf("line %d: the block after the invalid example must be its errors:\n%s", b.line, err)
			}
		default:
			if _, err := Parse([]byte(b.body)); err != nil {
				t.Errorf("line %d: example does not parse:\n%v", b.line, err)
			}
		}
	}
	if nJSON < 8 {
		t.Errorf("found only %d JSON examples; did the fences change?", nJSON)
	}
	for name, want := range map[string]string{
		"fairvisor configuration": fairvisorConfiguration,
		"fairvisor variable cost": fairvisorVariableCost,
		"fairvisor global-rps":    fairvisorGlobalRPS,
		"fairvisor tiered":        fairvisorTiered,
		"configuration example":   configurationExample,
	} {
		if !bodies[want] {
			t.Errorf("docs do not contain %s verbatim", name)
		}
	}
	tiered, ok := byMarker["fairvisor-tiered"]
	if !ok {
		t.Fatal("no block marked fairvisor-tiered")
	}
	c := mustParse(t, tiered)
	norm, _ := c.MarshalJSON()
	if byMarker["normalized of: fairvisor-tiered"] != string(norm) {
		t.Errorf("normalized example is stale; MarshalJSON gives\n%s", norm)
	}
}

// TestDocsErrorSamples checks that the sample messages in the docs are the
// ones Parse produces.
func TestDocsErrorSamples(t *testing.T) {
	cases := map[string]string{
		`mode: must be "enforce" or "shadow", got "audit"`: top(`"mode":"audit"`),
		`policies[0].rules[1].algorithm_config.burst: 5 is below tokens_per_second 10; burst must be >= tokens_per_second`: policies(`{"name":"p","rules":[` + baseRule + `,
			{"name":"s","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":10,"burst":5}}]}`),
		`policies[0].rules[2].name: duplicate rule name "free" (also at policies[0].rules[0].name); rule names must be unique across all policies because they key the bucket state`: policies(`{"name":"p","rules":[` +
			strings.Replace(baseRule, `"r"`, `"free"`, 1) + "," + strings.Replace(baseRule, `"r"`, `"x"`, 1) + "," + strings.Replace(baseRule, `"r"`, `"free"`, 1) + `]}`),
		`rules[0].algorithm_config.bursts: unknown field "bursts" (did you mean "burst"?); allowed fields here: tokens_per_second, rps, burst, cost_source, fixed_cost, default_cost, max_delay_ms, max_debt, block_seconds`: withTB(`{"rps":5,"burst":10,"bursts":1}`),
		`rules[0].match["jwt:plan"]: must be a string (the exact value to match) or an object with one operator such as {"prefix": "/api/"}, got a number`:                                                                   withMatch(`{"jwt:plan":1}`),
		`invalid JSON at byte offset 13 (line 2, column 12): invalid character 'x' looking for beginning of value`:                                                                                                           "{\n  \"rules\": x\n}",
	}
	var docs strings.Builder
	for _, b := range docBlocks(t) {
		docs.WriteString(b.body + "\n")
	}
	for want, in := range cases {
		_, err := Parse([]byte(in))
		if err == nil || err.Error() != want {
			t.Errorf("Parse gives\n%v\nwant\n%s", err, want)
		}
		if !strings.Contains(docs.String(), want+"\n") {
			t.Errorf("docs do not show %q", want)
		}
	}
}
