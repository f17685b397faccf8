package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-rl/sluice/admin/fleet"
	"github.com/sluice-rl/sluice/admin/fleet/fleettest"
	"github.com/sluice-rl/sluice/internal/poll"
)

// gatewayLoad is the offer per 20 ms of each (gateway, client): gateway 0
// gets 6 requests (300/s), gateway 1 two (100/s), 400 requests/s in all,
// four times the limit of rule "g".
var gatewayLoad = map[[2]int]int{{0, 0}: 3, {0, 1}: 2, {0, 2}: 1, {1, 0}: 1, {1, 1}: 1}

// TestFleetAdmissionThroughTwoGateways: the real binaries as a user runs
// them (docs/fleet.md): the admin serving the rate limit service on Redis
// or PostgreSQL, two development gateways (two VMs each) with one global
// rule (fleetPolicy: 100/s, burst 100), and HTTP clients offering four
// times the limit, skewed 3:1 between the gateways. The 200s of both
// gateways together stay within burst + rate x T (T from the first request
// sent to the last answered), never over, at most 1% under plus what
// failed calls explain, with the admin's counters (granted, returned,
// backend errors) against the bounds of TestFleetAdmissionAgainstRedis.
// The gateways have no metrics endpoint: the calls the plugins saw fail
// are those the admin answered UNAVAILABLE or saw abandoned.
func TestFleetAdmissionThroughTwoGateways(t *testing.T) {
	_, bin, wasmFile := buildStack(t)
	policyFile := filepath.Join(t.TempDir(), "fleet-policy.json")
	if err := os.WriteFile(policyFile, []byte(fleetPolicy("deny")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, backend := range []struct {
		kind  string                      // fleet.BackendRedis, fleet.BackendPostgres
		flags func(t *testing.T) []string // the admin's backend flags, for a new server
	}{
		{fleet.BackendRedis, func(t *testing.T) []string { return []string{"-redis-addrs", fleettest.StartRedis(t).Addr} }},
		{fleet.BackendPostgres, func(t *testing.T) []string {
			return []string{"-postgres-url", fleettest.StartPostgres(t, fleettest.PostgresOptions{}).URL}
		}},
	} {
		t.Run(backend.kind, func(t *testing.T) {
			// The admin and the gateways start together (the gateways
			// compile the plugin); the gateways stop first at the end.
			rls := "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t))
			metricsAddr := "127.0.0.1:" + strconv.Itoa(fleettest.FreePort(t))
			adminUp := launch(t, "admin", bin, filepath.Join(bin, "ratelimit-admin"),
				append([]string{"-data-dir", t.TempDir(), "-listen", "127.0.0.1:0", "-xds-listen", "off",
					"-metrics-listen", metricsAddr, "-rls-listen", rls, "-initial-policy", policyFile}, backend.flags(t)...),
				[]string{"SLUICE_ADMIN_TOKEN=" + token}, regexp.MustCompile(`rate limit service \(fleet mode\)`))
			var gatewaysUp []func() []string
			for i := range 2 {
				gatewaysUp = append(gatewaysUp, launch(t, fmt.Sprintf("gateway-%d", i+1), bin, filepath.Join(bin, "ratelimit-gateway"),
					[]string{"-listen", "127.0.0.1:0", "-upstream", "demo", "-wasm", wasmFile, "-config", policyFile,
						"-node-id", fmt.Sprintf("gw-%d", i+1), "-vms", "2", "-cluster", "rls=h2c://" + rls},
					nil, regexp.MustCompile(`gateway is running: (http://\S+)`)))
			}
			adminUp()
			var gateways []string
			for _, up := range gatewaysUp {
				gateways = append(gateways, up()[1])
			}
			client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: len(gatewayLoad)}}
			var unexpected atomic.Int64
			request := func(gw int, tenant string) bool {
				req, _ := http.NewRequest("GET", gateways[gw]+"/", nil)
				req.Header.Set("x-tenant", tenant)
				resp, err := client.Do(req)
				if err != nil {
					unexpected.Add(1)
					return false
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
					unexpected.Add(1)
				}
				return resp.StatusCode == http.StatusOK
			}
			// Another tenant first: the gateways' connections to the
			// admin and the admin's to its backend are up before the
			// load starts (the bucket of "acme" is full until its first
			// ask; time spent connecting would not refill it).
			for gw := range gateways {
				poll.Within(t, 10*time.Second, "a warm-up request admitted", func() bool { return request(gw, "warm-up") })
			}
			unexpected.Store(0)

			res := offerLoad(gatewayLoad, len(gateways), admissionLoad, func(gw, _ int) bool { return request(gw, "acme") })
			families := scrape(t, "http://"+metricsAddr+"/metrics")
			metric := func(name string, labels ...string) float64 { return sample(families, name, labels...) }
			failed := metric("sluice_fleet_rls_requests_total", "result", "unavailable") + metric("sluice_fleet_rls_requests_total", "result", "abandoned")
			checkAdmissionBounds(t, admissionRun{res: res, hosts: len(gateways), metric: metric, kind: backend.kind, pluginErrors: failed})
			if n := unexpected.Load(); n != 0 {
				t.Errorf("%d requests answered neither 200 nor 429", n)
			}
		})
	}
}

// scrape reads the Prometheus text at url.
func scrape(t *testing.T, url string) []*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	var families []*dto.MetricFamily
	for _, f := range byName {
		families = append(families, f)
	}
	return families
}
