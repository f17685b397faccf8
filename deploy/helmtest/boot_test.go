package helmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
)

// The chart's environment starts the admin: two replicas rendered with a
// shared PostgreSQL store and fleet mode on PostgreSQL, run as processes
// with exactly the Deployment's variables (addresses made local, the
// tokens and files a pod would get from its Secret and ConfigMap), both
// start on the one initial version, and a save on one is the other's
// current version at once.
func TestChartEnvironmentStartsReplicatedAdmins(t *testing.T) {
	pg := fleettest.StartPostgres(t, fleettest.PostgresOptions{})
	objs, _, err := render(t, fmt.Sprintf(`
replicas: 2
database: {url: %q}
fleet: {enabled: true, backend: postgres, postgres: {url: %q}}
`, pg.URL, pg.URL))
	if err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	bin := buildAdmin(t)
	var versions []int64
	var urls []string
	for range 2 {
		a := startPodAdmin(t, bin, objs, d, nil)
		urls = append(urls, a.url)
		versions = append(versions, currentVersion(t, a.url, chartAdminToken, a.out))
		// Prometheus scrapes the metrics port without a token.
		if m := scrapeMetrics(t, a.metrics+"/metrics"); !strings.Contains(m, "\nsluice_xds_published_version 1\n") {
			t.Errorf("the metrics port does not show version 1 published:\n%s", m)
		}
	}
	if versions[0] != 1 || versions[1] != 1 {
		t.Fatalf("the replicas serve versions %v, want the one initial version 1", versions)
	}
	// A save on one replica is the other's current version within seconds:
	// they share the store.
	body := `{"base_version":1,"message":"from replica 0","policy":{"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":7,"burst":9}}]}}`
	req, _ := http.NewRequest("POST", urls[0]+"/api/v1/policy", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+chartAdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("save on replica 0: %v %v", resp, err)
	}
	resp.Body.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var log strings.Builder
		if v := currentVersion(t, urls[1], chartAdminToken, &log); v == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica 1 does not serve the version saved on replica 0: the replicas do not share the store")
		}
	}
}

// currentVersion waits for the admin at base to answer and returns its
// current policy version.
func currentVersion(t *testing.T, base, token string, log *strings.Builder) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", base+"/api/v1/policy", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var cur struct {
				Version int64 `json:"version"`
			}
			err := json.NewDecoder(resp.Body).Decode(&cur)
			resp.Body.Close()
			if resp.StatusCode == 200 && err == nil {
				return cur.Version
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the admin at %s did not answer:\n%s", base, log)
	return 0
}

func scrapeMetrics(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %s\n%s", url, resp.Status, body)
	}
	return string(body)
}

// buildAdmin builds the admin binary and returns its path.
func buildAdmin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit-admin")
	build := exec.Command("go", "build", "-o", bin, "./admin")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the admin: %v\n%s", err, out)
	}
	return bin
}

const chartAdminToken = "chart-admin-token-0123456789"

// podAdmin is an admin process run with a rendered Deployment's
// environment: its URL, its metrics port's URL and its output.
type podAdmin struct {
	url, metrics string
	out          *strings.Builder
	dir          string // where the ConfigMap's files are, as /etc/sluice in the pod
}

// startPodAdmin runs bin as the Deployment d would, on the initial policy
// of the chart's ConfigMap in objs, with local addresses, files and tokens
// in place of the pod's, and extra for the variables a Secret gives.
func startPodAdmin(t *testing.T, bin string, objs map[string][]map[string]any, d *appsv1.Deployment, extra map[string]string) *podAdmin {
	t.Helper()
	dir := t.TempDir()
	for name, body := range objs["ConfigMap"][0]["data"].(map[string]any) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body.(string)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	local := func() string { return fmt.Sprintf("127.0.0.1:%d", fleettest.FreePort(t)) }
	addr, metrics := local(), local()
	a := &podAdmin{url: "http://" + addr, metrics: "http://" + metrics, out: &strings.Builder{}, dir: dir}
	env := map[string]string{ // podEnv takes only those the Deployment has
		"SLUICE_DATA_DIR": dir, "SLUICE_INITIAL_POLICY": filepath.Join(dir, "policy.json"), "SLUICE_INITIAL_TESTS": filepath.Join(dir, "policy.tests.yaml"),
		"SLUICE_POLICY_FILE": filepath.Join(dir, "policy.json"), "SLUICE_POLICY_TESTS_FILE": filepath.Join(dir, "policy.tests.yaml"),
		"SLUICE_ADMIN_LISTEN": addr, "SLUICE_METRICS_LISTEN": metrics, "SLUICE_XDS_LISTEN": local(), "SLUICE_RLS_LISTEN": local(),
		"SLUICE_ADMIN_TOKEN": chartAdminToken, "SLUICE_TELEMETRY_TOKEN": "chart-telemetry-token-0123456789",
	}
	for k, v := range extra {
		env[k] = v
	}
	cmd := exec.Command(bin)
	cmd.Env = podEnv(t, d, dir, env)
	cmd.Stdout, cmd.Stderr = a.out, a.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return a
}

// podEnv is the admin container's environment as the Deployment renders
// it, with local's values in place of the pod's addresses, files and
// Secrets (a variable from a Secret must be in local).
func podEnv(t *testing.T, d *appsv1.Deployment, home string, local map[string]string) []string {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		v, ok := local[e.Name]
		if !ok {
			if e.ValueFrom != nil {
				t.Fatalf("%s comes from %v, which this test does not provide", e.Name, e.ValueFrom)
			}
			v = e.Value
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}
