package istio

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/istio/istiocrd"
)

const withClusters = `{"telemetry":{"cluster":"outbound|9000||sluice.sluice.svc.cluster.local","token_env":"T"},"fleet":{"cluster":"outbound|18081||sluice.sluice.svc.cluster.local"},"policies":[{"name":"p","rules":[{"name":"r","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":1,"burst":1}}]}]}`

func TestTargetsBecomeTargetRefs(t *testing.T) {
	targets, err := ParseTargets("Gateway/public, Service/reviews,ServiceEntry/api.example.com,GatewayClass/istio-waypoint")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Render([]byte(policyJSON), 3, Options{Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	wp := unmarshalSpec(t, m.Spec())
	checkPlugin(t, wp, DefaultURL)
	if wp.GetSelector() != nil {
		t.Errorf("selector %v beside targetRefs", wp.GetSelector())
	}
	var got []string
	for _, r := range wp.GetTargetRefs() {
		got = append(got, fmt.Sprintf("%s|%s|%s|%s", r.GetGroup(), r.GetKind(), r.GetName(), r.GetNamespace()))
	}
	want := []string{
		"gateway.networking.k8s.io|Gateway|public|",
		"|Service|reviews|",
		"networking.istio.io|ServiceEntry|api.example.com|",
		"gateway.networking.k8s.io|GatewayClass|istio-waypoint|",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("targetRefs\n%q\nwant\n%q", got, want)
	}
	y, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if err := istiocrd.Check(y); err != nil {
		t.Errorf("the YAML does not pass Istio's CRD schema: %v\n%s", err, y)
	}
}

func TestTargetsAreRefusedAsIstioWould(t *testing.T) {
	many := make([]string, MaxTargets+1)
	for i := range many {
		many[i] = fmt.Sprintf("Gateway/g%d", i)
	}
	for _, c := range []struct{ in, want string }{
		{"Gateway", "not Kind/name"},
		{"Gateway/", "not Kind/name"},
		{"HTTPRoute/backend", `kind "HTTPRoute" cannot carry a WasmPlugin; use Gateway, GatewayClass, Service, ServiceEntry`},
		{"gateway/public", `kind "gateway"`},
		{"Service/Reviews", "not a valid Service name"},
		{"Service/1st", "not a valid Service name"},
		{"Gateway/Public", "not a valid Kubernetes name"},
		{"Gateway/a,Gateway/a", "Gateway/a given twice"},
		{strings.Join(many, ","), "17 targets, Istio takes at most 16"},
	} {
		if _, err := ParseTargets(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.in, err, c.want)
		}
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Targets: []TargetRef{{Group: "networking.istio.io", Kind: "Gateway", Name: "g"}}}, `Gateway is in API group "gateway.networking.k8s.io", not "networking.istio.io"`},
		{Options{Selector: map[string]string{"app": "x"}, Targets: []TargetRef{{Group: "gateway.networking.k8s.io", Kind: "Gateway", Name: "g"}}}, "selector and target: Istio takes one or the other"},
	} {
		if _, err := Render([]byte(policyJSON), 1, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.opts, err, c.want)
		}
	}
	// "core" is the core group's other spelling.
	if _, err := Render([]byte(policyJSON), 1, Options{Targets: []TargetRef{{Group: "core", Kind: "Service", Name: "s"}}}); err != nil {
		t.Errorf("group core: %v", err)
	}
}

func TestTargetWarnings(t *testing.T) {
	for _, c := range []struct {
		name, targets, namespace, policy string
		want                             []string // each a warning's fragment; none: no warning
	}{
		{"waypoint of a Service, policy calling the admin", "Service/reviews", "", withClusters,
			[]string{`target Service/reviews runs the filter in waypoints`, `telemetry.cluster "outbound|9000||sluice.sluice.svc.cluster.local" and fleet.cluster`}},
		{"the waypoints' class", "GatewayClass/istio-waypoint", "", withClusters, []string{"target GatewayClass/istio-waypoint runs the filter in waypoints"}},
		{"a ServiceEntry's waypoint", "Gateway/public,ServiceEntry/ext", "", withClusters, []string{"target ServiceEntry/ext runs"}},
		{"a Gateway: an ingress has the clusters", "Gateway/public", "", withClusters, nil},
		{"a waypoint, policy calling nothing", "Service/reviews", "", policyJSON, nil},
		{"a GatewayClass outside the root namespace", "GatewayClass/istio", "apps", policyJSON, []string{"target GatewayClass/istio applies only from the mesh's root namespace"}},
		{"a GatewayClass in the root namespace", "GatewayClass/istio", "istio-system", policyJSON, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			targets, err := ParseTargets(c.targets)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Render([]byte(c.policy), 1, Options{Targets: targets, Namespace: c.namespace})
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(m.Warnings(), "\n")
			if len(c.want) == 0 && got != "" {
				t.Errorf("warnings %q, want none", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("warnings %q, want one with %q", got, w)
				}
			}
			y, _ := m.YAML()
			if len(c.want) > 0 && !bytes.Contains(y, []byte("# WARNING: target ")) {
				t.Errorf("the YAML carries no warning:\n%s", y)
			}
		})
	}
}

// FuzzParseTargets: the flag's and the query's targets never panic the
// parser, and what it accepts renders a WasmPlugin.
func FuzzParseTargets(f *testing.F) {
	for _, s := range []string{"Gateway/public", "Service/reviews, ServiceEntry/api.example.com", "GatewayClass/istio-waypoint",
		"HTTPRoute/x", "Gateway/", "/x", ",", "Gateway/a,Gateway/a", "Service/Reviews", "Gateway/a/b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		targets, err := ParseTargets(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "target") {
				t.Fatalf("%q: an error that does not name the field: %v", s, err)
			}
			return
		}
		if _, err := Render([]byte(policyJSON), 1, Options{Targets: targets}); err != nil {
			t.Fatalf("%q parsed to %v, which does not render: %v", s, targets, err)
		}
	})
}
