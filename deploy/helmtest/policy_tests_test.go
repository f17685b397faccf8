package helmtest

import (
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policycheck"
)

// The chart hands policyTests to the admin as its initial tests: a file
// beside the policy in the ConfigMap, and SLUICE_INITIAL_TESTS naming it;
// without the value, neither. The guide's example pins the chart's
// default policy (100/s per address, a burst of 200, in shadow mode).
func TestChartCarriesThePolicyTests(t *testing.T) {
	raw, err := os.ReadFile("../../docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(raw), "```yaml\n# values: policy-tests.yaml\n")
	if !ok {
		t.Fatal("docs/kubernetes.md has no policy-tests.yaml values")
	}
	policyTestsValues, _, _ := strings.Cut(after, "```")
	initialTests := func(objs map[string][]map[string]any) (string, bool, string) {
		d := decode[appsv1.Deployment](t, objs["Deployment"][0])
		env := ""
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "SLUICE_INITIAL_TESTS" {
				env = e.Value
			}
		}
		cm := decode[corev1.ConfigMap](t, objs["ConfigMap"][0])
		body, ok := cm.Data["policy.tests.yaml"]
		return body, ok, env
	}
	objs, _, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, env := initialTests(objs); ok || env != "" {
		t.Fatalf("default values: tests %v, SLUICE_INITIAL_TESTS %q", ok, env)
	}
	objs, _, err = render(t, policyTestsValues)
	if err != nil {
		t.Fatal(err)
	}
	body, ok, env := initialTests(objs)
	if !ok || env != "/etc/sluice/policy.tests.yaml" {
		t.Fatalf("with policyTests: tests %v, SLUICE_INITIAL_TESTS %q", ok, env)
	}
	suite, err := policycheck.Parse([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	cm := decode[corev1.ConfigMap](t, objs["ConfigMap"][0])
	cfg, err := policy.Parse([]byte(cm.Data["policy.json"]))
	if err != nil {
		t.Fatal(err)
	}
	if rep := policycheck.Run(cfg, suite, policycheck.Options{}); rep.Failed() != 0 || len(rep.Tests) != 1 {
		t.Fatalf("the tests against the chart's policy:\n%s", rep.Text(true))
	}
	if _, _, err := render(t, "policyTests: [not, text]\n"); err == nil {
		t.Error("a list for policyTests rendered; the values schema should refuse it")
	}
}

// requireReview turns the admin's review on; off, the variable is absent.
func TestChartRequiresReviewWhenAsked(t *testing.T) {
	env := func(vals string) (string, bool) {
		objs, _, err := render(t, vals)
		if err != nil {
			t.Fatal(err)
		}
		d := decode[appsv1.Deployment](t, objs["Deployment"][0])
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "SLUICE_REQUIRE_REVIEW" {
				return e.Value, true
			}
		}
		return "", false
	}
	if _, ok := env(""); ok {
		t.Error("review required by default")
	}
	if v, ok := env("requireReview: true\n"); !ok || v != "true" {
		t.Errorf("requireReview: true: %q %v", v, ok)
	}
	if _, _, err := render(t, "requireReview: yes please\n"); err == nil {
		t.Error("a string for requireReview rendered")
	}
	objs, _, err := render(t, "requireReview: true\nreviewPolicies: [payments-*, checkout]\n")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range decode[appsv1.Deployment](t, objs["Deployment"][0]).Spec.Template.Spec.Containers[0].Env {
		found = found || e.Name == "SLUICE_REVIEW_POLICIES" && e.Value == "payments-*,checkout"
	}
	if !found {
		t.Error("reviewPolicies did not become SLUICE_REVIEW_POLICIES")
	}
	for _, bad := range []string{"reviewPolicies: [payments-*]\n", "requireReview: true\nreviewPolicies: [pay*ments]\n"} {
		if _, _, err := render(t, bad); err == nil {
			t.Errorf("%q rendered", bad)
		}
	}
}
