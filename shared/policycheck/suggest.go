package policycheck

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/limiter"
	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// TestFor writes a test of one request as a test file holds it: the
// request as spec gives it, and what cfg answers it from fresh state
// (every bucket full, as a test starts) as its expectation: the status,
// the rule whose answer it is, and the rule that applies in each policy.
// It is how the simulator page offers a simulated request as a test; the
// answer may differ from the simulation's, which started from the state
// telemetry knows.
func TestFor(cfg *policy.Config, spec simulate.RequestSpec) (string, error) {
	req, err := spec.Build()
	if err != nil {
		return "", err
	}
	res := simulate.Run(cfg, req, simulate.Options{Now: limiter.Seconds(DefaultStart.UnixNano())})
	expect := flow()
	add(expect, "status", strconv.Itoa(status(&res)))
	add(expect, "rule", res.Rule)
	applies := flow()
	for _, p := range res.Policies {
		add(applies, p.Name, applied(&res, p.Name))
	}
	expect.Content = append(expect.Content, scalar("applies"), applies)

	test := &yaml.Node{Kind: yaml.MappingNode}
	add(test, "name", testName(req, &res))
	test.Content = append(test.Content, scalar("request"), requestNode(spec))
	test.Content = append(test.Content, scalar("expect"), expect)
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{test}}); err != nil {
		return "", err
	}
	return b.String(), enc.Close()
}

// testName says what the test checks, in words.
func testName(req simulate.Request, res *simulate.Result) string {
	verdict := "is let through"
	if res.Status != 0 {
		verdict = "gets " + strconv.Itoa(res.Status)
	}
	if res.Rule != "" {
		verdict += " (rule " + res.Rule + ")"
	}
	return req.Method + " " + req.Path + " " + verdict
}

// requestNode is spec as a test file writes it: the fields given, small
// mappings on one line.
func requestNode(spec simulate.RequestSpec) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range []struct{ name, value string }{
		{"method", spec.Method}, {"path", spec.Path}, {"host", spec.Host}, {"client_address", spec.ClientAddress},
		{"peer_principal", spec.PeerPrincipal}, {"route", spec.Route}, {"cluster", spec.Cluster}, {"connection", string(spec.Connection)}, {"jwt", spec.JWT},
	} {
		if strings.TrimSpace(f.value) != "" {
			add(n, f.name, strings.TrimSpace(f.value))
		}
	}
	addValues(n, "headers", spec.Headers)
	addValues(n, "query", spec.Query)
	for _, o := range []struct {
		name string
		raw  json.RawMessage
	}{{"claims", spec.Claims}, {"metadata", spec.Metadata}} {
		var v any
		if len(o.raw) == 0 || json.Unmarshal(o.raw, &v) != nil || v == nil {
			continue
		}
		var vn yaml.Node
		if vn.Encode(v) == nil {
			vn.Style = yaml.FlowStyle
			n.Content = append(n.Content, scalar(o.name), &vn)
		}
	}
	if r := spec.Response; r != nil {
		rn := &yaml.Node{Kind: yaml.MappingNode}
		if r.Status != 0 {
			add(rn, "status", strconv.Itoa(r.Status))
		}
		addValues(rn, "headers", r.Headers)
		addValues(rn, "trailers", r.Trailers)
		if r.Body != "" {
			add(rn, "body", r.Body)
		}
		n.Content = append(n.Content, scalar("response"), rn)
	}
	return n
}

// addValues adds a mapping of names to values on one line, by name
// (nothing when empty).
func addValues(n *yaml.Node, name string, values map[string]string) {
	if len(values) == 0 {
		return
	}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	sort.Strings(names)
	fm := flow()
	for _, k := range names {
		add(fm, k, values[k])
	}
	n.Content = append(n.Content, scalar(name), fm)
}

func flow() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle} }

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }

// add appends name: value to a mapping, value quoted when YAML would
// read it as something other than this text ("" and "200" stay text
// where a name is expected, numbers stay numbers for status).
func add(m *yaml.Node, name, value string) {
	v := scalar(value)
	if name != "status" {
		v.Tag = "!!str"
	}
	m.Content = append(m.Content, scalar(name), v)
}
