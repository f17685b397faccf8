package gitops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check says, without an admin, what an admin following the policy would
// do with it: apply it (exit 0, warnings shown), or keep the current
// version because the file is invalid or fails its tests (exit 1).
func TestCheckSaysWhatAnAdminFollowingThePolicyWouldDo(t *testing.T) {
	t.Setenv("SLUICE_ADMIN_TOKEN", "")
	t.Setenv("SLUICE_ADMIN_URL", "http://127.0.0.1:1") // never called
	if code, out, errs := runOffline("", "check", writeFile(t, tiers), writeTests(t, tiersTests)); code != ExitOK ||
		!strings.Contains(out, "PASS: 1 test, 21 requests\n") || !strings.HasSuffix(out, "policy.json: valid; an admin following it would apply it\n") {
		t.Errorf("a valid, tested policy: exit %d, %q %q", code, out, errs)
	}
	ended := strings.Replace(tiers, `"name":"free",`, `"name":"free","until":"2020-01-01T00:00:00Z",`, 1)
	if ended == tiers {
		t.Fatal("the tiers policy has no rule named free")
	}
	if code, out, _ := runOffline(ended, "check", "-"); code != ExitOK || !strings.Contains(out, `warning: rule "free": ended on 2020-01-01T00:00:00Z`) {
		t.Errorf("a rule that ended: exit %d, %q", code, out)
	}
	if code, out, _ := runOffline("", "check", writeFile(t, bad)); code != ExitChanges || !strings.Contains(out, "rules[0].algorithm_config.burst: ") {
		t.Errorf("an invalid policy: exit %d, %q", code, out)
	}
	burst30 := strings.Replace(tiers, `"burst":20`, `"burst":30`, 1)
	if code, out, _ := runOffline(burst30, "check", "-", writeTests(t, tiersTests)); code != ExitChanges || !strings.Contains(out, "FAIL  a key gets a burst of 20") || strings.Contains(out, "would apply") {
		t.Errorf("a failing test: exit %d, %q", code, out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check"}, "give the policy file"},
		{[]string{"check", "a", "b", "c"}, "give the policy file"},
		{[]string{"check", "-values", "v.yaml", "p.json"}, "not both"},
		{[]string{"check", "-values", filepath.Join(t.TempDir(), "none.yaml")}, "no such file"},
	} {
		if code, _, errs := runOffline("", c.args...); code != ExitError || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q", c.args, code, errs)
		}
	}
}

// check -values reads the chart's policy and policyTests, as the chart
// writes them for an admin with policySource: git.
func TestCheckReadsTheChartsValues(t *testing.T) {
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const values = `policySource: git
policy:
  rules:
    - name: per-ip
      limit_keys: ["ip:address"]
      algorithm: token_bucket
      algorithm_config: {rps: 1, burst: 2}
policyTests: |
  tests:
    - name: two at once, then wait
      steps:
        - repeat: 2
          expect: {status: 200}
        - expect: {status: 429, rule: per-ip}
`
	if code, out, errs := runOffline("", "check", "-values", write(values)); code != ExitOK || !strings.Contains(out, "PASS: 1 test, 3 requests") || !strings.Contains(out, "would apply it") {
		t.Errorf("the values: exit %d, %q %q", code, out, errs)
	}
	if code, out, _ := runOffline("", "check", "-values", write(strings.Replace(values, "burst: 2", "burst: 3", 1))); code != ExitChanges || !strings.Contains(out, "FAIL  two at once, then wait") {
		t.Errorf("values whose tests fail: exit %d, %q", code, out)
	}
	if code, out, _ := runOffline("", "check", "-values", write(strings.Replace(values, "rps: 1", "rps: 5", 1))); code != ExitChanges || !strings.Contains(out, "algorithm_config.burst") {
		t.Errorf("an invalid policy in the values: exit %d, %q", code, out)
	}
	if code, _, errs := runOffline("", "check", "-values", write("policySource: git\n")); code != ExitError || !strings.Contains(errs, "no policy") {
		t.Errorf("values without a policy: exit %d, %q", code, errs)
	}
}
