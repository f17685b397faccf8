package helmtest

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// With policySource: git the admin follows the values: the Deployment
// names the mounted policy and tests as files to follow instead of initial
// ones, and drops the checksum that restarted the pod on each change; run
// with exactly that environment, the admin saves the values' policy and
// tests as git, takes a change of the mounted file without a restart, and
// refuses a save of its own.
func TestChartFollowsThePolicyInGit(t *testing.T) {
	const tests = "tests:\n  - name: a client gets its burst\n    request: {client_address: 10.0.0.1}\n    repeat: 200\n    expect: {status: 200}\n"
	objs, _, err := render(t, "policySource: git\npolicyFileInterval: 1s\npolicyTests: |\n"+indent(tests))
	if err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	env := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if env["SLUICE_POLICY_FILE"] != "/etc/sluice/policy.json" || env["SLUICE_POLICY_TESTS_FILE"] != "/etc/sluice/policy.tests.yaml" ||
		env["SLUICE_POLICY_FILE_INTERVAL"] != "1s" || env["SLUICE_INITIAL_POLICY"] != "" || env["SLUICE_INITIAL_TESTS"] != "" {
		t.Fatalf("the admin's environment: %v", env)
	}
	if _, ok := d.Spec.Template.Annotations["checksum/policy"]; ok {
		t.Error("a change of the policy restarts the admin")
	}

	a := startPodAdmin(t, buildAdmin(t), objs, d, nil)
	if v := currentVersion(t, a.url, chartAdminToken, a.out); v != 2 {
		t.Fatalf("current version %d, want the values' policy saved over the default as 2:\n%s", v, a.out)
	}
	changed := strings.Replace(objs["ConfigMap"][0]["data"].(map[string]any)["policy.json"].(string), "200", "300", 1)
	if err := os.WriteFile(filepath.Join(a.dir, "policy.json"), []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for currentVersion(t, a.url, chartAdminToken, a.out) != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the changed file was not saved:\n%s", a.out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	req, _ := http.NewRequest("POST", a.url+"/api/v1/policy", strings.NewReader(`{"base_version":3,"policy":{"rules":[{"name":"x","action":"exempt"}]}}`))
	req.Header.Set("Authorization", "Bearer "+chartAdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || out["follows"] != filepath.Join(a.dir, "policy.json") {
		t.Errorf("a save on the admin: %d %v", resp.StatusCode, out)
	}
	req, _ = http.NewRequest("GET", a.url+"/api/v1/policy/tests", nil)
	req.Header.Set("Authorization", "Bearer "+chartAdminToken)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if out["tests"] != tests || out["author"] != "git" {
		t.Errorf("the saved tests: %v", out)
	}
	if _, _, err := render(t, "policySource: github\n"); err == nil {
		t.Error("an unknown policySource rendered")
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}
